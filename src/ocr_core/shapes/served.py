"""The served driver (the server and saturate shapes): find or start the fleet of `vllm serve` replicas the
machine plan asks for, then keep one window of pages in flight over them (fixed for -server, adaptive for
-saturate), with the later replicas' start and a watch for engines that stop making progress beside the pump.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TextIO

import httpx

from ..console import say
from ..errors import JobFailed
from ..planning.defaults import SATURATE_MAX_INFLIGHT, SERVER_WINDOW
from ..planning.engine_plan import EnginePlan
from ..planning.run_plan import CachePlan, WindowPolicy
from ..planning.scale import max_num_seqs
from ..planning.server_policy import ServerPolicy
from ..preparation.job import Job
from ..serving.engine_cache import EngineCache, open_engine_cache
from ..serving.fleet import Fleet, build_fleet
from ..serving.handle import VllmMissing, api_headers
from ..serving.hostmem import MemoryGuard
from ..serving.mps import cuda_mps
from ..serving.prometheus import kv_capacity, parse_metrics
from ..serving.server_api import healthy
from ..serving.stall import beside
from ..store.progress import ResultLog
from .canary_watch import make_canary
from .drive_result import Drive, Feeding
from .inference import writer_of
from .pump import Pump
from .signals import StopSignals
from .tally import ProgressBar
from .window import Window, engine_window

FLEET_POLL_S = 1.0


def drive_server_job(job: Job, stop: StopSignals, streams: list[TextIO]) -> Drive:
    return asyncio.run(run_job(job, stop))


def make_window(
    policy: WindowPolicy, local: bool, engines: int, capacity: int | None, fixed: int, full: int
) -> tuple[Window, MemoryGuard | None]:
    """A fixed window for -server: the batches of the replicas serving now (`fixed`), growing to those of the
    whole fleet (`full`) as replicas join, never beyond what half the host's free memory holds, or --max-inflight;
    for -saturate an adaptive one under a memory guard, which scales with the engines (replicas, or data parallel
    ranks).

    The adaptive window opens at what the engines' KV caches can run at once (so the first round trip already
    fills them), never below the -server window and never above the memory cap; it moves only once results return.
    `local`: every server is on this machine (its memory is the host's).
    """
    if policy.mode == "server":
        if policy.max_inflight:
            say(f"window: {policy.max_inflight} page(s) in flight (--max-inflight)")
            return Window(policy.max_inflight, policy.max_inflight), None
        cap, why = MemoryGuard(full, local_server=local).cap(0)
        size = min(fixed, cap)
        say(f"window: {size} page(s) in flight, up to {min(full, cap)} as replicas join ({why})")
        return Window(size, min(full, cap)), None
    guard = MemoryGuard(policy.max_inflight or SATURATE_MAX_INFLIGHT * engines, local_server=local)
    cap, why = guard.cap(0)
    start = min(cap, max(SERVER_WINDOW * engines, capacity or 0))
    room = f"the KV caches hold {capacity} full-length sequence(s)" if capacity else "KV cache size unknown"
    say(f"window: adaptive, starts at {start} ({room}), capped at {cap} ({why})")
    return Window(start, cap, adaptive=True), guard


def already_answering(policy: ServerPolicy) -> bool:
    """Whether a server already answers at the run's one address: the run then uses it and starts none, so the
    model's serve hook (which may fetch files) need not run. The plan's maker asks this once (make_plan.World)."""
    url = policy.urls[0]
    return healthy(url, api_headers(url, policy.hf_token, policy.api_key))


def served_engine_cache(cache: CachePlan) -> EngineCache | None:
    """The --engine-cache of the servers this run spawns, under the plan's key (the `vllm` on PATH, the GPUs and
    the exact flags the replicas get); None without the flag. The caller opens it only where it will start a
    server: a run that uses a server already answering neither claims the fixed folder nor writes an archive its
    engines never compiled into."""
    return None if cache.location is None else open_engine_cache(cache.location, cache.key)


def replica_window(plan: EnginePlan, fleet: Fleet, capacity: int | None) -> int:
    """The fixed window's share of one replica: the batch its engines run at once, from what the replicas serving
    now report (their KV capacity) and their scheduler's max_num_seqs (the plan's flags on the GPU of a replica this
    run started; vLLM's smaller default for a server it did not start)."""
    spawned = not fleet.given and fleet.replicas[0].handle.spawned is not None
    ranks = plan.scale.data_parallel if spawned else 1
    seqs = plan.max_num_seqs() if spawned else max_num_seqs(plan.request.engine_flags(), None)
    per_replica = capacity // max(1, len(fleet.serving())) if capacity else None
    return engine_window(per_replica, seqs * ranks, SERVER_WINDOW * ranks)


async def run_job(job: Job, stop: StopSignals) -> Drive:
    """Server shape: finds or starts the fleet, then keeps the window full until every row has an outcome. A run
    that must start a server where no `vllm` is installed is refused before the model's serve hook, which may
    fetch from the network: the advice (which vLLM to install, which image) must not wait on a download."""
    stop.install_async(asyncio.get_running_loop(), asyncio.current_task())
    policy, plan = job.plan.servers, job.plan.engine
    assert policy is not None and plan is not None, "a served run's plan holds its servers and engine plan"
    spawns = bool(job.todo) and job.plan.starts_servers
    if spawns and not policy.vllm_found:
        raise VllmMissing(policy.urls[0], policy.named_server)
    cache = await asyncio.to_thread(served_engine_cache, job.plan.cache) if spawns else None
    try:
        fleet = build_fleet(policy, plan, cache.environment() if cache else {})
        owned = len(job.source.owned())
        progress = ProgressBar(owned, owned - job.todo)
        drive = Drive()
        sharing = not fleet.given and plan.shares_gpus
        with cuda_mps(sharing and bool(job.todo)):
            window = await drive_fleet(job, stop, plan, fleet, progress, drive, cache)
    finally:
        if cache is not None:
            await finish_in_thread(cache.publish)
            cache.close()
    drive.tally = progress.tally
    if job.todo:
        drive.serving = fleet.describe()
        drive.extra = {**drive.extra, "replicas": fleet.report()}
        if not fleet.given and fleet.replicas[0].handle.spawned is not None:
            drive.extra["engine_plan"] = plan.record()
    if cache is not None:
        drive.extra["engine_cache"] = cache.report()
    if window is not None:
        drive.window = Feeding(window.limit, window.peak_in_flight, window.peak_limit, window.cap)
    return drive


async def drive_fleet(
    job: Job,
    stop: StopSignals,
    plan: EnginePlan,
    fleet: Fleet,
    progress: ProgressBar,
    drive: Drive,
    cache: EngineCache | None,
) -> Window | None:
    """Opens the fleet, sizes the window and pumps; stops every server it started on every way out."""
    window: Window | None = None
    policy = job.plan.window
    try:
        if job.todo:
            say(f"machine: {plan.describe()}")
            target = await fleet.open()
            drive.model_name = target.model
            local = job.plan.servers is not None and job.plan.servers.local
            max_model_len = job.plan.request.max_model_len
            window, guard = await open_window(policy, plan, fleet, lambda: fleet_capacity(fleet, max_model_len), local)
            metrics_before = await read_metrics(fleet)
            drive.version = next((replica.version for replica in fleet.serving() if replica.url == target.url), None)
            say(f"server {target.url} (vLLM {drive.version or 'unknown'}) serves {target.model}")
            await pump_pages(job, fleet, window, guard, progress, lambda: writer(job, drive, fleet), cache)
            if job.facts.summary_metrics:
                drive.extra = job.facts.summary_metrics(metrics_before, await read_metrics(fleet))
    except asyncio.CancelledError:
        if stop.signum is None:
            drive.failure = "the run was cancelled from inside; please report this with the log"
    except JobFailed as exc:
        drive.fail(exc, job.launch.raised)
    finally:
        progress.close()
        fleet.cancel_background()
        await finish_in_thread(fleet.close)
        stop.leave_async(asyncio.get_running_loop())
    return window


async def open_window(
    policy: WindowPolicy,
    plan: EnginePlan,
    fleet: Fleet,
    capacity_now: Callable[[], Awaitable[int | None]],
    local: bool,
) -> tuple[Window, MemoryGuard | None]:
    """The window for the replicas serving now, and how it grows as the later ones join (`fleet.joined`): a fixed
    window by each replica's batch; the adaptive one to at least what the KV caches of the replicas then serving
    hold, as it opened for the first (its own growth, a page per page returned while no page waits anywhere, stops
    as soon as the API servers hold a few pages, so it kept one replica's share for the whole job).
    `capacity_now` reads the full-length sequences the serving replicas' KV caches hold."""
    engines = len(fleet.replicas) * (plan.scale.data_parallel if not fleet.given else 1)
    capacity = await capacity_now()
    each = replica_window(plan, fleet, capacity)
    fixed, full = each * len(fleet.serving()), each * len(fleet.replicas)
    window, guard = make_window(policy, local, engines, capacity, fixed, full)
    if policy.mode == "server" and not policy.max_inflight:
        fleet.joined = lambda: window.resize(each * len(fleet.serving()))
    elif policy.mode != "server":

        async def widen() -> None:
            capacity = await capacity_now() or 0
            before = await window.widen(capacity)
            if window.limit > before:
                say(f"window: {before} -> {window.limit} (the KV caches serving hold {capacity} full-length sequences)")

        fleet.joined = widen
    return window, guard


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
    fleet: Fleet,
    window: Window,
    guard: MemoryGuard | None,
    progress: ProgressBar,
    writer: Callable[[], str],
    cache: EngineCache | None,
) -> None:
    """Pumps the rows still to do, with the fleet's start-up of later replicas, its stall watch and the engine
    cache's write-back beside it; each row keeps `writer()`, what served as it was written. Each replica's answers
    go to a canary of its own: a fleet may mix builds, and one good server must not clear another."""
    log = ResultLog(job.destination.progress_dir, job.run_id, flush_rows=max(16, window.limit), provenance=writer)
    rules = job.plan.rules
    canary = None if rules.canary_pages is None else lambda replica: make_canary(job, log, replica.version, replica.url)
    if rules.canary_pages is not None and fleet.given:
        fleet.trial_pages = min(rules.canary_pages, job.todo)
    pump = Pump(fleet, job.facts, rules, window, log, progress, guard, canary=canary)
    progress.start()
    watch = asyncio.gather(fleet.watch(job.plan.window.stall_timeout), publish_once_serving(fleet, cache))
    await beside(pump.run(job.source.rows(job.skip)), watch)


async def publish_once_serving(fleet: Fleet, cache: EngineCache | None) -> None:
    """Writes the engine cache back as soon as every replica serves, while the pages go on: the compile and
    warm-up are done by then, and a job stopped at its timeout still leaves them for the next (the end of the run
    writes only what came later)."""
    if cache is None:
        return
    while not fleet.full():
        await asyncio.sleep(FLEET_POLL_S)
    await asyncio.to_thread(cache.publish)


def writer(job: Job, drive: Drive, fleet: Fleet) -> str:
    """What a row written now keeps of this run: the vLLM, the script, and the fleet as it serves now."""
    return writer_of(job, dataclasses.replace(drive, serving=fleet.describe()))


async def fleet_capacity(fleet: Fleet, max_model_len: int) -> int | None:
    """Full-length sequences the KV caches of the replicas serving now hold: the window opens for them, and grows
    (adaptive) as the later replicas join, rather than handing the first one every other replica's share."""
    return kv_capacity(await metrics_text(fleet), max_model_len)


async def metrics_text(fleet: Fleet) -> str:
    async with httpx.AsyncClient() as client:
        return await fleet.metrics(client)


async def read_metrics(fleet: Fleet) -> dict[str, float]:
    return parse_metrics(await metrics_text(fleet))
