"""The servers one run feeds, composed of their parts: who belongs to the fleet and where each stands
(membership.py), how the replicas open and join (joining.py), where each page goes (routing.py) and what happens
when a replica dies, hangs or leaves (supervision.py). The fleet itself builds them over one membership, runs the
start-up of the later replicas beside the stall watch, says what ran, and stops the servers at the end.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx

from ..planning.engine_plan import EnginePlan
from ..planning.server_policy import ServerPolicy
from .handle import ServerHandle, Target
from .joining import Joining
from .membership import Membership
from .ports import free_ports, with_port
from .replica import Replica
from .routing import PageRouting
from .server_api import url_port
from .supervision import ReplicaSupervision


class Fleet:
    """`given`: the user named these servers (several --server URLs), so none is started, only waited for.

    The pump reaches the parts themselves (`routing` for its requests, `supervision` for failures and deaths,
    `members` for the fleet's state); the served shape drives the fleet through the methods below."""

    def __init__(self, replicas: Sequence[Replica], plan: EnginePlan | None = None, given: bool = False) -> None:
        self.plan = plan
        self.members = Membership(replicas, given)
        self.routing = PageRouting(self.members)
        self.supervision = ReplicaSupervision(self.members)
        self.joining = Joining(self.members, plan, self.supervision.retire)

    @property
    def replicas(self) -> list[Replica]:
        return self.members.replicas

    @property
    def given(self) -> bool:
        return self.members.given

    @property
    def model(self) -> str:
        return self.members.model

    @property
    def joined(self) -> Callable[[], Awaitable[None]] | None:
        """What hears of each replica that joins after the first (the fixed window grows with the fleet)."""
        return self.joining.joined

    @joined.setter
    def joined(self, hook: Callable[[], Awaitable[None]] | None) -> None:
        self.joining.joined = hook

    @property
    def trial_pages(self) -> int:
        """Pages a server may hold until its canary sees a real answer (0: no trial); routing.py keeps to it."""
        return self.routing.trial_pages

    @trial_pages.setter
    def trial_pages(self, pages: int) -> None:
        self.routing.trial_pages = pages

    def serving(self) -> list[Replica]:
        return self.members.serving()

    def full(self) -> bool:
        return self.members.full()

    async def open(self) -> Target:
        """Checks the given servers, or finds or starts the first replica; the rest join in `watch`."""
        return await self.joining.open()

    async def watch(self, bound_s: float) -> None:
        """Beside the pump: starts the replicas still to start and watches each for a hung engine."""
        await asyncio.gather(self.joining.start_rest(), self.supervision.watch_stalls(bound_s))

    async def metrics(self, client: httpx.AsyncClient) -> str:
        return await self.members.metrics(client)

    def report(self) -> list[dict]:
        return self.members.report()

    def describe(self) -> str:
        """What ran, in one line for the summary, the card and inference_info: the servers, how many of them
        answered, and the pages they answered."""
        replicas = self.members.replicas
        served = len([replica for replica in replicas if replica.answered])
        answers = f"{served} of them answered {self.members.answered} page(s)"
        if self.given:
            return f"{len(replicas)} server(s) given with --server, {answers}"
        if replicas[0].handle.spawned is None:
            return "1 server this run did not start"
        plan = f" ({self.plan.describe()})" if self.plan is not None else ""
        return f"{len(replicas)} vllm serve replica(s) planned{plan}, {answers}"

    def cancel_background(self) -> None:
        """Recoveries still running end with the run (in the event loop's thread; `close` then stops the servers)."""
        self.supervision.cancel_background()

    def close(self) -> None:
        """Stops every server this run started, all at once (each may take its stop grace); safe from any thread."""
        replicas = self.members.replicas
        with ThreadPoolExecutor(max(1, len(replicas))) as pool:
            list(pool.map(lambda replica: replica.handle.close(), replicas))


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
