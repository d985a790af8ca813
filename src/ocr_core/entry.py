"""The entry of a shipped script: parse the command, prepare the job, let its shape drive the pages, publish, and
return the exit code. One public function per shape, each taking the model's facts and the script:

    raise SystemExit(run_saturate(FACTS, __file__))

`script` is the running file (its name appears in the summary, the card and the job command; its bytes are looked
up in the release table of the core's wheel, so an edited copy is recorded as modified). `argv` defaults to the
command line; `hub` replaces the real Hub client (tests pass a folder-backed double), `jobs` the HF Jobs client of a
`--jobs N` launcher (tests pass a double that runs each job as a local process).

Exit codes: 0 every selected row has an outcome and the dataset is published (or, for a shard, its rows are done);
1 the job failed (the message says why; finished rows are kept for the rerun); 2 the command needs changing;
129 / 130 / 143 stopped by SIGHUP / Ctrl-C / SIGTERM (rerun to resume). Every way out, a refused command line
included, prints the one JSON summary line on stdout, with `exit_code` and, when the run failed, `failure`; a run
that reached its pages says the same in one sentence on stderr first.
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .command.advice import explain
from .command.checks import parse_command
from .command.parser import build_parser, usage
from .command.plan_report import show_plan
from .command.rerun import raised_tokens_command, retry_command
from .command.sealed_arguments import register_command_secrets, unsealed
from .console import say, silence_notices
from .errors import CommandError, JobFailed
from .facts import ModelFacts
from .fanout.jobs import JobsClient
from .fanout.launcher import launch_command_line
from .planning.launch import Launch
from .planning.make_plan import World, make_run_plan
from .planning.provenance import ScriptSource, released_scripts, script_source
from .planning.run_plan import RunPlan
from .preparation.job import Job, prepare_job, release
from .publishing.live_progress import show_progress_on_card
from .publishing.outcome import finish, load_call
from .shapes.drive_result import DrivePages
from .shapes.inference import prompt_sha256
from .shapes.offline import drive_offline_job
from .shapes.served import already_answering, drive_server_job
from .shapes.signals import KEPT, Interrupted, StopSignals, uninterrupted
from .store.hub import HubClient
from .store.lease import LeaseTaken
from .store.mirror import ProgressMirror
from .summary_line import ScriptCopy, Summary, process_seconds


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
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(usage(script, facts, mode))
        return 0
    parser = build_parser(script, facts, mode)
    try:
        argv = unsealed(argv, parser.error)
        settings, fanout, plan_only = parse_command(parser, argv)
    except SystemExit as exc:
        if exc.code != 2:
            raise
        return refused_command(parser, Summary(script, facts.model, mode, argv[1] if len(argv) > 1 else None))
    if plan_only:
        return show_plan(settings, facts, script_path, mode)
    if fanout is not None:
        loads = load_call(settings.output, settings.split, settings.config)
        return launch_command_line(facts, script_path, parser, settings, fanout, hub, jobs, loads)
    summary = Summary(script, settings.model, mode, settings.output)
    streams: list[TextIO] = [sys.stdout]
    stop = StopSignals()
    stop.install()
    try:
        register_command_secrets(settings)
        if settings.verbose:
            say(versions())
        origin = script_source(script_path, released_scripts())
        summary.copy = ScriptCopy(origin.standing, origin.sha256, prompt_sha256(facts))
        retry = retry_command(script, facts, argv, settings)
        launch = Launch(script, mode, argv, origin, retry, raised_tokens_command(script, facts, argv, settings))
        plan = make_run_plan(settings, facts, mode, World(answering=already_answering))
        code = run_job(plan, facts, launch, drive_pages, hub, stop, summary, streams, origin)
    except BaseException as exc:
        explained = explain(exc, script, facts, argv, settings) if isinstance(exc, CommandError) else None
        code = failure_code(exc, stop, summary, settings.verbose, explained)
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


def run_job(
    plan: RunPlan,
    facts: ModelFacts,
    launch: Launch,
    drive_pages: DrivePages,
    hub: HubClient | None,
    stop: StopSignals,
    summary: Summary,
    streams: list[TextIO],
    origin: ScriptSource,
) -> int:
    """Prepares the job under the run's plan, lets the shape drive its pages and publishes; the exit code."""
    job = prepare_job(plan, facts, launch, hub)
    try:
        show_progress_on_card(job)
        try:
            drive = drive_pages(job, stop, streams)
        finally:
            closed = uninterrupted(lambda: close_mirror(job, job.mirror))
        drive.failure = drive.failure or closed
        code, summary.run = finish(job, drive, stop.signum, origin)
        summary.load_with = load_call(plan.output.output, plan.output.split, plan.output.config) if code == 0 else None
        summary.next_command = drive.next_command
        return code
    finally:
        release(job.destination, job.lease, job.locks, job.mirror)


def failure_code(
    exc: BaseException, stop: StopSignals, summary: Summary, verbose: bool, explained: str | None = None
) -> int:
    """The exit code and the summary's `failure` for a run that ended by an exception; `explained` is a refused
    command's message with the way forward (command/advice.py)."""
    if isinstance(exc, Interrupted | KeyboardInterrupt):
        summary.failure = "interrupted"
        return 128 + (stop.signum or signal.SIGINT)
    if isinstance(exc, CommandError):
        summary.failure = explained or str(exc)
        say(f"error: {summary.failure}")
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


def run_offline(
    facts: ModelFacts,
    script: str | Path,
    *,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
    jobs: JobsClient | None = None,
) -> int:
    """The offline shape: an in-process `vllm.LLM` fed batches of pages."""
    return run_recipe(facts, Path(script), "offline", drive_offline_job, argv, hub, jobs)


def run_server(
    facts: ModelFacts,
    script: str | Path,
    *,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
    jobs: JobsClient | None = None,
) -> int:
    """The server shape: `vllm serve` (started when none answers) with a fixed window of pages in flight."""
    return run_recipe(facts, Path(script), "server", drive_server_job, argv, hub, jobs)


def run_saturate(
    facts: ModelFacts,
    script: str | Path,
    *,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
    jobs: JobsClient | None = None,
) -> int:
    """The saturate shape: as the server shape, with a window that widens until the engines' queues fill."""
    return run_recipe(facts, Path(script), "saturate", drive_server_job, argv, hub, jobs)
