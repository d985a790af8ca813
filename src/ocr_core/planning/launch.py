"""How this run was started: the script's file name, its shape and its command line as given.

It also says what the script is (the released bytes or a modified copy), which every row this run writes records,
and the command that redoes the run's flagged rows (`rerun`), which the command line writes once for the canary's
message, and the one that goes on after pages were cut off at max_tokens (`raised`: twice the tokens, and
--retry-errors): only the top knows whether the run came from a clone, a job or this machine's `uv run`.

One record for what the job command, the card, the manifest and the canary say about the run, handed along with
the settings instead of loose values.
"""

from __future__ import annotations

from dataclasses import dataclass

from .provenance import ScriptSource


@dataclass(frozen=True)
class Launch:
    script: str
    mode: str
    argv: list[str]
    origin: ScriptSource | None = None
    rerun: str = ""
    raised: str = ""
