"""Notices an engine that hangs while its /health still answers, from the server's own progress counters.

A hung engine keeps /health green and leaves every request open until --request-timeout (and then retried), so
pages would wait for hours. vLLM's cumulative counters say whether anything moves: prompt tokens are counted when
a prefill ends, generation tokens as they are sampled, requests as they finish. Counters frozen for the bound while
this run has pages in flight mean no progress; a server without those counters is never judged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

import httpx

from .handle import Target, metrics_page
from .prometheus import parse_metrics

PROGRESS_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total")
STALL_POLL_S = 5.0
STALL_METRICS_TIMEOUT_S = 30.0

Result = TypeVar("Result")


@dataclass
class StallDetector:
    """The stall decision alone, fed one reading at a time, so that each case is a plain scenario test."""

    bound_s: float
    seen: tuple[float | None, ...] | None = None
    since: float = 0.0

    def observe(self, now: float, counters: Mapping[str, float] | None, in_flight: int) -> float | None:
        """Seconds without progress once they reach the bound while pages are in flight; else None.

        Any change counts as progress, a drop too (a restarted server counts from zero); an unreadable page or one
        without the counters restarts the clock, as does a moment with nothing in flight.
        """
        values = progress_of(counters)
        if values is None or values != self.seen or in_flight == 0:
            self.seen, self.since = values, now
            return None
        frozen = now - self.since
        return frozen if frozen >= self.bound_s else None


def progress_of(counters: Mapping[str, float] | None) -> tuple[float | None, ...] | None:
    """The progress counters in a fixed order; None when the server publishes none of them."""
    values = tuple((counters or {}).get(name) for name in PROGRESS_COUNTERS)
    return None if all(value is None for value in values) else values


class StallHandler(Protocol):
    """What the watcher tells about a stall: the engine, which restarts its server or ends the job."""

    generation: int

    async def stalled(self, reason: str, generation: int) -> None: ...


async def watch_for_stalls(target: Target, bound_s: float, in_flight: Callable[[], int], handler: StallHandler) -> None:
    """Polls /metrics beside the pump for as long as it runs; a bound of 0 turns the check off."""
    if bound_s <= 0:
        return
    detector = StallDetector(bound_s)
    generation = handler.generation
    async with httpx.AsyncClient(timeout=STALL_METRICS_TIMEOUT_S) as client:
        while True:
            await asyncio.sleep(STALL_POLL_S)
            if handler.generation != generation:
                detector, generation = StallDetector(bound_s), handler.generation
            pages = in_flight()
            counters = parse_metrics(await metrics_page(client, target), PROGRESS_COUNTERS)
            frozen = detector.observe(time.monotonic(), counters, pages)
            if frozen is not None:
                reason = (
                    f"made no progress (no token computed, no request finished) for {frozen:.0f} s "
                    f"with {pages} page(s) in flight"
                )
                await handler.stalled(reason, generation)


async def beside(work: Awaitable[Result], watcher: Awaitable[None]) -> Result:
    """Runs `work` with `watcher` next to it: a watcher that fails ends the work with its error."""
    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(watcher)
    try:
        await asyncio.wait({work_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
        if watch_task.done() and watch_task.exception() is not None:
            raise watch_task.exception()
        return await work_task
    finally:
        work_task.cancel()
        watch_task.cancel()
        await asyncio.gather(work_task, watch_task, return_exceptions=True)
