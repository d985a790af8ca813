"""Everything a run settles before its first page: input, output, ownership, lease, manifest and what is left to do.

The order matters. Nothing is written before OUTPUT is known to hold nothing foreign and this run holds its slice
of it; the lease is on the Hub, and kept renewed, before the input is loaded (minutes, for a large dataset); the
manifest is compared before any earlier result is trusted, and again after the load, right before this run writes
its own; an `--overwrite` clears earlier results (here and on the Hub) before any new one is written; and only
then are the results fetched and counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..console import say
from ..facts import ModelFacts
from ..inputs.addresses import UsageError, check_local_input, input_problem, unreachable_problem
from ..inputs.columns import Columns, collisions
from ..inputs.source import Source, load_source
from ..planning.launch import Launch
from ..planning.provenance import on_hf_jobs
from ..planning.run_plan import RunPlan
from ..store.hub import HfHub, HubClient, with_retries
from ..store.lease import Lease, LocalLocks, lease_key
from ..store.manifest import (
    ManifestUnreadable,
    differences,
    fingerprint,
    is_legacy_match,
    limit_changes,
    settings_mismatch_message,
    write_manifest,
)
from ..store.mirror import ProgressMirror
from ..store.output import Destination
from ..store.output_folder import make_output_folder, remove_unused_output
from ..store.progress import finished_ids, new_run_id, read_results
from .claim import claim_lease, hold_lease, replace_results, replace_unused_settings
from .ownership import check_ownership, hub_token, open_destination


@dataclass
class Job:
    """A prepared job: the run's plan (made once, in the entry), the model's facts, how it was launched, and what
    preparing it settled: the destination, the input's rows, the result columns, the rows already done, this run's
    hold on its slice and the manifest it wrote."""

    plan: RunPlan
    facts: ModelFacts
    launch: Launch
    destination: Destination
    source: Source
    columns: Columns
    skip: set[str]
    locks: LocalLocks
    lease: Lease | None
    run_id: str
    manifest: dict
    mirror: ProgressMirror
    started: float = field(default_factory=time.monotonic)

    @cached_property
    def todo(self) -> int:
        """Rows this run drives (counted once: `skip` is settled before the job exists)."""
        return sum(row_id not in self.skip for row_id in self.source.owned())


def input_revision(plan: RunPlan, previous: dict | None, hub: HubClient | None) -> str | None:
    """The commit of a Hub input this run reads: the one asked for, else the one the job began on, else the newest."""
    name = plan.selection.name
    if Path(name).expanduser().exists():
        return None
    if plan.selection.revision:
        return plan.selection.revision
    if previous and previous.get("input") == name and previous.get("input_revision"):
        return previous["input_revision"]
    client = hub or HfHub(hub_token(plan.hf_token))
    return with_retries(
        lambda: client.input_revision(name),
        "reading the input's revision",
        permanent=lambda exc: input_problem(exc, name) or unreachable_problem(exc, "INPUT", name, on_hf_jobs()),
    )


def prepare_job(plan: RunPlan, facts: ModelFacts, launch: Launch, hub: HubClient | None) -> Job:
    """OUTPUT is listed once: ownership, the leases and the earlier manifest are all read from that one listing."""
    started = time.monotonic()
    check_local_input(plan.selection.name)
    columns = plan.output.columns
    destination = open_destination(plan, hub)
    listing = destination.listing()
    check_ownership(destination, listing, plan.output.overwrite)
    make_output_folder(destination)
    run_id = destination.slice_tag + new_run_id()
    locks = LocalLocks(destination.progress_dir, lease_key(plan.shard))
    locks.acquire(destination.where())
    lease, mirror = None, None
    try:
        lease = claim_lease(destination, listing, run_id, plan)
        mirror = hold_lease(destination, listing, lease, plan)
        earlier = earlier_manifest(destination, listing, plan.output.overwrite)
        held = Slice(destination, locks, lease, mirror, run_id, columns, earlier)
        return settle(plan, facts, launch, hub, held, started)
    except BaseException:
        release(destination, lease, locks, mirror)
        raise


def release(destination: Destination, lease: Lease | None, locks: LocalLocks, mirror: ProgressMirror | None) -> None:
    """Gives this run's slice of OUTPUT back: the lease's renewals stop, then the Hub lease file (if it was written)
    and the local locks go; a local OUTPUT this run created goes first, under those locks, while it holds only the
    run's own locks and manifest and no other run holds a slice of it (output_folder.py)."""
    try:
        if mirror is not None:
            mirror.stop()
        if lease is not None:
            name = destination.in_progress(lease.file_name)
            destination.push({}, [name], "OCR progress: lease released")
    except Exception as exc:
        say(f"warning: could not remove this run's lease from the Hub ({type(exc).__name__}: {exc}); it expires")
    finally:
        try:
            remove_unused_output(destination, locks)
        finally:
            locks.release()


@dataclass(frozen=True)
class Slice:
    """What this run holds of OUTPUT while it settles, and what it read there once: the destination, its locks,
    its lease and the thread that keeps the lease alive; the result columns and the manifest found before the load."""

    destination: Destination
    locks: LocalLocks
    lease: Lease | None
    mirror: ProgressMirror
    run_id: str
    columns: Columns
    earlier: dict | None


def settle(plan: RunPlan, facts: ModelFacts, launch: Launch, hub: HubClient | None, held: Slice, started: float) -> Job:
    destination = held.destination
    revision = input_revision(plan, held.earlier, hub)
    source = load_source(plan.selection, revision, plan.pdf_size)
    check_columns(plan, source, held.columns)
    pdf_render = source.pdfs.size.describe() if source.pdfs and source.pdfs.has_pdfs else None
    manifest = fingerprint(plan, facts, launch.script, revision, source.input_rows, pdf_render)
    recheck_manifest(held, plan, manifest)
    start_progress(destination, manifest)
    held.mirror.begin(manifest)
    fetched = destination.pull_progress()
    if fetched:
        say(f"fetched {fetched} progress file(s) from {destination.describe()}")
    skip = finished_ids(read_results(destination.progress_dir, ["error"]), plan.output.retry_errors)
    job = Job(
        plan,
        facts,
        launch,
        destination,
        source,
        held.columns,
        skip,
        held.locks,
        held.lease,
        held.run_id,
        manifest,
        held.mirror,
        started,
    )
    owned = source.owned()
    shard = f" (shard {plan.shard[0]}/{plan.shard[1]}: {len(owned)} of them)" if plan.shard else ""
    say(
        f"{len(source.ids)} row(s) selected from {plan.selection.name}{shard}; {len(owned) - job.todo} already done, "
        f"{job.todo} to do"
    )
    return job


def check_columns(plan: RunPlan, source: Source, columns: Columns) -> None:
    """--columns must name the input's own columns, and the result columns must not overwrite one unasked."""
    name = plan.selection.name
    unknown = [column for column in columns.keep or () if column not in source.features]
    if unknown:
        raise UsageError(
            f"--columns names {unknown}, which {name} does not have; its columns are {list(source.features)}"
        )
    clashing = collisions(source, columns)
    if clashing and not plan.output.overwrite:
        raise UsageError(
            f"{name} already has column(s) {clashing}; pass --overwrite to replace them, "
            "or --output-column / --error-column to write elsewhere"
        )


def recheck_manifest(held: Slice, plan: RunPlan, manifest: dict) -> None:
    """The manifest at OUTPUT read once more, right before this run writes its own (another run may have written
    one while the input loaded), and compared with this run's; only a change lists OUTPUT again, for the results
    that the change decides over."""
    destination = held.destination
    layout = plan.output
    previous = earlier_manifest(destination, None, layout.overwrite)
    changed = settings_changes(previous, manifest)
    if not changed:
        note_limits(previous, manifest, layout.retry_errors)
        return
    listing = destination.listing()
    if not destination.holds_results(listing):
        replace_unused_settings(destination, listing, held.lease, held.locks, layout.take_over, changed)
    elif not layout.overwrite:
        raise UsageError(settings_mismatch_message(destination.where(), previous, manifest, changed))
    else:
        replace_results(destination, listing, held.lease, held.locks, layout.take_over, changed)


def note_limits(previous: dict | None, current: dict, retry_errors: bool) -> None:
    """A limit changed (a larger --max-tokens after pages were cut off): no row's text depends on it, so the run
    goes on, and says what becomes of the rows already there."""
    if previous is None or is_legacy_match(previous, current):
        return
    changes = limit_changes(previous, current)
    if not changes:
        return
    errors = (
        "rows with an error are redone under the new limits"
        if retry_errors
        else "--retry-errors redoes the rows with an error under them"
    )
    say(f"limits changed ({', '.join(changes)}): rows already done keep their text; {errors}")


def earlier_manifest(destination: Destination, listing: list[str] | None, overwrite: bool) -> dict | None:
    """The manifest of the results already at OUTPUT (`listing`: as Destination.manifest_on_hub reads it); an
    unreadable one is refused unless --overwrite."""
    try:
        return destination.fetch_manifest(listing)
    except ManifestUnreadable as exc:
        if not overwrite:
            raise UsageError(
                f"{exc}: nothing says how the results at {destination.where()} were made. Pass --overwrite to start "
                "this config over, or write elsewhere (another --config or OUTPUT)"
            ) from exc
        return {"manifest": "unreadable"}


def settings_changes(previous: dict | None, current: dict) -> list[str]:
    """The fields that differ; a manifest from before the fingerprint existed, for the same input, split and
    model, is adopted (its results were made by the recipe's own settings)."""
    if previous is None:
        return []
    if is_legacy_match(previous, current):
        say("adopting results written by an earlier version of this script (same input, split and model)")
        return []
    return differences(previous, current)


def start_progress(destination: Destination, manifest: dict) -> None:
    """Writes the manifest before the first result: read again after the input load, so it is compared with what
    OUTPUT holds at the moment this run starts writing, not when it began (another run may have written since)."""
    path = write_manifest(destination.progress_dir, manifest)
    if destination.local or not destination.mirror_progress:
        return
    destination.push({destination.in_repo(path): path}, [], "OCR progress: manifest")
