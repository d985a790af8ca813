"""How this run was started: the script's file name, its shape and its command line as given.

It also says what the script is (the released bytes or a modified copy), which every row this run writes records.

One record for what the job command, the card, the manifest and a spawned server's error message say about the
run, handed along with the settings instead of three loose values.
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
