"""Where each page goes: the serving replica with the fewest requests outstanding, not round robin, since replicas
on a shared GPU run at different speeds; a server on trial holds no more than its canary's pages until one of its
answers is real text. A replica that leaves the fleet while a page is in flight there hands the page back, and
another takes it."""

from __future__ import annotations

import asyncio

import httpx

from .chat import Answer, Retryable, RowFailed
from .membership import Membership
from .replica import Replica

TRIAL_POLL_S = 0.05


class PageRouting:
    """The fleet's routing over its `members`. `trial_pages`: pages a server may hold until its canary sees a real
    answer (0: no trial)."""

    def __init__(self, members: Membership) -> None:
        self.members = members
        self.trial_pages = 0

    async def pick(self, failed_on: Replica | None = None) -> Replica:
        """The serving replica with the fewest requests outstanding, other than the one the page just failed on
        while another serves; waits while every replica recovers or starts, or holds all the pages its trial
        allows."""
        while not (takers := [replica for replica in await self.members.wait_serving() if self.takes_pages(replica)]):
            await asyncio.sleep(TRIAL_POLL_S)
        others = [replica for replica in takers if replica is not failed_on]
        return min(others or takers, key=lambda replica: (replica.outstanding, replica.index))

    def takes_pages(self, replica: Replica) -> bool:
        """A server on trial (given servers may run other builds) holds no more than its canary's pages, in flight
        or judged, until one of its answers is real text: a wrong build then writes only those pages."""
        if not self.trial_pages or replica.cleared:
            return True
        return replica.outstanding + replica.judged < self.trial_pages

    async def post(self, replica: Replica, client: httpx.AsyncClient, body: bytes, page: str = "") -> Answer:
        """One request to one replica; a replica that leaves the fleet meanwhile hands its page back (Retryable).
        A page that gets no answer stays among the replica's witnesses until the engine answers a later request."""
        replica.outstanding += 1
        replica.in_flight.add(page)
        sent = next(replica.clock)
        request = asyncio.ensure_future(replica.paced_post(client, body, replica.opens_connection()))
        handed_back = asyncio.ensure_future(replica.handback.wait())
        try:
            await asyncio.wait({request, handed_back}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            replica.outstanding -= 1
            replica.in_flight.discard(page)
            for task in (request, handed_back):
                task.cancel()
        try:
            if not request.done() or request.cancelled():
                raise Retryable(
                    f"{replica.url} handed the page back ({replica.handback_reason}); another server takes it"
                )
            answer = request.result()
        except Retryable:
            replica.unanswered[page] = next(replica.clock)
            raise
        except RowFailed:
            replica.answered_after(sent)
            raise
        replica.answered_after(sent)
        replica.answered += 1
        return answer
