"""What happens when a replica dies, hangs or leaves: it is taken out while it recovers (its own restart budget,
--max-restarts), its pages in flight fail and go to the others, and one past its budget, or a server this run did
not start that stops answering, leaves the fleet. The run fails only when no replica is left. Each page that was in
flight when an engine died, hung or left is counted (`deaths`): the pump's evidence of a page that kills its engine
(judging/poison.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

from ..console import say
from ..errors import JobFailed
from .chat import Retryable
from .membership import Membership
from .replica import GONE, RECOVERING, SERVING, Replica
from .stall import watch_for_stalls


class ReplicaSupervision:
    """The fleet's supervision over its `members`: recoveries run in `background`, and each page's deaths are
    counted in `deaths`, with their cause in `death_causes`."""

    def __init__(self, members: Membership) -> None:
        self.members = members
        self.background: set[asyncio.Task] = set()
        self.deaths: Counter[str] = Counter()
        self.death_causes: dict[str, str] = {}

    def count_deaths(self, replica: Replica, what: str) -> None:
        """The replica's engine died, hung or left: each page that was in flight there counts one death."""
        for page in replica.witnesses():
            self.deaths[page] += 1
            self.death_causes[page] = f"the engine at {replica.url} {what} while it was in flight"

    def trouble(self, replica: Replica, error: Retryable, generation: int) -> None:
        """A failure that may mean a dead engine takes the replica out until its recovery (single-flight) ends."""
        if not error.engine_dead or replica.state != SERVING:
            return
        replica.state = RECOVERING
        recovery = asyncio.ensure_future(self.recover(replica, error, generation))
        self.background.add(recovery)
        recovery.add_done_callback(self.background.discard)

    async def recover(self, replica: Replica, error: Retryable, generation: int) -> None:
        """A failure that may mean a dead engine; a restart it led to (not one a report of an older generation
        found done) counts a death for the pages in flight."""
        before = replica.handle.generation
        try:
            await replica.handle.recover(error, generation)
        except JobFailed as exc:
            await self.retire(replica, str(exc))
            return
        if replica.handle.generation != before:
            self.count_deaths(replica, f"died ({error})")
        await self.members.set_state(replica, SERVING)

    async def stalled(self, replica: Replica, reason: str, generation: int) -> None:
        """The stall watcher's report on one replica: restarted, or out of the fleet; the last one ends the job."""
        if replica.state == GONE:
            return
        await self.members.set_state(replica, RECOVERING)
        replica.hand_back(f"its engine {reason}")
        before = replica.handle.generation
        try:
            await replica.handle.stalled(reason, generation)
        except JobFailed as exc:
            if self.members.staying() == 1:
                self.count_deaths(replica, f"hung (it {reason})")
                raise
            await self.retire(replica, str(exc))
            return
        if replica.handle.generation != before:
            self.count_deaths(replica, f"hung (it {reason})")
        await self.members.set_state(replica, SERVING)

    async def retire(self, replica: Replica, why: str) -> None:
        replica.why_gone = why
        self.count_deaths(replica, f"left the fleet ({why})")
        replica.hand_back(f"it left the fleet: {why}")
        await self.members.set_state(replica, GONE)
        say(f"{replica.url} leaves the fleet ({why}); {self.members.staying()} replica(s) left")
        await asyncio.to_thread(replica.handle.close)

    async def watch_stalls(self, bound_s: float) -> None:
        """Watches each replica for a hung engine (stall.py): one whose requests make no progress for `bound_s`."""
        watchers = [
            watch_for_stalls(
                self.members.target(replica),
                bound_s,
                lambda replica=replica: replica.outstanding,
                StallReport(self, replica),
            )
            for replica in self.members.replicas
        ]
        await asyncio.gather(*watchers)

    def cancel_background(self) -> None:
        """Recoveries still running end with the run (in the event loop's thread; the fleet then stops the
        servers)."""
        for task in list(self.background):
            task.cancel()


@dataclass
class StallReport:
    """What one replica's stall watcher calls: the fleet restarts that replica or lets it go."""

    fleet: ReplicaSupervision
    replica: Replica

    @property
    def generation(self) -> int:
        return self.replica.handle.generation

    async def stalled(self, reason: str, generation: int) -> None:
        await self.fleet.stalled(self.replica, reason, generation)
