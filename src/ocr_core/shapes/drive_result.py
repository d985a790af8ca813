"""What a shape hands back when it has driven a job's pages, whichever way the driving ended."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, TextIO

from ..console import say
from ..errors import CutOff, JobFailed
from ..preparation.job import Job
from .signals import KEPT, StopSignals
from .tally import Tally


class Feeding(NamedTuple):
    """How the pages were fed: the window (or batch) at the end, its peak and cap, the most pages in flight."""

    limit: int
    peak_in_flight: int
    peak_limit: int
    cap: int


@dataclass
class Drive:
    """What driving the pages left behind, whichever way it ended."""

    tally: Tally = field(default_factory=Tally)
    window: Feeding = field(default_factory=lambda: Feeding(1, 0, 1, 1))
    model_name: str | None = None
    version: str | None = None
    extra: dict = field(default_factory=dict)
    failure: str | None = None
    serving: str | None = None
    next_command: str | None = None
    """The command that goes on where the rerun of the same one would stop the same way (pages cut off)."""

    def fail(self, exc: JobFailed, raised: str) -> None:
        """Why the pages stopped, said once: finished rows are kept, and the way on is the same command, or, for
        pages cut off at max_tokens, `raised`, which doubles it and redoes the cut-off rows."""
        self.failure = str(exc)
        if not isinstance(exc, CutOff):
            say(f"error: {exc}\n{KEPT.capitalize()}.")
            return
        self.next_command = raised
        say(
            f"error: {exc}\nFinished rows are kept; this goes on with twice the tokens and redoes the cut-off "
            f"rows:\n  {raised}"
        )


DrivePages = Callable[[Job, StopSignals, list[TextIO]], Drive]
