"""This run's claim on its slice of the output: the lease taken, held and confirmed, and the whole output claimed
before earlier results are replaced."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace

from ..console import say
from ..planning.run_plan import RunPlan
from ..store.hub import HubRefused
from ..store.lease import (
    WHOLE,
    Lease,
    LeaseTaken,
    LocalLocks,
    conflicts,
    first_landed,
    lease_commit_title,
    lease_key,
    lease_ttl,
    taken_message,
)
from ..store.mirror import ProgressMirror
from ..store.output import Destination


def claim_lease(destination: Destination, listing: list[str], run_id: str, plan: RunPlan) -> Lease | None:
    """Refuses to start beside a live run of an overlapping slice on another machine (a Hub output only)."""
    if destination.local:
        return None
    lease = Lease.new(run_id, lease_key(plan.shard), lease_ttl(plan.output.upload_every))
    if not plan.output.take_over:
        taken = conflicts(destination.leases(listing), lease, time.time(), plan.output.take_over_jobs)
        if taken:
            raise LeaseTaken(taken_message(taken[0].describe(), destination.where()))
    return lease


def hold_lease(destination: Destination, listing: list[str], lease: Lease | None, plan: RunPlan) -> ProgressMirror:
    """Puts this run's lease on the Hub before the input is loaded (which can take minutes) and keeps it renewed
    from then on, so another run of an overlapping slice started meanwhile sees it, however long the load takes.
    The same commit clears the leases of runs long gone, and those of the ended jobs this run takes over."""
    mirror = ProgressMirror(destination, plan.output.upload_every, None, lease)
    if lease is None:
        return mirror
    name, path = destination.lease_file(lease)
    now = time.time()
    expired = [
        destination.in_progress(old.file_name)
        for old in destination.leases(listing)
        if old.expires <= now or old.job in plan.output.take_over_jobs
    ]
    try:
        destination.push({name: path}, expired, lease_commit_title(lease))
    except HubRefused:
        if not destination.create_pr:
            raise
        destination.mirror_progress = False
        say(
            f"--create-pr: this token may not write to the main branch of {destination.spec}, so progress stays on "
            f"this machine ({destination.progress_dir}; rerun here to resume); the dataset still opens as a pull "
            "request at the end"
        )
        return mirror
    if destination.create_pr:
        say(
            "--create-pr: the dataset opens as a pull request at the end; progress goes to the main branch "
            f"({destination.progress_prefix}/), where a rerun finds it"
        )
    confirm_lease(destination, lease, plan)
    mirror.start()
    return mirror


def confirm_lease(destination: Destination, lease: Lease | None, plan: RunPlan) -> None:
    """After our lease's commit is in: of runs started at once, all but the one whose lease landed first step
    back (lease.py)."""
    if lease is None or plan.output.take_over:
        return
    live = conflicts(destination.leases(destination.listing()), lease, time.time(), plan.output.take_over_jobs)
    if not live:
        return
    winner = first_landed([lease, *live], destination.commit_titles())
    if winner is not lease:
        destination.push({}, [destination.in_progress(lease.file_name)], "OCR progress: lease given up")
        raise LeaseTaken(taken_message(winner.describe(), destination.where()))


def replace_unused_settings(
    destination: Destination,
    listing: list[str],
    lease: Lease | None,
    locks: LocalLocks,
    take_over: bool,
    changed: list[str],
) -> None:
    """A manifest with no result behind it, left by a run refused before its first page (a --max-tokens the server
    cannot hold), pins nothing: the corrected command its error asked for takes its place. Only while no other run
    holds any slice, as one that is starting may not have written its first part yet."""
    with whole_output(destination, listing, lease, locks, take_over):
        say(
            f"the earlier run at {destination.where()} made no result; this run's settings replace its own "
            f"({', '.join(changed)} differ)"
        )


def replace_results(
    destination: Destination,
    listing: list[str],
    lease: Lease | None,
    locks: LocalLocks,
    take_over: bool,
    changed: list[str],
) -> None:
    """--overwrite after a settings change: every slice's results go, so no run may be writing any slice now."""
    with whole_output(destination, listing, lease, locks, take_over):
        say(f"--overwrite: removing the results made another way ({', '.join(changed)} differ)")
        ours = destination.in_progress(lease.file_name) if lease is not None else None
        destination.discard_progress([name for name in listing if name != ours])


@contextlib.contextmanager
def whole_output(
    destination: Destination, listing: list[str], lease: Lease | None, locks: LocalLocks, take_over: bool
) -> Iterator[None]:
    """The whole output to this run alone for a moment: no live lease of another run on the Hub (unless
    --take-over) and no other run's lock on this machine."""
    if lease is not None and not take_over:
        taken = conflicts(destination.leases(listing), replace(lease, key=WHOLE), time.time())
        if taken:
            raise LeaseTaken(taken_message(taken[0].describe(), destination.where()))
    with locks.whole(destination.where()):
        yield
