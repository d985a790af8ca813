"""What the servers of a run are held to, decided once from the command line: where they are, how long a start and a
recovery may take, how often one may restart, and the credentials each address gets.

serving/ receives this record (and each replica's launch from the engine plan), never the command line itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerPolicy:
    """`server`: the --server value (one URL, or several separated by commas), read once into `urls`; `local`:
    every address is on this machine; `named_server`: the user gave it (else the default local address, where the
    run starts its own); `recipe_names`: the recipe's --served-model-name, which a reused server may serve under;
    `spawn_only`: notes for flags that shape only a server this run starts; `answering`: a server already answered
    at the run's one local address when the plan was made; `vllm_found`: a `vllm` command is on PATH."""

    server: str
    named_server: bool
    model: str
    max_model_len: int
    max_tokens: int | None
    startup_timeout: float
    max_restarts: int
    recipe_names: tuple[str, ...] = ()
    spawn_only: tuple[str, ...] = ()
    hf_token: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    urls: tuple[str, ...] = ()
    local: bool = False
    answering: bool = False
    vllm_found: bool = True

    @property
    def may_start(self) -> bool:
        """Whether this run may start servers: one --server address, on this machine."""
        return len(self.urls) == 1 and self.local

    @property
    def will_start(self) -> bool:
        """Whether this run starts its servers (given rows to do): it may, and no server answered there."""
        return self.may_start and not self.answering
