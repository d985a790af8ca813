"""What a shape hands back when it has driven a job's pages, whichever way the driving ended."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, TextIO

from ..preparation.job import Job
from .signals import StopSignals
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


DrivePages = Callable[[Job, StopSignals, list[TextIO]], Drive]
