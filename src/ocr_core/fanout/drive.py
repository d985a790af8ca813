"""The launcher's loop: find the run's jobs by their labels, decide each shard's next step, launch what has to be
launched (under --max-parallel-jobs K, while fewer than K jobs run; the rest wait queued), show where the shards
stand, and stop when every shard is in or given up, or at Ctrl-C. Before the first launch, what the output holds is
settled against this run (standing.py): a shard whose job completed earlier is in only when its slice is published
there under this run's settings. All of it runs under the launcher's lease on the output (launcher_lease.py): a
second launcher of it would launch the same queued shards and run more jobs than the cap.

Nothing here cancels a job. Ctrl-C detaches: the jobs keep running (and billing), and the same command re-attaches
by the labels. A job this launcher started is remembered by its id as well, so a listing that lags behind a launch
cannot make it launch a shard twice.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from ..command.jobs_request import FanoutRequest
from ..command.sealed_arguments import SEALED_SECRET
from ..console import say
from ..planning.job_commands import wrapped_command
from ..publishing.slices import published_slices
from ..redaction import redact
from ..settings import Settings
from ..store.hub import HubClient
from ..store.output import Destination
from .heal import Attempt, ShardStep, Step, decide, failure_of
from .jobs import JobRecord, JobsClient, newest_first
from .launcher_lease import LauncherLease, take_launcher_lease
from .pages import LivePages, PageCount
from .plan import RUN_LABEL, JobsPlan, hand_secrets, labelled_shard, launch_command, relaunch_of
from .preflight import check_hub_answers, check_hub_ids, check_reachable, job_secrets
from .standing import runs_slices, settle_output, stale_jobs
from .summary import FanoutSummary, shard_outcome, spend, wall_seconds
from .watch import QUEUED, RATE_POLLS, ShardView, Snapshot, watch_lines

POLL_S = 30.0
SHARD_LINES_EVERY_S = 600.0
LOG_LINES = 20
DETACHED_EXIT = 130


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Watch:
    """What the launcher knows of the run: every job it has seen (by id), which it started, each failed job's log
    tail (read once), the facts of the slices the finished shards published (read when another shard is in), the
    shards' pages as their progress files hold them (each file read once) and those of the last polls, for rates;
    `cap`, how many jobs may run at once (None: every shard's), and the shards due a launch that wait for a job to
    end (`queued`)."""

    plan: JobsPlan
    client: JobsClient
    destination: Destination
    pages: LivePages
    cap: int | None = None
    queued: set[int] = field(default_factory=set)
    published: dict[int, dict] = field(default_factory=dict)
    seen: dict[str, JobRecord] = field(default_factory=dict)
    launched_here: set[str] = field(default_factory=set)
    given_up: set[int] = field(default_factory=set)
    history: deque[tuple[datetime, dict[int, int]]] = field(default_factory=lambda: deque(maxlen=RATE_POLLS))
    shown: tuple[tuple[str, str | None], ...] = ()
    shown_at: datetime | None = None
    tails: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def refresh(self) -> dict[int, list[Attempt]]:
        """Each shard's attempts, newest first: the run's jobs as listed, and those this launcher started that the
        listing does not show yet."""
        listed = {job.id: job for job in self.client.jobs_labelled({RUN_LABEL: self.plan.run})}
        for job_id in self.launched_here - set(listed):
            listed[job_id] = self.client.inspect(job_id)
        self.seen.update(listed)
        by_shard: dict[int, list[JobRecord]] = {index: [] for index in range(self.plan.shards)}
        for job in self.seen.values():
            shard = labelled_shard(job.labels, self.plan.run, self.plan.shards)
            if shard is not None:
                by_shard[shard].append(job)
        return {shard: [self.attempt(job) for job in newest_first(jobs)] for shard, jobs in by_shard.items()}

    def read_published(self, done: Sequence[int]) -> None:
        if set(done) - set(self.published):
            self.published = {item["shard"][0]: item for item in published_slices(self.destination, self.plan.shards)}

    def attempt(self, job: JobRecord) -> Attempt:
        if not job.failed:
            return Attempt(job)
        if job.id not in self.tails:
            self.tails[job.id] = tuple(self.client.log_tail(job.id, LOG_LINES))
        tail = self.tails[job.id]
        return Attempt(job, failure_of(tail), tail)


def fan_out(
    request: FanoutRequest,
    settings: Settings,
    plan: JobsPlan,
    summary: FanoutSummary,
    client: JobsClient,
    hub: HubClient | None,
    given: Mapping[str, str],
) -> int:
    """Launches, watches and heals the run's shards; fills `summary` and returns the exit code: 0 every shard is in,
    1 a shard was given up, 130 detached (the jobs run on). `given`: the secrets the command line gave the jobs."""
    at_once = f", at most {request.max_parallel} running at once" if request.max_parallel else ""
    say(
        f"fan-out {plan.run}: {plan.shards} job(s) on {plan.launches[0].flavor}{at_once}; the jobs run "
        f"{plan.script_said}; they install {plan.core_said}"
    )
    check_reachable(settings, client)
    check_hub_ids(settings)
    if request.dry_run:
        for launch in plan.launches:
            print(wrapped_command(redact(launch_command(launch))), flush=True)
        say(hand_secrets(plan.launches[0].secrets, given.get(SEALED_SECRET)))
        summary.dry_run = True
        return 0
    check_hub_answers(settings, hub)
    destination = Destination(settings.output, settings.split, settings.config, hub)
    secrets = job_secrets(plan, settings, given)
    held = take_launcher_lease(destination, settings)
    try:
        return watch_run(request, settings, plan, summary, client, destination, secrets, held)
    finally:
        held.let_go()


def watch_run(
    request: FanoutRequest,
    settings: Settings,
    plan: JobsPlan,
    summary: FanoutSummary,
    client: JobsClient,
    destination: Destination,
    secrets: dict[str, str],
    held: LauncherLease,
) -> int:
    """fan_out's watch, under this launcher's lease (renewed at every poll): settles the output, then launches,
    watches and heals the shards until every one is in or given up, or Ctrl-C detaches."""
    settle_output(destination, plan.manifest, settings, plan.shards)
    pages = LivePages(destination, plan.shards, settings.max_samples)
    watch = Watch(plan, client, destination, pages, request.max_parallel)
    steps: dict[int, ShardStep] = {}
    attempts: dict[int, list[Attempt]] = {}
    stale: dict[str, str] | None = None
    try:
        while True:
            held.renew(settings.take_over)
            attempts = watch.refresh()
            if stale is None:
                slices = runs_slices(destination, plan.manifest, settings, plan.shards)
                stale = stale_jobs(attempts, slices, settings.retry_errors)
            steps = {
                shard: decide(tried, request.max_relaunches, watch.launched_here, stale)
                for shard, tried in attempts.items()
            }
            launched = launch_due(watch, steps, attempts, secrets)
            if not launched and all(step.step in (Step.DONE, Step.GIVE_UP) for step in steps.values()):
                break
            if not launched:
                show(watch, attempts, steps, settings.price_per_hour, utc_now())
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        summary.detached = True
        running = sum(step.step is Step.WAIT for step in steps.values())
        queued = (
            f"; {len(watch.queued)} shard(s) queued, which no job runs yet: the same command re-attaches and "
            "launches the queued shard(s)"
            if watch.queued
            else "; run the same command to re-attach"
        )
        say(f"detached: {running} job(s) keep running{queued}")
    published = runs_slices(destination, plan.manifest, settings, plan.shards)
    conclude(summary, published, plan, attempts, steps, settings.price_per_hour, utc_now(), watch.queued)
    if summary.detached:
        return DETACHED_EXIT
    return 1 if any(step.step is Step.GIVE_UP for step in steps.values()) or summary.unpublished() else 0


def launch_due(watch: Watch, steps: dict[int, ShardStep], attempts: dict[int, list[Attempt]], secrets: dict) -> bool:
    """Launches every shard whose step says so, in shard order, while fewer than the cap run (a relaunch counts
    too); the rest are queued until a job ends. Says once why a shard is given up, with its last log lines."""
    launched = False
    running = sum(step.step is Step.WAIT for step in steps.values())
    watch.queued = set()
    for shard, step in steps.items():
        label = f"shard {shard}/{watch.plan.shards}"
        if step.step in (Step.LAUNCH, Step.RELAUNCH) and watch.cap is not None and running >= watch.cap:
            watch.queued.add(shard)
        elif step.step in (Step.LAUNCH, Step.RELAUNCH):
            running += 1
            ended = [attempt.job.id for attempt in attempts[shard] if attempt.job.failed]
            job = watch.client.launch(relaunch_of(watch.plan.launches[shard], ended), secrets)
            watch.launched_here.add(job.id)
            watch.seen[job.id] = job
            verb = f"relaunched after {step.reason}:" if step.step is Step.RELAUNCH else "launched:"
            verb = f"launched ({step.reason}):" if step.step is Step.LAUNCH and step.reason else verb
            say(f"{label} {verb} job {job.id}" + (f" ({job.url})" if job.url else ""))
            launched = True
        elif step.step is Step.GIVE_UP and shard not in watch.given_up:
            watch.given_up.add(shard)
            tail = "\n".join(f"    {line}" for line in attempts[shard][0].tail) or "    (no log lines)"
            say(f"{label} is not relaunched: {step.reason}; its last log lines:\n{tail}")
    return launched


def show(
    watch: Watch,
    attempts: Mapping[int, Sequence[Attempt]],
    steps: Mapping[int, ShardStep],
    price_per_hour: float | None,
    now: datetime,
) -> None:
    """A total at every poll (shards in, pages done of planned, the rate, the money billed so far, the projected
    finish), after one line per shard (its state, pages, errors, the minutes its job has run, the job id) when a
    shard's state or job changed, and every SHARD_LINES_EVERY_S. A shard's pages are its published slice's once
    it is in, until then its progress files' on the output repo, read live: the repo is listed once a poll and only
    the files not read before are read, a few columns each (pages.py); a second listing comes only at a poll that
    sees a shard newly in, for its facts. The figures and lines themselves are watch.py's, from a snapshot."""
    plan = watch.plan
    watch.read_published([shard for shard, step in steps.items() if step.step is Step.DONE])
    listing = watch.destination.listing()
    live = watch.pages.count(listing)
    planned = watch.pages.plan(listing) or {}
    views = tuple(
        shard_view(shard, tried, steps[shard], watch.published.get(shard), live[shard], planned.get(shard))
        for shard, tried in attempts.items()
    )
    views = tuple(replace(view, state=QUEUED) if view.shard in watch.queued else view for view in views)
    watch.history.append((now, {view.shard: view.pages.pages for view in views}))
    jobs = [attempt.job for tried in attempts.values() for attempt in tried]
    spent = spend(jobs, plan.launches[0].flavor, price_per_hour)
    snapshot = Snapshot(views, spent.usd, tuple(watch.history), len(watch.pages.unread))
    states = tuple((view.state, view.job_id) for view in views)
    due = watch.shown_at is None or (now - watch.shown_at).total_seconds() >= SHARD_LINES_EVERY_S
    with_shards = states != watch.shown or due
    say("\n".join(watch_lines(snapshot, now, with_shards)))
    if with_shards:
        watch.shown, watch.shown_at = states, now


def shard_view(
    shard: int,
    tried: Sequence[Attempt],
    step: ShardStep,
    published: Mapping | None,
    live: PageCount,
    planned: int | None,
) -> ShardView:
    """A shard in: its published slice's pages; until then, the pages its progress files hold."""
    job = tried[0].job if tried else None
    pages = PageCount(published["rows"] - published["errors"], published["errors"]) if published else live
    state = step.step.value if job is None else job.stage.lower()
    return ShardView(shard, step.step, state, job.id if job else None, job.running_s if job else None, pages, planned)


def conclude(
    summary: FanoutSummary,
    published: Mapping[int, Mapping],
    plan: JobsPlan,
    attempts: Mapping[int, Sequence[Attempt]],
    steps: Mapping[int, ShardStep],
    price_per_hour: float | None,
    now: datetime,
    queued: Set[int] = frozenset(),
) -> None:
    """The summary's figures: each shard's outcome with the pages and errors it published under this run's
    settings (standing.runs_slices), the money, the wall time; a shard still `queued` (a launcher detached before
    its turn) says so."""
    summary.shards = [
        shard_outcome(shard, attempts.get(shard, []), steps.get(shard, ShardStep(Step.LAUNCH)), published.get(shard))
        for shard in range(plan.shards)
    ]
    summary.shards = [replace(shard, state=QUEUED) if shard.shard in queued else shard for shard in summary.shards]
    jobs = [attempt.job for tried in attempts.values() for attempt in tried]
    summary.spent = spend(jobs, plan.launches[0].flavor, price_per_hour)
    summary.wall_s = wall_seconds(jobs, now)
