"""The launcher's own flags on a recipe's command line, and the command line each job gets without them.

`--jobs N` turns a recipe run into a launcher: it starts N HF Jobs, each running the same script with the same
flags and `--shard I/N`. The launcher's flags are taken off before the recipe's settings are built (so they never
reach the results' fingerprint); the jobs' command line is rendered from those settings (rendered_arguments.py),
so a job runs its shard and never launches again.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from .core_wheel import CoreWheel

DEFAULT_MAX_RELAUNCHES = 2
DESTS = ("jobs", "flavor", "job_timeout", "job_image", "max_relaunches", "max_parallel_jobs", "dry_run")
VALUED_FLAGS = ("--jobs", "--flavor", "--job-timeout", "--job-image", "--max-relaunches", "--max-parallel-jobs")
SWITCHES = ("--dry-run",)


@dataclass(frozen=True)
class FanoutRequest:
    """What the user asked the launcher for; None fields come from the script's `[tool.hf-jobs]` header, but
    `max_parallel`: None runs every shard at once."""

    jobs: int
    flavor: str | None
    timeout: str | None
    image: str | None
    max_relaunches: int
    dry_run: bool
    core_wheel: CoreWheel | None = None
    max_parallel: int | None = None


def add_fanout_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("HF Jobs fan-out (run from anywhere with a token; see SERVING.md)")
    group.add_argument(
        "--jobs",
        type=int,
        help="launch N HF Jobs, each running this script with these flags and --shard I/N, watch them until every "
        "shard is in, and relaunch the ones that fail; the same command again re-attaches",
    )
    group.add_argument("--flavor", help="with --jobs: the jobs' hardware (default: the script's [tool.hf-jobs] one)")
    group.add_argument("--job-timeout", help="with --jobs: each job's timeout, e.g. 6h (default: the script's)")
    group.add_argument("--job-image", help="with --jobs: the jobs' image (default: the script's)")
    group.add_argument(
        "--max-relaunches",
        type=int,
        default=DEFAULT_MAX_RELAUNCHES,
        help="with --jobs: relaunches of a shard whose job failed, timed out or was cancelled (it resumes)",
    )
    group.add_argument(
        "--max-parallel-jobs",
        type=int,
        metavar="K",
        help="with --jobs: at most K jobs running at once, the next shard launched as one ends (a relaunch waits its "
        "turn too); the rest are queued (default: every shard at once)",
    )
    group.add_argument("--dry-run", action="store_true", help="with --jobs: print the N launches and send nothing")
    group.add_argument(
        "--core-wheel",
        metavar="WHEEL",
        help="with --jobs: a wheel of this core that travels with each job, needed where the core is not a release "
        "build (make submit builds it and passes it); in a job: the shipped wheel, checked against the core that runs",
    )


def take_fanout_request(parser: argparse.ArgumentParser, args: argparse.Namespace) -> FanoutRequest | None:
    """Removes the launcher's flags from the parsed arguments; the request when --jobs was given. A launcher flag
    without --jobs, or --jobs beside --shard, is a command error (exit 2), said with the fix."""
    values = {name: vars(args).pop(name) for name in DESTS}
    if values["jobs"] is None:
        given = [flag for flag, dest in zip((*VALUED_FLAGS, *SWITCHES), DESTS) if launcher_flag_set(dest, values)]
        if given:
            parser.error(f"{', '.join(given)} only work with --jobs N (the launcher of N HF Jobs)")
        return None
    if values["jobs"] < 1:
        parser.error(f"--jobs must be at least 1 (got {values['jobs']})")
    if values["max_relaunches"] < 0:
        parser.error(f"--max-relaunches must be 0 or more (got {values['max_relaunches']})")
    if values["max_parallel_jobs"] is not None and values["max_parallel_jobs"] < 1:
        parser.error(
            f"--max-parallel-jobs must be at least 1 (got {values['max_parallel_jobs']}); leave it out to run every "
            "shard at once"
        )
    if args.shard is not None:
        parser.error("--jobs N launches every shard itself (job I gets --shard I/N); leave --shard out")
    return FanoutRequest(
        values["jobs"],
        values["flavor"],
        values["job_timeout"],
        values["job_image"],
        values["max_relaunches"],
        values["dry_run"],
        max_parallel=values["max_parallel_jobs"],
    )


def launcher_flag_set(dest: str, values: dict) -> bool:
    if dest == "max_relaunches":
        return values[dest] != DEFAULT_MAX_RELAUNCHES
    return bool(values[dest])
