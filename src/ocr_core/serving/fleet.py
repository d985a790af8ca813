"""The servers one run feeds: which replicas belong to the fleet, how they open and join, and what the run reports
of them. Where each page goes is routing.py's; what happens when a replica dies, hangs or leaves is
supervision.py's; the fleet is both.

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
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx

from ..console import say
from ..errors import JobFailed
from ..planning.engine_plan import EnginePlan
from ..planning.server_policy import ServerPolicy
from .handle import ServerHandle, StartupTimeout, Target, metrics_page, server_version
from .ports import free_ports, with_port
from .replica import GONE, SERVING, STARTING, Replica
from .routing import PageRouting
from .spawn import NotAVllmRoot, ServerError, url_port
from .supervision import ReplicaSupervision


class Fleet(PageRouting, ReplicaSupervision):
    """`given`: the user named these servers (several --server URLs), so none is started, only waited for.
    `trial_pages`: pages a server may hold until its canary sees a real answer (0: no trial)."""

    def __init__(self, replicas: Sequence[Replica], plan: EnginePlan | None = None, given: bool = False) -> None:
        self.replicas = list(replicas)
        self.plan = plan
        self.given = given
        self.model = ""
        self.changed = asyncio.Condition()
        self.background: set[asyncio.Task] = set()
        self.deaths: Counter[str] = Counter()
        self.death_causes: dict[str, str] = {}
        self.early: dict[Replica, asyncio.Future] = {}
        self.joined: Callable[[], Awaitable[None]] | None = None
        self.trial_pages = 0

    @property
    def together(self) -> bool:
        """Whether the plan lets the spawned replicas start at the same time (scale.ScalePlan.concurrent_start)."""
        return self.plan is not None and self.plan.scale.concurrent_start

    @property
    def restarts(self) -> int:
        """Restarts completed over the whole fleet: a page failing since before one gets a fresh retry budget."""
        return sum(replica.handle.generation for replica in self.replicas)

    @property
    def answered(self) -> int:
        """Pages answered over the whole fleet: a page failing while this grows fails on its own account."""
        return sum(replica.answered for replica in self.replicas)

    def target(self, replica: Replica) -> Target:
        return Target(replica.url, self.model, replica.handle.headers)

    def serving(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.state == SERVING]

    async def open(self) -> Target:
        """Checks the given servers, or finds or starts the first replica; the rest start in `start_rest`."""
        if self.given:
            return await self.open_given()
        first = self.replicas[0]
        if self.together and len(self.replicas) > 1 and not await asyncio.to_thread(first.handle.answering):
            self.early = {replica: self.spawn_now(replica) for replica in self.replicas[1:]}
        target = await first.handle.open()
        self.model = target.model
        await self.learn_version(first)
        first.state = SERVING
        if first.handle.spawned is None and len(self.replicas) > 1:
            say(
                f"a server already answers at {first.url}, so this run uses it alone; stop it to let the recipe "
                f"start its {len(self.replicas)} replicas"
            )
            await asyncio.to_thread(lambda: [replica.handle.close() for replica in self.replicas[1:]])
            await asyncio.gather(*self.early.values(), return_exceptions=True)
            self.replicas = [first]
        return target

    async def open_given(self) -> Target:
        """Serves on the given servers that answer now and keeps looking at the others (each joins in `start_rest`
        once it answers). One that answers wrong (not a vLLM root, another model) is refused at once; while none
        answers, the run waits for the first, up to --startup-timeout."""
        statuses = await asyncio.gather(*(asyncio.to_thread(replica.handle.health) for replica in self.replicas))
        for replica, status in zip(self.replicas, statuses):
            if status == 404:
                raise NotAVllmRoot(replica.url, "/health")
        ready = [replica for replica, status in zip(self.replicas, statuses) if status == 200]
        targets = await asyncio.gather(*(replica.handle.open(spawn=False) for replica in ready))
        self.early = {
            replica: asyncio.ensure_future(replica.handle.open(spawn=False))
            for replica in self.replicas
            if replica not in ready
        }
        if not targets:
            targets = [await self.first_to_answer()]
        self.model = same_model(targets)
        for target in targets:
            replica = next(replica for replica in self.replicas if replica.url == target.url)
            await self.learn_version(replica)
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
        timeout = self.replicas[0].handle.policy.startup_timeout
        raise ServerError(f"none of the --server URLs answered /health within {timeout:.0f} s: {self.urls()}")

    def urls(self) -> str:
        return ", ".join(replica.url for replica in self.replicas)

    @staticmethod
    def spawn_now(replica: Replica) -> asyncio.Future:
        """Starts a replica in a worker thread; its failure is read by `start`, or dropped if the run ends first."""
        spawning = asyncio.ensure_future(asyncio.to_thread(replica.handle.spawn))
        spawning.add_done_callback(lambda done: done.cancelled() or done.exception())
        return spawning

    async def start_rest(self) -> None:
        """Brings the replicas that do not serve yet into the fleet: the given servers each once it answers, the
        spawned ones together where the plan allows (those `open` already started), else one after another; one
        that fails leaves the fleet."""
        if self.given or self.together:
            await asyncio.gather(*(self.start(replica) for replica in self.replicas))
            return
        for replica in self.replicas[1:]:
            await self.start(replica)

    async def start(self, replica: Replica) -> None:
        """Waits for a replica's start (begun in `open`, or begun here), then lets it take pages; a given server
        that answers late must serve the fleet's model under its name."""
        if replica.state != STARTING:
            return
        try:
            started = await (self.early.pop(replica, None) or asyncio.to_thread(replica.handle.spawn))
            if self.given and started.model != self.model:
                raise ServerError(f"it serves the model as {started.model}, the fleet's other servers as {self.model}")
        except ServerError as exc:
            await self.retire(replica, f"did not start: {exc}")
            return
        await self.learn_version(replica)
        await self.set_state(replica, SERVING)
        say(f"replica {replica.index + 1}/{len(self.replicas)} at {replica.url} joined the fleet")
        if self.joined is not None:
            await self.joined()

    @staticmethod
    async def learn_version(replica: Replica) -> None:
        """The vLLM version the replica reports, before it takes a page: each row names the build that wrote it."""
        replica.version = await server_version(replica.url, replica.handle.headers)

    async def wait_serving(self) -> list[Replica]:
        """The serving replicas, once there is one; waits while every replica recovers or starts (a death's
        `deaths` are counted before its replica serves again)."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.serving() or self.all_gone())
            serving = self.serving()
            if not serving:
                raise JobFailed(self.gone_message())
            return serving

    def full(self) -> bool:
        """Every replica has started (or left): from here on the fleet runs at the rate a long job sees."""
        return all(replica.state != STARTING for replica in self.replicas)

    def all_gone(self) -> bool:
        return all(replica.state == GONE for replica in self.replicas)

    def gone_message(self) -> str:
        reasons = "; ".join(f"{replica.url} {replica.why_gone}" for replica in self.replicas)
        return f"no vLLM server is left to send pages to: {reasons}"

    async def set_state(self, replica: Replica, state: str) -> None:
        async with self.changed:
            if replica.state != GONE:
                replica.state = state
            self.changed.notify_all()

    async def metrics(self, client: httpx.AsyncClient) -> str:
        """The Prometheus pages of every serving replica, one after another: summed, they describe the fleet."""
        pages = await asyncio.gather(*(metrics_page(client, self.target(replica)) for replica in self.serving()))
        return "\n".join(pages)

    def report(self) -> list[dict]:
        return [replica.report() for replica in self.replicas]

    def describe(self) -> str:
        """What ran, in one line for the summary, the card and inference_info: the servers, how many of them
        answered, and the pages they answered."""
        served = len([replica for replica in self.replicas if replica.answered])
        answers = f"{served} of them answered {self.answered} page(s)"
        if self.given:
            return f"{len(self.replicas)} server(s) given with --server, {answers}"
        if self.replicas[0].handle.spawned is None:
            return "1 server this run did not start"
        plan = f" ({self.plan.describe()})" if self.plan is not None else ""
        return f"{len(self.replicas)} vllm serve replica(s) planned{plan}, {answers}"

    def cancel_background(self) -> None:
        """Recoveries still running end with the run (in the event loop's thread; `close` then stops the servers)."""
        for task in list(self.background):
            task.cancel()

    def close(self) -> None:
        """Stops every server this run started, all at once (each may take its stop grace); safe from any thread."""
        with ThreadPoolExecutor(max(1, len(self.replicas))) as pool:
            list(pool.map(lambda replica: replica.handle.close(), self.replicas))


def same_model(targets: Sequence[Target]) -> str:
    names = {target.model for target in targets}
    if len(names) > 1:
        listing = ", ".join(f"{target.model} at {target.url}" for target in targets)
        raise ServerError(
            f"the servers serve the model under different names ({listing}); start them with one "
            "--served-model-name, or point --server at servers of one model"
        )
    return targets[0].model


def build_fleet(policy: ServerPolicy, engine: EnginePlan, env: Mapping[str, str] | None = None) -> Fleet:
    """Several --server URLs are the user's own servers, used as they are; one local URL gets the plan's replicas
    (the first on its port, the others on the next free ones, each spawned with `env`), which a server already
    answering there replaces."""
    urls = list(policy.urls)
    lock = threading.Lock()  # one start at a time, where the plan does not let them start together
    if len(urls) > 1:
        handles = [ServerHandle(url, policy, None, lock) for url in urls]
        return Fleet([Replica(index, handle) for index, handle in enumerate(handles)], engine, given=True)
    launches = engine.replicas() if policy.local else engine.replicas()[:1]
    addresses = [urls[0], *(with_port(urls[0], port) for port in free_ports(url_port(urls[0]), len(launches) - 1))]
    start_lock = None if engine.scale.concurrent_start else lock
    handles = [ServerHandle(address, policy, launch, start_lock, env) for address, launch in zip(addresses, launches)]
    return Fleet([Replica(index, handle) for index, handle in enumerate(handles)], engine)
