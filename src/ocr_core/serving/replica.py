"""One endpoint of the fleet, with what the driver counts of it: pages outstanding and answered, and its state."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field

from .handle import ServerHandle

STARTING, SERVING, RECOVERING, GONE = "starting", "serving", "recovering", "gone"


@dataclass(eq=False)
class Replica:
    """One endpoint of the fleet, with what the driver counts of it."""

    index: int
    handle: ServerHandle
    state: str = STARTING
    outstanding: int = 0
    answered: int = 0
    why_gone: str | None = None
    handback: asyncio.Event = field(default_factory=asyncio.Event)
    handback_reason: str = ""
    in_flight: set[str] = field(default_factory=set)
    unanswered: dict[str, int] = field(default_factory=dict)
    clock: itertools.count = field(default_factory=itertools.count)
    version: str | None = None
    judged: int = 0
    cleared: bool = False

    @property
    def url(self) -> str:
        return self.handle.url

    def provenance(self) -> str:
        """What a row this replica answered records of where its text came from (progress.RowResult.server)."""
        return json.dumps({"server": self.url, "vllm_version": self.version})

    def hand_back(self, reason: str) -> None:
        """The pages in flight here go back to the pump at once (the server is hung or gone); later ones wait anew."""
        self.handback_reason = reason
        self.handback.set()
        self.handback = asyncio.Event()

    def answered_after(self, sent: int) -> None:
        """An answer to a request sent at `sent`: the engine outlived every failure before it, so none of those
        pages was in flight at a death."""
        self.unanswered = {page: failed for page, failed in self.unanswered.items() if failed > sent}

    def witnesses(self) -> set[str]:
        """The pages in flight here, and those that failed here since the engine last proved alive."""
        pages = self.in_flight | set(self.unanswered)
        self.unanswered = {}
        return pages

    def report(self) -> dict:
        """This replica's line of the summary: where it ran, how many pages it answered, its restarts, and where
        the start of a server this run spawned went (startup_log.py)."""
        return {
            "url": self.url,
            "gpu": self.handle.slot.gpu,
            "pages": self.answered,
            "restarts": self.handle.restarts,
            "state": self.state,
            "startup": self.handle.startup,
        }
