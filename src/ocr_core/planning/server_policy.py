"""What the servers of a run are held to, decided once from the command line: where they are, how long a start and a
recovery may take, how often one may restart, and the credentials each address gets.

serving/ receives this record (and each replica's launch from the engine plan), never the command line itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..facts import ModelFacts
from ..settings import Settings
from .defaults import DEFAULT_SERVER
from .serve_flags import flag_value

# The command line's flags that shape only a server this run starts: given for one it did not, each gets a note.
SPAWN_ONLY_FLAGS = ("extra_serve_args", "data_parallel_size", "api_server_count", "replicas", "engine_cache")


@dataclass(frozen=True)
class ServerPolicy:
    """`server`: the --server value (one URL, or several separated by commas); `named_server`: the user gave it
    (else the default local address, where the run starts its own); `recipe_names`: the recipe's
    --served-model-name, which a reused server may serve under; `spawn_only`: notes for flags that shape only a
    server this run starts."""

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


def policy_of(settings: Settings, facts: ModelFacts) -> ServerPolicy:
    names = flag_value(facts.serve_args, "--served-model-name")
    given = tuple(
        f"--{name.replace('_', '-')} {value}" for name in SPAWN_ONLY_FLAGS if (value := getattr(settings, name, None))
    )
    return ServerPolicy(
        server=settings.server or DEFAULT_SERVER,
        named_server=(settings.server or DEFAULT_SERVER) != DEFAULT_SERVER,
        model=settings.model,
        max_model_len=settings.max_model_len,
        max_tokens=settings.max_tokens,
        startup_timeout=settings.startup_timeout or 0.0,
        max_restarts=settings.max_restarts or 0,
        recipe_names=tuple(names.split()) if names else (),
        spawn_only=given,
        hf_token=settings.hf_token,
        api_key=settings.api_key,
    )
