"""The pump: keeps one window of pages in flight over the fleet's servers until every row has an outcome.

One asyncio task per page in flight; image preparation runs in a thread pool so the event loop only moves bytes.
The pump composes its parts and records each page's outcome: the admission loop (admission.py) keeps the window
full, each page goes through the servers in page_attempts.py, its life between attempts (retry pause, strikes, set
aside) is page_life.py's, and the watches beside the pages (queue gauges, host memory, a canary per replica, the
tail probe) are watches.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx

from ..console import say
from ..facts import ModelFacts
from ..inputs.pdf import PREP_THREADS
from ..inputs.source import RowInput
from ..judging.breaker import Breaker
from ..judging.canary import Canary
from ..planning.page_rules import PageRules
from ..serving.fleet import Fleet
from ..serving.hostmem import MemoryGuard
from ..serving.replica import Replica
from ..store.progress import ResultLog
from .admission import Admission
from .page_attempts import Page, PageAttempts
from .page_life import Held, PageLife
from .tally import ProgressBar
from .watches import MemoryWatch, QueueGauges, ReplicaCanaries, TailProbe, watch_queue
from .window import Window


class Pump:
    """One run's pump over one fleet: built of its parts, then `run` once over the rows still to do."""

    def __init__(
        self,
        fleet: Fleet,
        facts: ModelFacts,
        rules: PageRules,
        window: Window,
        log: ResultLog,
        progress: ProgressBar,
        guard: MemoryGuard | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        canary: Callable[[Replica], Canary | None] | None = None,
    ) -> None:
        """`transport` replaces the network (tests pass an httpx.MockTransport). The strikes earlier runs left in
        the log's folder count on here. `canary` makes each replica's own canary: in a fleet of mixed builds, one
        server's good answers must not clear another's."""
        self.rules = rules
        self.window = window
        self.log = log
        self.progress = progress
        self.guard = guard
        self.transport = transport
        self.breaker = Breaker(rules.max_error_rate, image=facts.image)
        self.canaries = ReplicaCanaries(canary)
        self.gauges = QueueGauges(fleet.members)
        self.memory = MemoryWatch(guard, window) if guard is not None else None
        held = Held()
        probe = TailProbe(fleet.members, fleet.routing, facts, dict(rules.sampling))
        self.life = PageLife(fleet.members, fleet.supervision, rules, log, held, probe.answered)
        self.attempts = PageAttempts(fleet.members, fleet.routing, facts, rules, self.life, progress.tally, guard)
        self.admission = Admission(window, held, self.gauges, progress, self.record)

    async def run(self, rows: Iterator[RowInput]) -> None:
        """Pumps every row."""
        connections = (self.guard.ceiling if self.guard else self.window.cap) + 8
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        timeout = httpx.Timeout(self.rules.request_timeout, connect=30.0, pool=None)
        with ThreadPoolExecutor(PREP_THREADS, thread_name_prefix="prep") as prep:
            async with httpx.AsyncClient(limits=limits, timeout=timeout, transport=self.transport) as client:
                watcher = asyncio.create_task(watch_queue(self.gauges, self.memory, client))
                tasks = self.admission.tasks
                try:
                    await self.admission.feed(rows, lambda row: self.attempts.complete(row, client, prep))
                    self.canaries.conclude()
                finally:
                    watcher.cancel()
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(watcher, *tasks, return_exceptions=True)
                    self.log.flush()

    def record(self, page: Page) -> None:
        """Logs a page's outcome, counts it, and hands it to its writer's canary and to the breaker."""
        result = page.result
        self.log.add(result)
        if result.error is not None and self.rules.verbose:
            say(f"{result.row_id}: {result.error}")
        self.progress.record(result.error, result.completion_tokens, page.first_sent)
        self.canaries.judge(page.writer, result)
        self.breaker.record(result.error)
