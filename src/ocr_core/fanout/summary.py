"""What a fan-out did, once, at the end: a sentence for a person and one JSON line for a script, as a recipe run
says it.

Pages and errors come from the slices the shards published (their facts files on the output repo), so they count
what is in the dataset, whichever launcher started the jobs. The money is every job of the run, failed ones
included: each job's billed seconds (the time it ran, as HF Jobs report it) at its flavor's price.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, TextIO

from ..publishing.cost import flavor_price
from ..summary_line import shell_opening
from .heal import Attempt, ShardStep, Step
from .jobs import JobRecord
from .watch import QUEUED

STATES = {Step.DONE: "done", Step.GIVE_UP: "given up", Step.LAUNCH: "not launched"}
UNPUBLISHED = "not published"


@dataclass(frozen=True)
class ShardOutcome:
    shard: int
    job_id: str | None
    state: str
    pages: int | None
    errors: int | None
    relaunches: int
    duration_s: float | None


@dataclass(frozen=True)
class Spend:
    """Dollars for the run's jobs so far (None when a flavor's price is unknown), the seconds billed, the basis."""

    usd: float | None
    billed_s: float
    basis: str


def shard_outcome(shard: int, attempts: Sequence[Attempt], step: ShardStep, published: Mapping | None) -> ShardOutcome:
    """A shard done is "done" only with its slice published under this run's settings: else "not published"."""
    latest = attempts[0].job if attempts else None
    state = STATES.get(step.step) or (latest.stage.lower() if latest is not None else "not launched")
    state = UNPUBLISHED if step.step is Step.DONE and published is None else state
    return ShardOutcome(
        shard=shard,
        job_id=latest.id if latest is not None else None,
        state=state,
        pages=published["rows"] if published else None,
        errors=published["errors"] if published else None,
        relaunches=max(0, len(attempts) - 1),
        duration_s=latest.running_s if latest is not None else None,
    )


def spend(jobs: Sequence[JobRecord], flavor: str, price_per_hour: float | None) -> Spend:
    """Each job at its own flavor's price (a job that does not say, at the launch's flavor)."""
    usd: float | None = 0.0
    for job in jobs:
        price = flavor_price(job.flavor or flavor, price_per_hour, "the job's flavor")
        usd = None if price is None or usd is None else usd + price.per_hour * job.running_s / 3600
    billed = sum(job.running_s for job in jobs)
    basis = flavor_price(flavor, price_per_hour, "the jobs' flavor")
    described = basis.basis if basis is not None else f"unknown price for {flavor}: pass --price-per-hour"
    return Spend(round(usd, 4) if usd is not None else None, billed, described)


def wall_seconds(jobs: Sequence[JobRecord], now: datetime) -> float:
    """From the run's first job created to its last one finished (now, while any runs): the run's wall time,
    however many launchers watched it."""
    if not jobs:
        return 0.0
    ends = [job.finished_at or now for job in jobs]
    return round((max(ends) - min(job.created_at for job in jobs)).total_seconds(), 1)


@dataclass
class FanoutSummary:
    script: str
    model: str
    output: str
    run: str
    jobs: int
    shards: list[ShardOutcome] = field(default_factory=list)
    spent: Spend | None = None
    wall_s: float = 0.0
    load_with: str | None = None
    detached: bool = False
    dry_run: bool = False
    exit_code: int = 0
    max_parallel_jobs: int | None = None

    @property
    def pages(self) -> int:
        return sum(shard.pages or 0 for shard in self.shards)

    @property
    def errors(self) -> int:
        return sum(shard.errors or 0 for shard in self.shards)

    def sentence(self) -> str:
        done = sum(shard.state == "done" for shard in self.shards)
        relaunches = sum(shard.relaunches for shard in self.shards)
        money = "cost unknown" if self.spent is None or self.spent.usd is None else f"${self.spent.usd:.2f}"
        said = (
            f"{done} of {self.jobs} shard(s) in: {self.pages} page(s), {self.errors} with an error, {relaunches} "
            f"relaunch(es), {money} billed over {self.wall_s / 60:.0f} min (exit {self.exit_code})"
        )
        given_up = [f"{shard.shard}/{self.jobs}" for shard in self.shards if shard.state == "given up"]
        queued = sum(shard.state == QUEUED for shard in self.shards)
        if self.detached and queued:
            return (
                f"{said}; detached: the jobs keep running, and the same command re-attaches and launches the "
                f"{queued} queued shard(s)."
            )
        if self.detached:
            return f"{said}; detached: the jobs keep running, and the same command re-attaches."
        if given_up:
            shards = ", ".join(given_up)
            return f"{said}; given up: shard(s) {shards} (see above); fix the cause and run the same command again."
        if self.unpublished():
            shards = ", ".join(f"{shard}/{self.jobs}" for shard in self.unpublished())
            return (
                f"{said}; not published: shard(s) {shards}: their jobs completed, but the output holds no slice of "
                "theirs under this run's settings (deleted, or replaced by another run); run the same command again."
            )
        return f"{said}; open it with {shell_opening(self.load_with)}."

    def unpublished(self) -> list[int]:
        return [shard.shard for shard in self.shards if shard.state == UNPUBLISHED]

    def line(self) -> str:
        fields: dict[str, Any] = {
            "script": self.script,
            "model": self.model,
            "mode": "fanout",
            "output": self.output,
            "run": self.run,
            "jobs": self.jobs,
            "max_parallel_jobs": self.max_parallel_jobs,
            "shards": [asdict(shard) for shard in self.shards],
            "pages": self.pages,
            "errors": self.errors,
            "relaunches": sum(shard.relaunches for shard in self.shards),
            "cost_usd": self.spent.usd if self.spent else None,
            "billed_s": self.spent.billed_s if self.spent else 0,
            "price_basis": self.spent.basis if self.spent else None,
            "wall_s": self.wall_s,
            "load_with": self.load_with if self.exit_code == 0 and not self.dry_run else None,
            "detached": self.detached,
            "dry_run": self.dry_run,
            "exit_code": self.exit_code,
        }
        return json.dumps(fields)

    def print_to(self, stream: TextIO) -> None:
        print(self.line(), file=stream, flush=True)
