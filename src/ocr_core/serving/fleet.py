"""The servers one run feeds: independent replicas behind one window, each page sent to the least busy of them.

Replicas on a shared GPU run at different speeds, so the next page goes to the replica with the fewest requests
outstanding, not round robin. A replica that dies or hangs is taken out while it recovers (its own restart budget,
--max-restarts), and its pages in flight fail and go to the others; one that is past its budget, or a server this
run did not start that stops answering, leaves the fleet. The run fails only when no replica is left. Each page
that was in flight when an engine died, hung or left is counted (`deaths`): the pump's evidence of a page that
kills its engine (poison.py). Spawned
replicas start together where the machine plan says that is safe (scale.py: each on its own GPU, or each with its
KV cache in bytes), so that the whole fleet serves in about the time one replica takes to start; otherwise the
later ones start one after another while the first already works. Either way the GPU is busy from the first
healthy server on, and `joined` hears of each replica that joins (the fixed window grows with the fleet). Servers
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
from dataclasses import dataclass

import httpx

from ..console import say
from ..errors import JobFailed
from ..planning.engine_plan import EnginePlan
from ..planning.scale import ScalePlan
from ..planning.server_policy import ServerPolicy
from .chat import Answer, Retryable, RowFailed
from .handle import ServerHandle, StartupTimeout, Target, metrics_page, server_version
from .ports import free_ports, server_urls, with_port
from .replica import GONE, RECOVERING, SERVING, STARTING, Replica
from .spawn import NotAVllmRoot, ServerError, is_local, url_port
from .stall import watch_for_stalls

TRIAL_POLL_S = 0.05


class Fleet:
    """`given`: the user named these servers (several --server URLs), so none is started, only waited for.
    `trial_pages`: pages a server may hold until its canary sees a real answer (0: no trial)."""

    def __init__(self, replicas: Sequence[Replica], plan: ScalePlan | None = None, given: bool = False) -> None:
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
        return self.plan is not None and self.plan.concurrent_start

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

    async def pick(self, failed_on: Replica | None = None) -> Replica:
        """The serving replica with the fewest requests outstanding, other than the one the page just failed on
        while another serves; waits while every replica recovers or starts, or holds all the pages its trial
        allows."""
        while not (takers := [replica for replica in await self.wait_serving() if self.takes_pages(replica)]):
            await asyncio.sleep(TRIAL_POLL_S)
        others = [replica for replica in takers if replica is not failed_on]
        return min(others or takers, key=lambda replica: (replica.outstanding, replica.index))

    def takes_pages(self, replica: Replica) -> bool:
        """A server on trial (given servers may run other builds) holds no more than its canary's pages, in flight
        or judged, until one of its answers is real text: a wrong build then writes only those pages."""
        if not self.trial_pages or replica.cleared:
            return True
        return replica.outstanding + replica.judged < self.trial_pages

    def full(self) -> bool:
        """Every replica has started (or left): from here on the fleet runs at the rate a long job sees."""
        return all(replica.state != STARTING for replica in self.replicas)

    def all_gone(self) -> bool:
        return all(replica.state == GONE for replica in self.replicas)

    def gone_message(self) -> str:
        reasons = "; ".join(f"{replica.url} {replica.why_gone}" for replica in self.replicas)
        return f"no vLLM server is left to send pages to: {reasons}"

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
        await self.set_state(replica, SERVING)

    async def stalled(self, replica: Replica, reason: str, generation: int) -> None:
        """The stall watcher's report on one replica: restarted, or out of the fleet; the last one ends the job."""
        if replica.state == GONE:
            return
        await self.set_state(replica, RECOVERING)
        replica.hand_back(f"its engine {reason}")
        before = replica.handle.generation
        try:
            await replica.handle.stalled(reason, generation)
        except JobFailed as exc:
            if len([other for other in self.replicas if other.state != GONE]) == 1:
                self.count_deaths(replica, f"hung (it {reason})")
                raise
            await self.retire(replica, str(exc))
            return
        if replica.handle.generation != before:
            self.count_deaths(replica, f"hung (it {reason})")
        await self.set_state(replica, SERVING)

    async def retire(self, replica: Replica, why: str) -> None:
        replica.why_gone = why
        self.count_deaths(replica, f"left the fleet ({why})")
        replica.hand_back(f"it left the fleet: {why}")
        await self.set_state(replica, GONE)
        left = len([other for other in self.replicas if other.state != GONE])
        say(f"{replica.url} leaves the fleet ({why}); {left} replica(s) left")
        await asyncio.to_thread(replica.handle.close)

    async def set_state(self, replica: Replica, state: str) -> None:
        async with self.changed:
            if replica.state != GONE:
                replica.state = state
            self.changed.notify_all()

    async def metrics(self, client: httpx.AsyncClient) -> str:
        """The Prometheus pages of every serving replica, one after another: summed, they describe the fleet."""
        pages = await asyncio.gather(*(metrics_page(client, self.target(replica)) for replica in self.serving()))
        return "\n".join(pages)

    async def watch(self, bound_s: float) -> None:
        """Beside the pump: starts the replicas still to start and watches each for a hung engine."""
        watchers = [
            watch_for_stalls(self.target(replica), bound_s, lambda replica=replica: replica.outstanding,
                             StallReport(self, replica))
            for replica in self.replicas
        ]  # fmt: skip
        await asyncio.gather(self.start_rest(), *watchers)

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


@dataclass
class StallReport:
    """What one replica's stall watcher calls: the fleet restarts that replica or lets it go."""

    fleet: Fleet
    replica: Replica

    @property
    def generation(self) -> int:
        return self.replica.handle.generation

    async def stalled(self, reason: str, generation: int) -> None:
        await self.fleet.stalled(self.replica, reason, generation)


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
    urls = server_urls(policy.server)
    lock = threading.Lock()  # one start at a time, where the plan does not let them start together
    if len(urls) > 1:
        handles = [ServerHandle(url, policy, None, lock) for url in urls]
        return Fleet([Replica(index, handle) for index, handle in enumerate(handles)], engine.scale, given=True)
    launches = engine.replicas() if is_local(urls[0]) else engine.replicas()[:1]
    addresses = [urls[0], *(with_port(urls[0], port) for port in free_ports(url_port(urls[0]), len(launches) - 1))]
    start_lock = None if engine.scale.concurrent_start else lock
    handles = [ServerHandle(address, policy, launch, start_lock, env) for address, launch in zip(addresses, launches)]
    return Fleet([Replica(index, handle) for index, handle in enumerate(handles)], engine.scale)
