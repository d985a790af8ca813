"""The server shapes: find or start `vllm serve`, then keep a window of pages in flight (fixed for -server,
adaptive for -saturate) with a watch for an engine that stops making progress beside the pump.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import httpx

from .cli import SATURATE_MAX_INFLIGHT, SERVER_WINDOW
from .errors import JobFailed
from .hostmem import MemoryGuard
from .hub import HubClient
from .job import Job
from .progress import ResultLog
from .pump import Pump, metrics_page
from .report import ProgressBar, say
from .run import KEPT, Drive, Feeding, StopSignals, make_canary, run_recipe
from .scale import ScalePlan, detect_gpus, plan_scale
from .server import is_local, kv_capacity, parse_metrics
from .server_handle import ServerHandle, Target
from .settings import Settings
from .stall import beside, watch_for_stalls
from .window import Window


def main(
    namespace: Mapping[str, Any],
    script: str,
    mode: str,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
) -> int:
    """Entry point of the -server and -saturate recipes; `hub` replaces the real Hub client (tests pass a double)."""
    return run_recipe(namespace, script, mode, drive_server_job, argv, hub)


def drive_server_job(job: Job, stop: StopSignals, streams: list[TextIO]) -> Drive:
    return asyncio.run(run_job(job, stop))


def make_window(
    settings: Settings, mode: str, scale: ScalePlan, capacity: int | None
) -> tuple[Window, MemoryGuard | None]:
    """A fixed window for -server; for -saturate an adaptive one under a memory guard.

    The adaptive window opens at what the engine's KV cache can run at once (so the first round trip already
    fills it), never below the -server window and never above the memory cap; it moves only once results return.
    """
    engines = scale.data_parallel
    if mode == "server":
        size = settings.max_inflight or SERVER_WINDOW * engines
        say(f"window: {size} page(s) in flight")
        return Window(size, size), None
    guard = MemoryGuard(
        settings.max_inflight or SATURATE_MAX_INFLIGHT * engines, local_server=is_local(settings.server)
    )
    cap, why = guard.cap(0)
    start = min(cap, max(SERVER_WINDOW * engines, capacity or 0))
    room = f"the KV cache holds {capacity} full-length sequence(s)" if capacity else "KV cache size unknown"
    say(f"window: adaptive, starts at {start} ({room}), capped at {cap} ({why})")
    return Window(start, cap, adaptive=True), guard


def scale_plan(settings: Settings) -> ScalePlan:
    gpus, name = detect_gpus()
    return plan_scale(gpus, name, os.cpu_count() or 1, settings.api_server_count, settings.data_parallel_size)


async def run_job(job: Job, stop: StopSignals) -> Drive:
    """Server shape: finds or starts the server, then keeps the window full until every row has an outcome."""
    settings = job.settings
    stop.install_async(asyncio.get_running_loop(), asyncio.current_task())
    handle = ServerHandle(settings, job.facts, job.script, job.argv, scale_plan(settings))
    owned = len(job.source.owned())
    progress = ProgressBar(owned, owned - job.todo)
    drive = Drive()
    window: Window | None = None
    try:
        if job.todo:
            target = await handle.open()
            drive.model_name = target.model
            window, guard = make_window(
                settings, job.mode, handle.scale, kv_capacity(await metrics_text(target), settings.max_model_len)
            )
            metrics_before = await read_metrics(target)
            drive.version = await server_version(target)
            say(f"server {target.url} (vLLM {drive.version or 'unknown'}) serves {target.model}")
            await pump_pages(job, target, handle, window, guard, progress, drive.version)
            if job.facts.summary_metrics:
                drive.extra = job.facts.summary_metrics(metrics_before, await read_metrics(target))
    except asyncio.CancelledError:
        if stop.signum is None:
            drive.failure = "the run was cancelled from inside; please report this with the log"
    except JobFailed as exc:
        drive.failure = str(exc)
        say(f"error: {exc}\n{KEPT.capitalize()}.")
    finally:
        progress.close()
        await finish_in_thread(handle.close)
        stop.leave_async(asyncio.get_running_loop())
    drive.tally = progress.tally
    if window is not None:
        drive.window = Feeding(window.limit, window.peak_in_flight, window.peak_limit, window.cap)
    return drive


async def finish_in_thread(action: Callable[[], None]) -> None:
    """Runs clean-up in a thread to its end, even if this task is cancelled meanwhile."""
    done = asyncio.ensure_future(asyncio.to_thread(action))
    while not done.done():
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            continue
    done.result()


async def pump_pages(
    job: Job,
    target: Target,
    handle: ServerHandle,
    window: Window,
    guard: MemoryGuard | None,
    progress: ProgressBar,
    version: str | None,
) -> None:
    """Pumps the rows still to do, with a watch for an engine that stops making progress beside it."""
    log = ResultLog(job.destination.progress_dir, job.run_id, flush_rows=max(16, window.limit))
    canary = make_canary(job, log, version)
    pump = Pump(target, job.facts, job.settings, window, log, progress, handle.recover, guard, canary=canary)
    progress.start()
    stalls = watch_for_stalls(target, job.settings.stall_timeout, lambda: window.in_flight, handle)
    await beside(pump.run(job.source.rows(job.skip)), stalls)


async def metrics_text(target: Target | None) -> str:
    if target is None:
        return ""
    async with httpx.AsyncClient() as client:
        return await metrics_page(client, target)


async def read_metrics(target: Target | None) -> dict[str, float]:
    return parse_metrics(await metrics_text(target))


async def server_version(target: Target) -> str | None:
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.get(f"{target.url}/version", headers=target.headers)
        return response.json().get("version") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
