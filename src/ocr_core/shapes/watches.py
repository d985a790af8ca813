"""What the pump watches beside its pages: the fleet's queue gauges, host memory under the window's cap, each
replica's canary over the pages it wrote, and the blank probe page that witnesses for the servers at the tail.

The gauges and the memory guard are read once a second for as long as pages flow; the canaries and the probe
are asked as pages end and fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from ..console import say
from ..facts import ModelFacts
from ..judging.canary import Canary
from ..serving.hostmem import MemoryGuard
from ..serving.membership import Membership
from ..serving.probe import probe_body, servers_answer
from ..serving.prometheus import parse_metrics
from ..serving.replica import Replica
from ..serving.routing import PageRouting
from ..store.progress import RowResult
from .window import Window

QUEUE_GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running")
METRICS_INTERVAL_S = 1.0
CAP_LOG_GAP_S = 30.0


class QueueGauges:
    """The fleet's queue as its servers' /metrics tell it: requests waiting and running, None while no server has
    such gauges. The adaptive window widens and narrows on them as pages end."""

    def __init__(self, members: Membership) -> None:
        self.members = members
        self.waiting: float | None = None
        self.running: float | None = None

    async def read(self, client: httpx.AsyncClient) -> None:
        gauges = parse_metrics(await self.members.metrics(client), QUEUE_GAUGES)
        self.waiting = gauges.get("vllm:num_requests_waiting")
        self.running = gauges.get("vllm:num_requests_running")


class MemoryWatch:
    """Moves the window's cap with the host memory `guard` allows the pages in flight."""

    def __init__(self, guard: MemoryGuard, window: Window) -> None:
        self.guard = guard
        self.window = window
        self.cap_logged = 0.0

    async def follow(self) -> None:
        """Moves the window's cap with host memory; says so when it moves by a tenth or more."""
        cap, why = self.guard.cap(self.window.in_flight)
        previous = self.window.cap
        if cap == previous:
            return
        await self.window.set_cap(cap)
        if abs(cap - previous) >= max(2, previous // 10) and time.monotonic() - self.cap_logged > CAP_LOG_GAP_S:
            self.cap_logged = time.monotonic()
            say(f"window cap {previous} -> {cap}: {why}")


async def watch_queue(gauges: QueueGauges, memory: MemoryWatch | None, client: httpx.AsyncClient) -> None:
    """Keeps the gauges current from the fleet's /metrics, and the cap current with host memory, until cancelled."""
    while True:
        await gauges.read(client)
        if memory is not None:
            await memory.follow()
        await asyncio.sleep(METRICS_INTERVAL_S)


class ReplicaCanaries:
    """Each replica's own canary, made by `make` when the replica's first answered page comes: in a fleet of
    mixed builds, one server's good answers must not clear another's. None for `make`: no canary (--no-canary)."""

    def __init__(self, make: Callable[[Replica], Canary | None] | None) -> None:
        self.make = make
        self.canaries: dict[Replica, Canary | None] = {}

    def judge(self, writer: Replica | None, result: RowResult) -> None:
        """Hands an answered page to the canary of the replica that wrote it; a replica whose canary saw real text
        is cleared of its trial (routing.py)."""
        if writer is None or self.make is None:
            return
        if writer not in self.canaries:
            self.canaries[writer] = self.make(writer)
        canary = self.canaries[writer]
        if canary is not None:
            writer.judged += 1
            canary.record(result)
            writer.cleared = writer.cleared or canary.cleared

    def conclude(self) -> None:
        """At the end of the pages: judges each canary that saw fewer answers than it waits for."""
        for canary in self.canaries.values():
            if canary is not None:
                canary.conclude()


class TailProbe:
    """The blank page (serving/probe.py) that tells, where a failing page has no other page to witness for it,
    whether the servers answer anything at all; its body is built once, on first use."""

    def __init__(
        self, members: Membership, routing: PageRouting, facts: ModelFacts, sampling: Mapping[str, Any]
    ) -> None:
        self.members = members
        self.routing = routing
        self.facts = facts
        self.sampling = sampling
        self.body: bytes | None = None

    async def answered(self, client: httpx.AsyncClient) -> bool:
        if self.body is None:
            self.body = probe_body(self.facts, self.members.model, self.sampling)
        return await servers_answer(self.routing, client, self.body)
