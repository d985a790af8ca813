"""Per shard, from its jobs alone, what the launcher does next: launch it, wait for it, count it in, relaunch it,
or give up on it.

A job that ended in error, timeout or cancellation is relaunched (the shard resumes from what it published), up to
`--max-relaunches` relaunches by this launcher; a launch after a COMPLETED job that does not count its shard in
(standing.py) is a fresh launch, not a relaunch. A shard whose last two jobs failed the same way (the same exit code
and `failure` in the recipe's summary line: a bad argument, the canary, a model that cannot load) is not relaunched,
since a third job would fail the same way again and bill for it. A job stopped by a signal (a timeout, a cancel)
says nothing about the next one, so it never counts as the same failure. The budget is this launcher's: running
the same command again, after fixing the cause, gives a shard that was given up one more try.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise

from .jobs import DONE_STAGE, JobRecord

SIGNAL_EXITS = 128


class Step(Enum):
    LAUNCH = "launch"
    WAIT = "wait"
    DONE = "done"
    RELAUNCH = "relaunch"
    GIVE_UP = "give up"


@dataclass(frozen=True)
class Attempt:
    """One job of a shard, with, when it failed, how (None: not known, or a signal) and its last log lines."""

    job: JobRecord
    failure: str | None = None
    tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShardStep:
    step: Step
    reason: str | None = None


def failure_of(lines: Sequence[str]) -> str | None:
    """How a job failed, from the recipe's own summary line (its last JSON line): the exit code and the failure;
    None when it printed none or was stopped by a signal."""
    for line in reversed(lines):
        summary = trailing_object(line)
        if isinstance(summary, dict) and isinstance(summary.get("exit_code"), int):
            code = summary["exit_code"]
            return None if code >= SIGNAL_EXITS else f"exit {code}: {summary.get('failure') or 'no reason given'}"
    return None


def trailing_object(line: str) -> object:
    """The JSON object a log line ends with, whatever a log collector put before it (a timestamp, a stream's
    name); None when it ends with none."""
    text = line.strip()
    start = text.find("{")
    while start >= 0:
        try:
            found, end = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            found, end = None, -1
        if end == len(text):
            return found
        start = text.find("{", start + 1)
    return None


def ended(job: JobRecord) -> str:
    """How a job ended, in the words HF Jobs gave."""
    stage = {"ERROR": "failed", "CANCELED": "was cancelled", "DELETED": "was deleted"}.get(job.stage, job.stage)
    return f"job {job.id} {stage}" + (f" ({job.message})" if job.message else "")


def decide(
    attempts: Sequence[Attempt], max_relaunches: int, launched_here: Set[str], stale: Mapping[str, str]
) -> ShardStep:
    """`attempts` newest first; `launched_here` the ids of the jobs this launcher started; `stale` the COMPLETED
    jobs that do not count their shard in, with why (standing.py): the shard is launched again, afresh."""
    if not attempts:
        return ShardStep(Step.LAUNCH)
    latest = attempts[0]
    if latest.job.running:
        return ShardStep(Step.WAIT)
    if latest.job.stage == DONE_STAGE:
        reason = stale.get(latest.job.id)
        return ShardStep(Step.DONE) if reason is None else ShardStep(Step.LAUNCH, reason)
    relaunched = sum(newer.job.id in launched_here and older.job.failed for newer, older in pairwise(attempts))
    if len(attempts) > 1 and latest.job.id in launched_here and repeated(latest, attempts[1]):
        return ShardStep(Step.GIVE_UP, f"failed the same way twice in a row ({latest.failure})")
    if relaunched >= max_relaunches:
        return ShardStep(Step.GIVE_UP, f"{ended(latest.job)}; --max-relaunches {max_relaunches} spent")
    return ShardStep(Step.RELAUNCH, ended(latest.job) + (f": {latest.failure}" if latest.failure else ""))


def repeated(latest: Attempt, previous: Attempt) -> bool:
    return previous.job.failed and latest.failure is not None and latest.failure == previous.failure
