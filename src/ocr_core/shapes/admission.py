"""The pump's admission loop: one page admitted per free slot of the window, each page a task of its own, until
every row has been admitted and every page admitted has ended.

Whatever happens to a page, exactly one outcome is recorded for it, except pages still in flight when the run is
stopped: those are redone by the next run (at most one window). A page task that fails the job stops admission at
once, and the loop raises that failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol

from ..inputs.source import RowInput
from .page_attempts import Page
from .page_life import Held
from .window import Window

Complete = Callable[[RowInput], Awaitable[Page]]


class Gauges(Protocol):
    """The fleet's queue as the window adapts to it (watches.QueueGauges)."""

    waiting: float | None
    running: float | None


class Shows(Protocol):
    """Where the pages in flight and the window's limit are shown (tally.ProgressBar)."""

    def show(self, in_flight: int, window: int) -> None: ...


class Admission:
    """Admits pages into the `window`, counting them in `held`; `record` keeps each page's outcome. A freed slot
    takes the queue's `gauges` (the adaptive window moves on them) and is shown in `progress`."""

    def __init__(
        self, window: Window, held: Held, gauges: Gauges, progress: Shows, record: Callable[[Page], None]
    ) -> None:
        self.window = window
        self.held = held
        self.gauges = gauges
        self.progress = progress
        self.record = record
        self.failure: Exception | None = None
        self.tasks: set[asyncio.Task] = set()

    async def feed(self, rows: Iterator[RowInput], complete: Complete) -> None:
        """Admits one page per free slot; a page task that fails the job stops admission at once. The tasks still
        running when this ends by an error are the caller's to cancel (`tasks`)."""
        for row in rows:
            await self.window.acquire()
            if self.failure is not None:
                raise self.failure
            task = asyncio.create_task(self.process(row, complete))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        self.held.fed_all = True
        while self.tasks and self.failure is None:
            await asyncio.wait(set(self.tasks), return_when=asyncio.FIRST_COMPLETED)
        if self.failure is not None:
            raise self.failure

    async def process(self, row: RowInput, complete: Complete) -> None:
        """Records the page's outcome and frees its slot.

        An exception that fails the job is kept in `failure` before the slot is freed: the freed slot wakes `feed`
        before this task's completion would, and `feed` must not admit another page then.
        """
        acknowledged = False
        self.held.open += 1
        try:
            page = await complete(row)
            acknowledged = page.answered
            self.record(page)
        except Exception as exc:
            self.failure = self.failure or exc
        finally:
            self.held.open -= 1
            await self.window.release(self.gauges.waiting, self.gauges.running, acknowledged)
            self.progress.show(self.window.in_flight, self.window.limit)
