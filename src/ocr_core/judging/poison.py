"""Pages that never get an answer: counted across restarts and reruns, then set aside as one error row each.

A page that always gets a 5xx, always times out, or kills (or hangs) the engine each time it is in flight would
otherwise keep the dataset from ever publishing: its retries end the run, and every rerun pays for them again. So
each failed round of a page is a strike, written to the progress store as it happens (a rerun on any machine goes
on counting from there):

- its --retry-budget spent on transient failures while the servers answered other pages, or, with no other page
  left to ask them, while they answered a blank probe page (probe.py); when nothing at all is answered, the
  servers are down, at the tail of a run as anywhere: the run stops and no page is struck;
- an engine death or hang, or its server leaving the fleet, while the page was in flight.

At MAX_STRIKES the page gets its outcome, an error row that says why, and is not sent again: an engine it kills
stops dying, and the rest publishes. `--retry-errors` redoes that row from a fresh count.

Fairness: a death strikes every page in flight, since nothing says which one killed the engine. Struck pages then
go back a few at a time (one after a death, one more for each that comes back answered, like TCP's slow start),
and a page one strike from the bound only when no other struck page is in flight. A page that merely shared a
death with the poison page is answered on its next attempt, while the poison page dies alone, so only it reaches
the bound: three deaths, which the default --max-restarts 3 restarts, and then no more.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping

MAX_STRIKES = 3
SET_ASIDE = "failed every attempt"


def fault_of_the_page(answered_since: bool, others_left: bool, probe_answered: bool) -> bool:
    """Whether a page's spent retry budget says more about the page than about the servers: they answered other
    pages meanwhile, or, with no other page left to ask them, a blank probe page (else every rerun would meet the
    same page alone). Nothing answered at all is an outage, never the page's fault."""
    return answered_since or (not others_left and probe_answered)


def set_aside_error(strikes: int, earlier: int, cause: str | None) -> str:
    """The error column of a page set aside: how often, since when, the last failure, and how to try again."""
    runs = f", {earlier} of them in earlier runs" if earlier else ""
    last = f" (last: {cause})" if cause else ""
    return (
        f"{SET_ASIDE}: {strikes} attempts got no answer{runs}{last}; set aside so that the rest publishes: fix the "
        "cause, then rerun with --retry-errors to try it again"
    )


class Strikes:
    """Each page's strikes: those earlier runs left in the store, and this run's, with the last cause."""

    def __init__(self, earlier: Mapping[str, int], bound: int = MAX_STRIKES) -> None:
        self.earlier = dict(earlier)
        self.bound = bound
        self.now: Counter[str] = Counter()
        self.deaths: Counter[str] = Counter()
        self.causes: dict[str, str] = {}

    def count(self, row_id: str) -> int:
        return self.earlier.get(row_id, 0) + self.now[row_id]

    def add(self, row_id: str, cause: str, count: int = 1) -> int:
        """Records `count` strikes; returns the page's total."""
        self.now[row_id] += count
        self.causes[row_id] = cause
        return self.count(row_id)

    def add_deaths(self, row_id: str, deaths: int, cause: str) -> int:
        """The fleet's count of deaths the page was in flight at; returns how many are new (each is a strike)."""
        new = deaths - self.deaths[row_id]
        if new > 0:
            self.deaths[row_id] = deaths
            self.add(row_id, cause, new)
        return max(0, new)

    def condemned(self, row_id: str) -> bool:
        return self.count(row_id) >= self.bound

    def last_chance(self, row_id: str) -> bool:
        """One strike from the bound: sent only while no other struck page is in flight, so that its last strike
        can only be its own."""
        return self.count(row_id) >= self.bound - 1

    def reason(self, row_id: str) -> str:
        return set_aside_error(self.count(row_id), self.earlier.get(row_id, 0), self.causes.get(row_id))


class Lane:
    """How many struck pages may be in flight at once: one after a death, one more for each answered."""

    def __init__(self) -> None:
        self.width = 1
        self.inside = 0
        self.alone_inside = False
        self.alone_waiting = 0
        self.changed = asyncio.Condition()

    def admits(self, alone: bool) -> bool:
        """A page sent alone waits for the lane to empty, and holds back the others meanwhile."""
        if self.alone_inside:
            return False
        if alone:
            return self.inside == 0
        return self.alone_waiting == 0 and self.inside < self.width

    async def enter(self, alone: bool) -> None:
        async with self.changed:
            self.alone_waiting += alone
            try:
                await self.changed.wait_for(lambda: self.admits(alone))
            finally:
                self.alone_waiting -= alone
            self.inside += 1
            self.alone_inside = alone

    async def leave(self, answered: bool) -> None:
        async with self.changed:
            self.inside -= 1
            self.alone_inside = False
            self.width += answered
            self.changed.notify_all()

    def narrow(self) -> None:
        """A death struck a page: the struck pages go back one at a time again."""
        self.width = 1
