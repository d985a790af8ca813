"""Everything a run settles before its first page: input, output, ownership, lease, manifest and what is left to do.

The order matters. Nothing is written before OUTPUT is known to hold nothing foreign and this run holds its slice
of it; the lease is on the Hub, and kept renewed, before the input is loaded (minutes, for a large dataset); the
manifest is compared before any earlier result is trusted, and again after the load, right before this run writes
its own; an `--overwrite` clears earlier results (here and on the Hub) before any new one is written; and only
then are the results fetched and counted.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from .assemble import FAILED_TEXT, Columns, clash_message, collisions
from .card import split_front_matter
from .errors import CommandError
from .facts import ModelFacts
from .hub import HfHub, HubClient, HubRefused, with_retries
from .inputs import check_local_input, input_problem, output_problem, unreachable_problem
from .launch import Launch
from .lease import (
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
from .manifest import (
    ManifestUnreadable,
    differences,
    fingerprint,
    is_legacy_match,
    settings_mismatch_message,
    write_manifest,
)
from .mirror import ProgressMirror
from .output import (
    Destination,
    foreign_files,
    foreign_message,
    is_local_output,
    owned_configs,
    unsafe_local_output,
)
from .pdf import render_size
from .progress import finished_ids, new_run_id, read_results
from .report import say
from .settings import Settings
from .source import Source, load_source

WORK_DIR_ENV = "OCR_WORK_DIR"


class UsageError(CommandError, ValueError):
    """The command cannot work as written; the message says what to change."""


@dataclass
class Job:
    settings: Settings
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


def hub_token(settings: Settings) -> str | None:
    return settings.hf_token or os.environ.get("HF_TOKEN")


def open_destination(settings: Settings, hub: HubClient | None) -> Destination:
    """The output, refused before anything is written when it is a folder that must not be written over."""
    if is_local_output(settings.output):
        reason = unsafe_local_output(settings.output, settings.input)
        if reason:
            raise UsageError(reason)
        return Destination(settings.output, settings.split, settings.config, None, shard=settings.shard)
    if settings.output.count("/") != 1:
        raise UsageError(
            f"OUTPUT {settings.output!r} is neither a local folder (start it with ./ or /) nor a Hub id "
            "(namespace/name)"
        )
    client = hub or HfHub(hub_token(settings))
    with_retries(
        lambda: client.create_repo(settings.output, settings.private),
        "creating the output repo",
        permanent=lambda exc: (
            output_problem(exc, settings.output) or unreachable_problem(exc, "OUTPUT", settings.output)
        ),
    )
    work_dir = Path(os.environ[WORK_DIR_ENV]) if os.environ.get(WORK_DIR_ENV) else None
    return Destination(
        settings.output,
        settings.split,
        settings.config,
        client,
        settings.private,
        settings.create_pr,
        work_dir,
        settings.shard,
    )


def input_revision(settings: Settings, previous: dict | None, hub: HubClient | None) -> str | None:
    """The commit of a Hub input this run reads: the one asked for, else the one the job began on, else the newest."""
    if Path(settings.input).expanduser().exists():
        return None
    if settings.input_revision:
        return settings.input_revision
    if previous and previous.get("input") == settings.input and previous.get("input_revision"):
        return previous["input_revision"]
    client = hub or HfHub(hub_token(settings))
    return with_retries(
        lambda: client.input_revision(settings.input),
        "reading the input's revision",
        permanent=lambda exc: input_problem(exc, settings.input) or unreachable_problem(exc, "INPUT", settings.input),
    )


def claim_lease(destination: Destination, listing: list[str], run_id: str, settings: Settings) -> Lease | None:
    """Refuses to start beside a live run of an overlapping slice on another machine (a Hub output only)."""
    if destination.local:
        return None
    lease = Lease.new(run_id, lease_key(settings.shard), lease_ttl(settings.upload_every))
    if not settings.take_over:
        taken = conflicts(destination.leases(listing), lease, time.time())
        if taken:
            raise LeaseTaken(taken_message(taken[0].describe(), destination.where()))
    return lease


def hold_lease(destination: Destination, listing: list[str], lease: Lease | None, settings: Settings) -> ProgressMirror:
    """Puts this run's lease on the Hub before the input is loaded (which can take minutes) and keeps it renewed
    from then on, so another run of an overlapping slice started meanwhile sees it, however long the load takes.
    The same commit clears the leases of runs long gone."""
    mirror = ProgressMirror(destination, settings.upload_every, None, lease)
    if lease is None:
        return mirror
    name, path = destination.lease_file(lease)
    now = time.time()
    expired = [
        f"{destination.progress_prefix}/{old.file_name}" for old in destination.leases(listing) if old.expires <= now
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
    confirm_lease(destination, lease, settings.take_over)
    mirror.start()
    return mirror


def confirm_lease(destination: Destination, lease: Lease | None, take_over: bool) -> None:
    """After our lease's commit is in: of runs started at once, all but the one whose lease landed first step
    back (lease.py)."""
    if lease is None or take_over:
        return
    live = conflicts(destination.leases(destination.listing()), lease, time.time())
    if not live:
        return
    winner = first_landed([lease, *live], destination.commit_titles())
    if winner is not lease:
        destination.push({}, [f"{destination.progress_prefix}/{lease.file_name}"], "OCR progress: lease given up")
        raise LeaseTaken(taken_message(winner.describe(), destination.where()))


def check_ownership(destination: Destination, listing: list[str], overwrite: bool) -> None:
    """Refuses an OUTPUT that holds files or configs no run of ours wrote, unless --overwrite."""
    if overwrite:
        return
    owned = owned_configs(listing)
    meta, _ = split_front_matter(destination.existing_card()) if "README.md" in listing else ({}, "")
    configs = [entry.get("config_name") for entry in meta.get("configs") or [] if isinstance(entry, dict)]
    foreign_configs = sorted(str(name) for name in configs if name not in owned)
    files = foreign_files(listing, owned)
    if files or foreign_configs:
        raise UsageError(foreign_message(destination.describe(), files, foreign_configs))


def result_columns(settings: Settings, facts: ModelFacts) -> Columns:
    """Where the results go; a clash among them is refused here, before the input is loaded or a page is sent."""
    failed_text = None if settings.null_failed_text else FAILED_TEXT
    columns = Columns(
        settings.output_column, settings.error_column, dict(facts.extra_columns), failed_text, settings.columns
    )
    problem = clash_message(columns)
    if problem:
        raise UsageError(problem)
    return columns


def prepare_job(settings: Settings, facts: ModelFacts, launch: Launch, hub: HubClient | None) -> Job:
    started = time.monotonic()
    check_local_input(settings.input)
    result_columns(settings, facts)
    destination = open_destination(settings, hub)
    run_id = destination.slice_tag + new_run_id()
    check_ownership(destination, destination.listing(), settings.overwrite)
    locks = LocalLocks(destination.progress_dir, lease_key(settings.shard))
    locks.acquire(destination.where())
    lease, mirror = None, None
    try:
        listing = destination.listing()
        lease = claim_lease(destination, listing, run_id, settings)
        mirror = hold_lease(destination, listing, lease, settings)
        slice_ = Slice(destination, locks, lease, mirror, run_id)
        return settle(settings, facts, launch, hub, slice_, listing, started)
    except BaseException:
        release(destination, lease, locks, mirror)
        raise


def release(destination: Destination, lease: Lease | None, locks: LocalLocks, mirror: ProgressMirror | None) -> None:
    """Gives this run's slice of OUTPUT back: the lease's renewals stop, then the Hub lease file (if it was written)
    and the local locks go."""
    try:
        if mirror is not None:
            mirror.stop()
        if lease is not None:
            name = f"{destination.progress_prefix}/{lease.file_name}"
            destination.push({}, [name], "OCR progress: lease released")
    except Exception as exc:
        say(f"warning: could not remove this run's lease from the Hub ({type(exc).__name__}: {exc}); it expires")
    finally:
        locks.release()


@dataclass(frozen=True)
class Slice:
    """What this run holds of OUTPUT while it settles: the destination, its locks, its lease and the thread that
    keeps the lease alive."""

    destination: Destination
    locks: LocalLocks
    lease: Lease | None
    mirror: ProgressMirror
    run_id: str


def settle(
    settings: Settings,
    facts: ModelFacts,
    launch: Launch,
    hub: HubClient | None,
    held: Slice,
    listing: list[str],
    started: float,
) -> Job:
    destination, locks, lease = held.destination, held.locks, held.lease
    revision = input_revision(settings, earlier_manifest(destination, listing, settings.overwrite), hub)
    source = load_source(
        settings.input, settings.split, settings.image_column, settings.input_config, settings.id_column,
        settings.max_samples, settings.shuffle, settings.seed, settings.shard, revision,
        render_size(facts.pdf_render, settings.pdf_longest_edge),
    )  # fmt: skip
    columns = result_columns(settings, facts)
    unknown = [name for name in settings.columns or () if name not in source.features]
    if unknown:
        raise UsageError(
            f"--columns names {unknown}, which {settings.input} does not have; its columns are {list(source.features)}"
        )
    clashing = collisions(source, columns)
    if clashing and not settings.overwrite:
        raise UsageError(
            f"{settings.input} already has column(s) {clashing}; pass --overwrite to replace them, "
            "or --output-column / --error-column to write elsewhere"
        )
    pdf_render = source.pdfs.size.describe() if source.pdfs else None
    manifest = fingerprint(settings, facts, launch.script, revision, source.input_rows, pdf_render)
    listing = destination.listing()
    previous = earlier_manifest(destination, listing, settings.overwrite)
    changed = settings_changes(previous, manifest)
    if changed and not destination.holds_results(listing):
        replace_unused_settings(destination, listing, lease, locks, settings.take_over, changed)
    elif changed and not settings.overwrite:
        raise UsageError(settings_mismatch_message(destination.where(), previous, manifest, changed))
    elif changed:
        replace_results(destination, listing, lease, locks, settings.take_over, changed)
    start_progress(destination, manifest)
    held.mirror.begin(manifest)
    fetched = destination.pull_progress()
    if fetched:
        say(f"fetched {fetched} progress file(s) from {destination.describe()}")
    skip = finished_ids(read_results(destination.progress_dir, ["error"]), settings.retry_errors)
    job = Job(
        settings, facts, launch, destination, source, columns, skip, locks, lease, held.run_id, manifest,
        held.mirror, started,
    )  # fmt: skip
    owned = source.owned()
    shard = f" (shard {settings.shard[0]}/{settings.shard[1]}: {len(owned)} of them)" if settings.shard else ""
    say(f"{len(source.ids)} row(s) selected from {settings.input}{shard}; {len(owned) - job.todo} already done, "
        f"{job.todo} to do")  # fmt: skip
    return job


def earlier_manifest(destination: Destination, listing: list[str], overwrite: bool) -> dict | None:
    """The manifest of the results already at OUTPUT; an unreadable one is refused unless --overwrite."""
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
        say(f"the earlier run at {destination.where()} made no result; this run's settings replace its own "
            f"({', '.join(changed)} differ)")  # fmt: skip


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
        ours = f"{destination.progress_prefix}/{lease.file_name}" if lease is not None else None
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


def start_progress(destination: Destination, manifest: dict) -> None:
    """Writes the manifest before the first result: read again after the input load, so it is compared with what
    OUTPUT holds at the moment this run starts writing, not when it began (another run may have written since)."""
    path = write_manifest(destination.progress_dir, manifest)
    if destination.local or not destination.mirror_progress:
        return
    destination.push({destination.in_repo(path): path}, [], "OCR progress: manifest")
