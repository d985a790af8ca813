"""What the launcher shows while it watches: a line per shard and a total, decided from a snapshot of the run and
`now` alone, so tests decide every figure without a clock, a Hub or a job.

A shard's pages are its published slice's once it is in, and until then what its progress files on the output
repo hold (pages.py), its earlier jobs' included. Rates are pages per second between the oldest and the newest of
the last RATE_POLLS polls, once those span MIN_RATE_SPAN_S. The projected finish is the slowest open shard's: its
pages left at its own rate or, while its plan or its rate is not known yet, the finished shards' mean running
time less the time its job has run. While an open shard has neither (its job not started, no shard in), no finish
is projected: the total says what it knows (pages, rate, money) and no guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from .heal import Step
from .pages import PageCount

RATE_POLLS = 20
MIN_RATE_SPAN_S = 30.0
CLOSED_STEPS = (Step.DONE, Step.GIVE_UP)
QUEUED = "queued"  # a shard due a launch that waits, under --max-parallel-jobs, for a running job to end


@dataclass(frozen=True)
class ShardView:
    """One shard at this poll: its step, its latest job's stage (or the step, before any job), id and running
    seconds, its pages so far and its planned pages (None: not known yet)."""

    shard: int
    step: Step
    state: str
    job_id: str | None
    ran_s: float | None
    pages: PageCount
    planned: int | None


@dataclass(frozen=True)
class Snapshot:
    """The run at one poll: the shards, the money billed so far (None: a flavor's price is unknown), each shard's
    pages at each of the last polls (oldest first) and how many progress files could not be read this poll."""

    shards: tuple[ShardView, ...]
    usd: float | None
    history: tuple[tuple[datetime, Mapping[int, int]], ...]
    unread: int = 0


def shard_rates(history: Sequence[tuple[datetime, Mapping[int, int]]]) -> tuple[dict[int, float], float]:
    """Each shard's pages per second over the polls kept, and the seconds they span; none over less than
    MIN_RATE_SPAN_S (a poll's time), where a part more or less would swing the rate wildly."""
    if len(history) < 2:
        return {}, 0.0
    (first_at, first), (last_at, last) = history[0], history[-1]
    span = (last_at - first_at).total_seconds()
    if span < MIN_RATE_SPAN_S:
        return {}, 0.0
    return {shard: max(0, pages - first.get(shard, 0)) / span for shard, pages in last.items()}, span


def projected_finish(snapshot: Snapshot, now: datetime) -> tuple[datetime, str] | None:
    """When the last open shard is expected in, and from what; None when an open shard gives nothing to go by."""
    rates, _ = shard_rates(snapshot.history)
    finished = [view.ran_s for view in snapshot.shards if view.step is Step.DONE and view.ran_s is not None]
    mean = sum(finished) / len(finished) if finished else None
    left: list[float] = []
    bases: set[str] = set()
    for view in snapshot.shards:
        if view.step in CLOSED_STEPS:
            continue
        rate = rates.get(view.shard, 0.0)
        if view.planned is not None and rate > 0:
            left.append(max(0, view.planned - view.pages.pages) / rate)
            bases.add("the running shards' rates")
        elif mean is not None and view.ran_s is not None:
            left.append(max(0.0, mean - view.ran_s))
            bases.add("the finished shards' mean time")
        else:
            return None
    if not left:
        return None
    return now + timedelta(seconds=max(left)), " and ".join(sorted(bases, reverse=True))


def clock(when: datetime, now: datetime) -> str:
    return f"{when:%H:%M} UTC" if when.date() == now.date() else f"{when:%Y-%m-%d %H:%M} UTC"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def shard_line(view: ShardView, shards: int) -> str:
    pages = f"{view.pages.pages}" + (f"/{view.planned}" if view.planned is not None else "")
    ran = f"{view.ran_s / 60:.0f} min" if view.ran_s is not None else "-"
    line = f"  shard {view.shard}/{shards}: {view.state:<12} {pages:>13} pages {view.pages.errors:>6} err {ran:>8}"
    return line + (f"  {view.job_id}" if view.job_id else "")


def total_line(snapshot: Snapshot, now: datetime) -> str:
    """Shards in, pages done (of planned, once known) and errors, the rate, the money, the projected finish."""
    views = snapshot.shards
    done = sum(view.step is Step.DONE for view in views)
    given_up = sum(view.step is Step.GIVE_UP for view in views)
    queued = sum(view.state == QUEUED for view in views)
    pages = sum(view.pages.pages for view in views)
    errors = sum(view.pages.errors for view in views)
    planned = [view.planned for view in views]
    of = f" of {sum(planned)}" if views and None not in planned else ""
    said = [f"  {done} of {len(views)} shard(s) in" + (f", {given_up} given up" if given_up else "")]
    said[0] += f", {queued} queued" if queued else ""
    said.append(f"{pages}{of} pages ({errors} with an error)")
    rates, span = shard_rates(snapshot.history)
    if span:
        said.append(f"{sum(rates.values()):.2f} pages/s over the last {duration(span)}")
    said.append(f"${snapshot.usd:.2f} billed so far" if snapshot.usd is not None else "cost unknown")
    finish = projected_finish(snapshot, now)
    if finish is not None:
        said.append(f"projected finish about {clock(finish[0], now)} (from {finish[1]})")
    if snapshot.unread:
        said.append(f"{snapshot.unread} progress file(s) not read this poll (tried again at the next)")
    return "; ".join(said)


def watch_lines(snapshot: Snapshot, now: datetime, with_shards: bool) -> list[str]:
    """The poll's lines: every shard's, when asked, then the total."""
    shards = [shard_line(view, len(snapshot.shards)) for view in snapshot.shards] if with_shards else []
    return [*shards, total_line(snapshot, now)]
