"""What every recipe does around its pages: prepare the job, let its shape drive them, publish, and say what
happened. The shapes' entry points (`main` in run_offline.py and run_server.py) hand their driver to `run_recipe`.

Exit codes: 0 every selected row has an outcome and the dataset is published (or, for a shard, its rows are done);
1 the job failed (the message says why; finished rows are kept for the rerun); 2 the command needs changing;
129 / 130 / 143 stopped by SIGHUP / Ctrl-C / SIGTERM (rerun to resume). Every way out, a refused command line
included, prints the one JSON summary line on stdout, with `exit_code` and, when the run failed, `failure`; a run
that reached its pages says the same in one sentence on stderr first.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from .answers import requested_sampling
from .assemble import assemble, inference_history, missing_rows
from .breaker import TRUNCATED
from .canary import Canary, CanaryContext
from .card import CardFacts, split_files
from .cli import build_parser, job_command, job_timeout, parse_command, ran_command, usage
from .cost import cost_facts, describe_cost, price_known, run_price
from .errors import CommandError, JobFailed
from .facts import ModelFacts
from .fanout.command import launch_command_line
from .fanout.jobs import JobsClient
from .hub import HubClient, HubRefused
from .job import Job, prepare_job, release
from .launch import Launch
from .lease import LeaseTaken
from .mirror import ProgressMirror
from .output import data_prefix_of, is_local_output
from .progress import ResultLog, read_results
from .provenance import (
    ScriptSource,
    earlier_writers,
    ran_image,
    released_scripts,
    reproducible,
    row_entry,
    script_source,
    writer_record,
)
from .quiet import silence_notices
from .rates import billed_pages_per_s
from .redact import register_run_secrets
from .report import RunFacts, ScriptCopy, Summary, Tally, process_seconds, say
from .rerun import job_arguments, rerun_command
from .settings import Settings
from .slices import publish_slice, slice_facts, slice_results
from .version import DISTRIBUTION, core_build, core_version

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
KEPT = "finished rows are kept; rerun the same command to resume"


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


class Feeding(NamedTuple):
    """How the pages were fed: the window (or batch) at the end, its peak and cap, the most pages in flight."""

    limit: int
    peak_in_flight: int
    peak_limit: int
    cap: int


@dataclass
class Drive:
    """What driving the pages left behind, whichever way it ended."""

    tally: Tally = field(default_factory=Tally)
    window: Feeding = field(default_factory=lambda: Feeding(1, 0, 1, 1))
    model_name: str | None = None
    version: str | None = None
    extra: dict = field(default_factory=dict)
    failure: str | None = None
    serving: str | None = None


DrivePages = Callable[[Job, StopSignals, list[TextIO]], Drive]


def run_recipe(
    facts: ModelFacts,
    script_path: Path,
    mode: str,
    drive_pages: DrivePages,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
    jobs: JobsClient | None = None,
) -> int:
    """Every recipe's life: parse, prepare, drive the pages in its shape, publish, print the summary line; or,
    with `--jobs N`, launch and watch N HF Jobs that each do one shard of it (fanout/).

    `drive_pages` is the shape (offline batches or a server's window); `hub` and `jobs` replace the real Hub and
    Jobs clients (tests pass doubles).
    """
    script = script_path.name
    silence_notices()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(usage(script, facts, mode))
        return 0
    parser = build_parser(script, facts, mode)
    try:
        settings, fanout = parse_command(parser, argv)
    except SystemExit as exc:
        if exc.code != 2:
            raise
        return refused_command(parser, Summary(script, facts.model, mode, argv[1] if len(argv) > 1 else None))
    if fanout is not None:
        return launch_command_line(facts, script_path, parser, settings, fanout, argv, hub, jobs, load_call(settings))
    summary = Summary(script, settings.model, mode, settings.output)
    streams: list[TextIO] = [sys.stdout]
    stop = StopSignals()
    stop.install()
    try:
        register_run_secrets(settings)
        if settings.verbose:
            say(versions())
        origin = script_source(script_path, released_scripts())
        summary.copy = ScriptCopy(origin.standing, origin.sha256, prompt_sha256(facts))
        code = run(
            settings, facts, Launch(script, mode, argv, origin), drive_pages, hub, stop, summary, streams, origin
        )
    except BaseException as exc:
        code = failure_code(exc, stop, summary, settings.verbose)
    finally:
        stop.restore()
    summary.exit_code = code
    if summary.run is not None:
        summary.run.bill(process_seconds())
        say(summary.sentence())
    summary.print_to(streams[-1])
    return code


def refused_command(parser: argparse.ArgumentParser, summary: Summary) -> int:
    """A command line argparse refused (it printed the one line that says why): the summary line, exit 2."""
    summary.failure = getattr(parser, "failure", None) or "the command line is wrong; see --help"
    summary.exit_code = 2
    summary.print_to(sys.stdout)
    return 2


def run(
    settings: Settings,
    facts: ModelFacts,
    launch: Launch,
    drive_pages: DrivePages,
    hub: HubClient | None,
    stop: StopSignals,
    summary: Summary,
    streams: list[TextIO],
    origin: ScriptSource,
) -> int:
    job = prepare_job(settings, facts, launch, hub)
    try:
        try:
            drive = drive_pages(job, stop, streams)
        finally:
            closed = uninterrupted(lambda: close_mirror(job, job.mirror))
        drive.failure = drive.failure or closed
        code, summary.run = finish(job, drive, stop.signum, origin)
        summary.load_with = load_call(job.settings) if code == 0 else None
        return code
    finally:
        release(job.destination, job.lease, job.locks, job.mirror)


def load_call(settings: Settings) -> str:
    """The line of Python that opens what this run published.

    A local folder goes by its absolute path and names its files: datasets keys a local folder's cache by its
    basename and the card's `data_files` patterns, so without them another folder of that name, or this one before
    a resume, answers (issue 35); with `data_files` the key is the files' paths and modification times. A Hub repo's
    key is its commit, so the repo id alone is always current.
    """
    config = f", {settings.config!r}" if settings.config else ""
    if not is_local_output(settings.output):
        return f"datasets.load_dataset({settings.output!r}{config}, split={settings.split!r})"
    where = str(Path(settings.output).expanduser().resolve())
    files = {settings.split: split_files(data_prefix_of(settings.config), settings.split)}
    return f"datasets.load_dataset({where!r}{config}, split={settings.split!r}, data_files={files!r})"


def failure_code(exc: BaseException, stop: StopSignals, summary: Summary, verbose: bool) -> int:
    """The exit code and the summary's `failure` for a run that ended by an exception."""
    if isinstance(exc, Interrupted | KeyboardInterrupt):
        summary.failure = "interrupted"
        return 128 + (stop.signum or signal.SIGINT)
    if isinstance(exc, CommandError):
        summary.failure = str(exc)
        say(f"error: {exc}")
        return 2
    if isinstance(exc, JobFailed | LeaseTaken):
        summary.failure = str(exc)
        say(f"error: {exc}\n{KEPT.capitalize()}.")
        return 1
    if isinstance(exc, SystemExit):
        summary.failure = f"exited with {exc.code}"
        return exc.code if isinstance(exc.code, int) else 1
    if not isinstance(exc, Exception):
        raise exc
    summary.failure = f"internal error: {type(exc).__name__}: {exc}"
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


def make_canary(job: Job, log: ResultLog, version: str | None, server: str | None = None) -> Canary | None:
    """The canary over this run's first answers (all of them when fewer are to do; `server`: those of one server),
    or None with --no-canary.

    Its message shows the exact job command on the model's image, with --retry-errors to redo the rows it flags.
    """
    if job.settings.no_canary:
        return None
    given = job.launch.argv
    argv = given if "--retry-errors" in given else [*given, "--retry-errors"]
    served = f"vLLM {version}" if version else None
    command = rerun_command(job.launch.script, job.facts, argv, job.settings)
    context = CanaryContext(job.settings.model, job.facts.image, command, served, server)
    return Canary(log, context, min(job.settings.canary_pages, job.todo))


def inference_info(job: Job, drive: Drive, origin: ScriptSource) -> dict[str, Any]:
    """What ran over these rows: the model as given, the vLLM the server reported, the image only when the job ran
    in it, and the script's released URL only when its bytes are the release's (else the hash of what ran)."""
    window = drive.window
    return {
        "model_id": job.settings.model,
        "model_name": drive.model_name or job.settings.model,
        "column_name": job.settings.output_column,
        "error_column": job.settings.error_column,
        "sampling": requested_sampling(job.facts, job.settings),
        "image": ran_image(job.facts.image, drive.version),
        "vllm_version": drive.version,
        "mode": job.launch.mode,
        "window": {"final": window.limit, "peak_in_flight": window.peak_in_flight, "cap": window.cap},
        "serving": drive.serving,
        "script": job.launch.script,
        "script_url": origin.url,
        "script_sha256": origin.sha256,
        "prompt_sha256": prompt_sha256(job.facts),
        "core": {"version": core_version(), "build": core_build()},
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def prompt_sha256(facts: ModelFacts) -> str | None:
    """The sha256 of the prompt text an edited copy may change (None: the page image alone is the prompt)."""
    return hashlib.sha256(facts.prompt.encode()).hexdigest() if facts.prompt else None


def writer_of(job: Job, drive: Drive) -> str:
    """The record each row this run writes keeps of it: the fields of its inference_info entry that say what made
    the text, as they stand when the row is written."""
    origin = job.launch.origin or ScriptSource(job.launch.script, None, None)
    return writer_record(inference_info(job, drive, origin), job.run_id)


@dataclass(frozen=True)
class Outcome:
    """Where this job's rows stand (its shard's, or all selected rows), read from the results on disk."""

    rows: int
    errors: int
    truncated: int
    missing: int


def read_outcome(job: Job) -> Outcome:
    """Other shards' rows are theirs to publish: nothing here waits for them or reads their progress."""
    owned = job.source.owned()
    results = read_results(job.destination.progress_dir, ["error"])
    mine = set(owned)
    errors = [
        error
        for row_id, error in zip(results["row_id"].to_pylist(), results["error"].to_pylist())
        if error is not None and row_id in mine
    ]
    return Outcome(
        rows=len(owned),
        errors=len(errors),
        truncated=sum(error.startswith(TRUNCATED) for error in errors),
        missing=missing_rows(job.source, results, owned_only=True),
    )


def finish(job: Job, drive: Drive, stopped: int | None, origin: ScriptSource) -> tuple[int, RunFacts]:
    """Publishes this job's slice when each of its rows has an outcome; returns the exit code and the summary's
    facts of the run."""
    outcome = read_outcome(job)
    wall_s = time.monotonic() - job.started
    flavor, cost = run_cost(job, drive.tally, wall_s)
    known = price_known(job.settings.price_per_hour, job.facts.flavor)
    published, code = conclude(job, drive, stopped, outcome, describe_cost(cost, flavor) if known else None, origin)
    tally, window = drive.tally, drive.window
    return code, RunFacts(
        output=published or job.destination.describe(),
        rows=outcome.rows,
        done_this_run=tally.done,
        resumed=outcome.rows - job.todo,
        shard=list(job.settings.shard) if job.settings.shard else None,
        errors=outcome.errors,
        errors_this_run=tally.errors,
        truncated=outcome.truncated,
        loops_this_run=tally.loops,
        truncated_this_run=tally.truncated,
        missing=outcome.missing,
        pages_per_s=round(tally.pages_per_s(), 3),
        output_tokens_per_s=round(tally.tokens_per_s(), 1),
        inference_s=round(tally.seconds(), 2),
        **tally.sustained(),
        wall_s=round(wall_s, 2),
        flavor=flavor,
        window=window.limit,
        peak_in_flight=window.peak_in_flight,
        peak_window=window.peak_limit,
        interrupted=stopped is not None,
        failure=drive.failure,
        extra={**cost, **({"serving": drive.serving} if drive.serving else {}), **drive.extra},
    )


def conclude(
    job: Job, drive: Drive, stopped: int | None, outcome: Outcome, cost: str | None, origin: ScriptSource
) -> tuple[str | None, int]:
    """Publishes this job's finished rows, or says what is left; the published address (or None) and the exit code."""
    if stopped is not None:
        return None, 128 + stopped
    if drive.failure is not None:
        return None, 1
    if not outcome.missing:
        return publish_or_say(job, drive, outcome.errors, outcome.truncated, cost, origin)
    say(f"{outcome.missing} row(s) have no outcome yet; rerun the same command to finish them")
    return None, 1


def run_cost(job: Job, tally: Tally, wall_s: float) -> tuple[str, dict[str, Any]]:
    """The flavor and the cost fields of the summary; a sample run (--max-samples) also projects the whole input."""
    flavor, price = run_price(job.settings.price_per_hour, job.facts.flavor)
    input_rows = job.source.input_rows
    sample_of = input_rows if job.settings.max_samples is not None and len(job.source.ids) < input_rows else None
    return flavor, cost_facts(price, wall_s, tally.seconds() if tally.done else 0.0, tally.done, sample_of)


def publish_or_say(
    job: Job, drive: Drive, errors: int, truncated: int, cost: str | None, origin: ScriptSource
) -> tuple[str | None, int]:
    replaced = job.destination.replaced_by_another_run(job.manifest)
    if replaced:
        drive.failure = replaced
        say(f"error: {replaced}")
        return None, 1
    try:
        published = publish(job, drive, errors, truncated, cost, origin)
    except HubRefused:
        raise
    except Exception as exc:
        say(
            f"error: publishing failed ({type(exc).__name__}: {exc}); every result is kept in "
            f"{job.destination.progress_dir}; rerun the same command to publish"
        )
        return None, 1
    shard = f" (shard {job.settings.shard[0]}/{job.settings.shard[1]})" if job.settings.shard else ""
    say(f"published {len(job.source.owned())} row(s){shard} ({errors} with an error) to {published}")
    return published, 0


def publish(job: Job, drive: Drive, errors: int, truncated: int, cost: str | None, origin: ScriptSource) -> str:
    """Writes this job's slice from its own rows' results only and publishes it with its facts (slices.py); each
    row's inference_info and, for a run that wrote no row (it only publishes), the card name what wrote the text; the
    card's reproduce command only when one exists (a Hub input, output and model, and the released script: its URL
    would run other bytes than an edited copy's)."""
    tally, owned, settings = drive.tally, job.source.owned(), job.settings
    results = slice_results(job.destination.progress_dir, owned)
    served = earlier_writers(results["provenance"].to_pylist()) if not tally.done else None
    timeout = job_timeout(len(owned), tally.pages_per_s() or None)
    command = job_command(job.launch.script, job.facts, job_arguments(job.launch.argv), timeout)
    on_the_hub = reproducible(settings.input, settings.output, settings.model)
    reproduce = on_the_hub and origin.url is not None
    template = CardFacts(
        source=job.settings.input,
        split=job.settings.split,
        config=job.settings.config,
        data_prefix=job.destination.data_prefix,
        model=job.settings.model,
        script=job.launch.script,
        image=served.image if served else ran_image(job.facts.image, drive.version),
        mode=job.launch.mode,
        command=command if reproduce else None,
        ran=None if reproduce else ran_command(job.launch.script, job.launch.argv),
        output_column=job.settings.output_column,
        error_column=job.settings.error_column,
        rows=len(owned),
        errors=errors,
        truncated=truncated,
        failed_text=job.columns.failed_text,
        runs=tuple(
            (entry.get("column_name", "?"), entry.get("model_id", "?")) for entry in inference_history(job.source)
        ),
        pages_per_s=tally.pages_per_s(),
        sustained_pages_per_s=tally.sustained()["sustained_pages_per_s"],
        billed_pages_per_s=billed_pages_per_s(tally.done, process_seconds()),
        tokens_per_s=tally.tokens_per_s(),
        window=drive.window.limit,
        cost=cost,
        kept_columns=job.columns.keep,
        serving=served.serving if served else drive.serving,
        vllm_version=served.vllm_version if served else drive.version,
        script_source=origin.describe(),
        core=f"{DISTRIBUTION} {core_version() or '(version unknown)'} ({core_build()})",
        modified_script=on_the_hub and origin.url is None,
        measured=served is None,
    )
    current = inference_info(job, drive, origin)
    shard = job.source.shard or (0, 1)
    with tempfile.TemporaryDirectory() as folder:
        files = assemble(
            job.source,
            results,
            job.columns,
            lambda record: row_entry(current, job.run_id, record),
            Path(folder),
            job.destination.data_prefix,
        )
        del results  # the slice's text is in the files now; the upload needs none of it in memory
        part = f", shard {shard[0]}/{shard[1]}" if job.source.shard else ""
        title = f"OCR with {job.settings.model}: {len(owned)} rows{part} [{job.settings.config or 'default'}]"
        return publish_slice(job.destination, files, slice_facts(shard, template, list(files)), template, title)
