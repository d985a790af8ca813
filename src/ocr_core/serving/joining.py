"""How the fleet's replicas open and join it.

Spawned replicas start together where the machine plan says that is safe (planning/scale.py: each on its own GPU,
or each with its KV cache in bytes), so that the whole fleet serves in about the time one replica takes to start;
otherwise the later ones start one after another while the first already works. Either way the GPU is busy from the
first healthy server on, and `joined` hears of each replica that joins (the fixed window grows with the fleet). Servers
given with --server are never started: the run serves on those that answer and each other one joins once it
answers, so that one server down at the start holds back none of the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

from ..console import say
from ..planning.engine_plan import EnginePlan
from .handle import StartupTimeout, Target, server_version
from .membership import Membership
from .replica import SERVING, STARTING, Replica
from .server_api import NotAVllmRoot, ServerError

Retire = Callable[[Replica, str], Awaitable[None]]


class Joining:
    """Opens the fleet's `members` and brings the rest in; a replica that fails to start is handed to `retire`
    (the fleet's supervision lets it go)."""

    def __init__(self, members: Membership, plan: EnginePlan | None, retire: Retire) -> None:
        self.members = members
        self.plan = plan
        self.retire = retire
        self.early: dict[Replica, asyncio.Future] = {}
        self.joined: Callable[[], Awaitable[None]] | None = None

    @property
    def together(self) -> bool:
        """Whether the plan lets the spawned replicas start at the same time (scale.ScalePlan.concurrent_start)."""
        return self.plan is not None and self.plan.scale.concurrent_start

    async def open(self) -> Target:
        """Checks the given servers, or finds or starts the first replica; the rest start in `start_rest`."""
        if self.members.given:
            return await self.open_given()
        replicas = self.members.replicas
        first = replicas[0]
        if self.together and len(replicas) > 1 and not await asyncio.to_thread(first.handle.answering):
            self.early = {replica: spawn_now(replica) for replica in replicas[1:]}
        target = await first.handle.open()
        self.members.model = target.model
        await learn_version(first)
        first.state = SERVING
        if first.handle.spawned is None and len(replicas) > 1:
            say(
                f"a server already answers at {first.url}, so this run uses it alone; stop it to let the recipe "
                f"start its {len(replicas)} replicas"
            )
            await asyncio.to_thread(lambda: [replica.handle.close() for replica in replicas[1:]])
            await asyncio.gather(*self.early.values(), return_exceptions=True)
            self.members.replicas = [first]
        return target

    async def open_given(self) -> Target:
        """Serves on the given servers that answer now and keeps looking at the others (each joins in `start_rest`
        once it answers). One that answers wrong (not a vLLM root, another model) is refused at once; while none
        answers, the run waits for the first, up to --startup-timeout."""
        replicas = self.members.replicas
        statuses = await asyncio.gather(*(asyncio.to_thread(replica.handle.health) for replica in replicas))
        for replica, status in zip(replicas, statuses):
            if status == 404:
                raise NotAVllmRoot(replica.url, "/health")
        ready = [replica for replica, status in zip(replicas, statuses) if status == 200]
        targets = await asyncio.gather(*(replica.handle.open(spawn=False) for replica in ready))
        self.early = {
            replica: asyncio.ensure_future(replica.handle.open(spawn=False))
            for replica in replicas
            if replica not in ready
        }
        if not targets:
            targets = [await self.first_to_answer()]
        self.members.model = same_model(targets)
        for target in targets:
            replica = next(replica for replica in replicas if replica.url == target.url)
            await learn_version(replica)
            replica.state = SERVING
        return targets[0]

    async def first_to_answer(self) -> Target:
        """The first given server that answers; one that answers wrong ends the run at once."""
        waits = list(self.early.values())
        for opened in asyncio.as_completed(waits):
            with contextlib.suppress(StartupTimeout):
                target = await opened
                self.early = {replica: wait for replica, wait in self.early.items() if replica.url != target.url}
                return target
        timeout = self.members.replicas[0].handle.policy.startup_timeout
        raise ServerError(f"none of the --server URLs answered /health within {timeout:.0f} s: {self.members.urls()}")

    async def start_rest(self) -> None:
        """Brings the replicas that do not serve yet into the fleet: the given servers each once it answers, the
        spawned ones together where the plan allows (those `open` already started), else one after another; one
        that fails leaves the fleet."""
        if self.members.given or self.together:
            await asyncio.gather(*(self.start(replica) for replica in self.members.replicas))
            return
        for replica in self.members.replicas[1:]:
            await self.start(replica)

    async def start(self, replica: Replica) -> None:
        """Waits for a replica's start (begun in `open`, or begun here), then lets it take pages; a given server
        that answers late must serve the fleet's model under its name."""
        if replica.state != STARTING:
            return
        try:
            started = await (self.early.pop(replica, None) or asyncio.to_thread(replica.handle.spawn))
            if self.members.given and started.model != (model := self.members.model):
                raise ServerError(f"it serves the model as {started.model}, the fleet's other servers as {model}")
        except ServerError as exc:
            await self.retire(replica, f"did not start: {exc}")
            return
        await learn_version(replica)
        await self.members.set_state(replica, SERVING)
        say(f"replica {replica.index + 1}/{len(self.members.replicas)} at {replica.url} joined the fleet")
        if self.joined is not None:
            await self.joined()


def spawn_now(replica: Replica) -> asyncio.Future:
    """Starts a replica in a worker thread; its failure is read by `start`, or dropped if the run ends first."""
    spawning = asyncio.ensure_future(asyncio.to_thread(replica.handle.spawn))
    spawning.add_done_callback(lambda done: done.cancelled() or done.exception())
    return spawning


async def learn_version(replica: Replica) -> None:
    """The vLLM version the replica reports, before it takes a page: each row names the build that wrote it."""
    replica.version = await server_version(replica.url, replica.handle.headers)


def same_model(targets: Sequence[Target]) -> str:
    names = {target.model for target in targets}
    if len(names) > 1:
        listing = ", ".join(f"{target.model} at {target.url}" for target in targets)
        raise ServerError(
            f"the servers serve the model under different names ({listing}); start them with one "
            "--served-model-name, or point --server at servers of one model"
        )
    return targets[0].model
