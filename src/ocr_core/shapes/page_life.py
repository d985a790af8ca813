"""A page's life in the pump between its attempts: its retry pause, its strikes, and its setting aside.

A transient failure is never a row's outcome: the page is retried with backoff until its retry budget is spent;
then, when nothing else was answered meanwhile, the job stops so that a rerun retries it (the servers are down),
and otherwise the page has a strike; at the tail of a run, where no other page is left to ask, a blank probe page
is the witness (probe.py). Each engine death or hang the fleet saw with the page in flight is a strike too. A page
with MAX_STRIKES strikes, this run's and earlier runs', is set aside as an error row (poison.py); a struck page
waits its turn in the struck pages' lane before each request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from ..console import say
from ..errors import JobFailed
from ..judging.poison import Lane, Strikes, fault_of_the_page
from ..planning.page_rules import PageRules
from ..serving.membership import Membership
from ..serving.supervision import ReplicaSupervision
from ..store.progress import ResultLog, RowResult, read_strikes
from .page_requests import Sent, Streak, retry_delay

Witness = Callable[[httpx.AsyncClient], Awaitable[bool]]


@dataclass
class Held:
    """The pages the pump holds: how many are open now, and whether every row has been admitted. The admission loop
    keeps both; with the pages failing now they tell whether a failing page has others left to witness for it."""

    open: int = 0
    fed_all: bool = False


class PageLife:
    """Each page's strikes and failing streak over the fleet's `members` and `supervision`. The strikes earlier
    runs left in the log's folder count on here; `witness` asks the servers a blank page (the tail probe)."""

    def __init__(
        self,
        members: Membership,
        supervision: ReplicaSupervision,
        rules: PageRules,
        log: ResultLog,
        held: Held,
        witness: Witness,
    ) -> None:
        self.members = members
        self.supervision = supervision
        self.rules = rules
        self.log = log
        self.held = held
        self.witness = witness
        self.strikes = Strikes(read_strikes(log.folder))
        self.lane = Lane()
        self.failing: set[str] = set()

    def others_left(self) -> bool:
        """Whether pages other than the failing ones are still to come or in flight: they witness for the servers."""
        return not self.held.fed_all or len(self.failing) < self.held.open

    def clear(self, row_id: str) -> None:
        """The page fails no longer: it was answered, or it left the pump."""
        self.failing.discard(row_id)

    async def set_aside(self, result: RowResult) -> bool:
        """Whether the page is out of strikes, counted once a replica serves (a death is counted before its
        replica serves again); then its error says why and it is not sent again."""
        try:
            await self.members.wait_serving()
        finally:
            self.count_deaths(result)
        if not self.strikes.condemned(result.row_id):
            return False
        result.error = self.strikes.reason(result.row_id)
        say(f"{result.row_id}: {result.error}")
        return True

    async def take_turn(self, row_id: str) -> bool:
        """Whether the page has a strike; such a page waits its turn in the struck pages' lane (poison.py)."""
        struck = self.strikes.count(row_id) > 0
        if struck:
            await self.lane.enter(self.strikes.last_chance(row_id))
        return struck

    async def end_turn(self, struck: bool, answered: bool) -> None:
        """A struck page's request ended: an answer lets the lane widen again."""
        if struck:
            await self.lane.leave(answered)

    async def pause(self, sent: Sent, result: RowResult, streak: Streak | None, client: httpx.AsyncClient) -> Streak:
        """Lets the replica recover (out of the fleet meanwhile), then waits before the next attempt; returns the
        page's failing streak. Past the retry budget the page has a strike when other pages were answered meanwhile
        (or, with none left to ask, a blank probe page was), else the job stops. A restart anywhere in the fleet
        gives the page a fresh budget: restarts are bounded by --max-restarts."""
        error, now, budget = sent.retry, time.monotonic(), self.rules.retry_budget
        self.failing.add(result.row_id)
        if streak is None or self.members.restarts != streak.restarts:
            streak = Streak(now, self.members.restarts, self.members.answered)
        failing_for = now - streak.since
        if failing_for >= budget:
            answered_since = self.members.answered > streak.answered
            others_left = self.others_left()
            probe_answered = not (answered_since or others_left) and await self.witness(client)
            if not fault_of_the_page(answered_since, others_left, probe_answered):
                raise JobFailed(
                    f"page {result.row_id} kept failing for {failing_for:.0f} s over {result.attempts} attempts "
                    f"(--retry-budget {budget:.0f} s); last failure: {error}. The server is overloaded, restarting "
                    "or unreachable: check it (its log, /health), then rerun the same command: finished rows are "
                    "kept and these pages are retried. Raise --retry-budget to wait longer."
                )
            self.strike(result, f"kept failing for {failing_for:.0f} s over {result.attempts} requests: {error}")
            streak, failing_for = Streak(now, self.members.restarts, self.members.answered), 0.0
        self.supervision.trouble(sent.replica, error, sent.generation)
        await asyncio.sleep(min(retry_delay(result.attempts, error.retry_after), budget - failing_for))
        return streak

    def count_deaths(self, result: RowResult) -> None:
        """The engine deaths and hangs the fleet saw with this page in flight that it has not counted yet."""
        row_id = result.row_id
        deaths = self.supervision.deaths[row_id]
        if deaths and self.strikes.add_deaths(row_id, deaths, self.supervision.death_causes[row_id]):
            self.lane.narrow()
            self.record_strike(result)

    def strike(self, result: RowResult, cause: str) -> None:
        self.strikes.add(result.row_id, cause)
        self.record_strike(result)

    def record_strike(self, result: RowResult) -> None:
        """Writes the page's strikes through to disk before the page is sent again, so a rerun on any machine counts
        on from them even after a kill -9 (the page's outcome, when it comes, replaces the record). Strikes are
        rare, so a part of their own each costs little."""
        row_id = result.row_id
        count = self.strikes.count(row_id)
        cause = self.strikes.causes[row_id]
        self.log.add(RowResult(result.row_index, row_id, error=cause, attempts=result.attempts, strikes=count))
        self.log.flush()
        if self.rules.verbose:
            say(f"{row_id}: no answer ({count} of {self.strikes.bound} strikes): {cause}")
