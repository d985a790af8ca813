"""What the output holds of this run: read before anything is launched, and again for the summary.

A shard's newest job having COMPLETED says only that a job once finished. The output may have been deleted since,
or replaced by another run's `--overwrite`, and a flag of this command may ask for work that job did not do
(`--retry-errors`, with error rows published). So a shard whose job had ended before this launcher looked is in only
when its published slice is on the output, beside a manifest of this run's settings, and holds no error row that
`--retry-errors` asks to retry; otherwise it is launched again (stale_jobs).

Results made another way refuse the command before any launch, as they would refuse each of its jobs (exit 2),
unless `--overwrite`; a manifest with no result behind it pins nothing. In both cases the launcher removes the
earlier files itself before any job starts: N jobs each replacing them at once would each find the others' leases
on the output and step back.

The launcher's own manifest is the results' fingerprint for N shards taken before the input is read: the input's
rows, its resolved revision (unless `--input-revision` names one) and how PDF pages render are the jobs' to settle,
so they are left out of the comparison.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from operator import attrgetter

from ..console import say
from ..errors import CommandError
from ..publishing.slices import published_slices
from ..settings import Settings
from ..store.layout import lease_files_of
from ..store.lease import LAUNCHER, LeaseTaken, taken_message
from ..store.manifest import ManifestUnreadable, differences, is_legacy_match, settings_mismatch_message
from ..store.output import Destination
from .heal import Attempt
from .jobs import DONE_STAGE

JOB_SETTLED = frozenset({"input_rows", "pdf_render"})


def settings_changes(theirs: Mapping, ours: Mapping, settings: Settings) -> list[str]:
    """The fields in which the output's manifest differs from this run's, less those the jobs settle."""
    if is_legacy_match(dict(theirs), dict(ours)):
        return []
    settled = JOB_SETTLED | ({"input_revision"} if settings.input_revision is None else set())
    return [name for name in differences(dict(theirs), dict(ours)) if name not in settled]


def output_changes(
    destination: Destination, listing: Sequence[str], manifest: Mapping, settings: Settings
) -> tuple[Mapping | None, list[str]]:
    """The output's manifest (None: it holds none) and the fields it differs in from this run's; an unreadable one
    says nothing of how its results were made, so it differs."""
    try:
        theirs = destination.manifest_on_hub(listing)
    except ManifestUnreadable:
        return {}, ["manifest"]
    return theirs, [] if theirs is None else settings_changes(theirs, manifest, settings)


def runs_slices(destination: Destination, manifest: Mapping, settings: Settings, shards: int) -> dict[int, dict]:
    """The slices of this N the output publishes under this run's settings, by shard; none under another run's."""
    theirs, changed = output_changes(destination, destination.listing(), manifest, settings)
    if theirs is None or changed:
        return {}
    return {item["shard"][0]: item for item in published_slices(destination, shards)}


def settle_output(destination: Destination, manifest: Mapping, settings: Settings, shards: int) -> None:
    """Refuses results made another way (exit 2) unless --overwrite; clears them, or a manifest with no result
    behind it, before any launch."""
    listing = destination.listing()
    theirs, changed = output_changes(destination, listing, manifest, settings)
    if not changed:
        return
    results = destination.lists_results(listing)
    if results and not settings.overwrite:
        raise CommandError(refusal(destination, theirs or {}, manifest, changed, shards))
    clear_earlier(destination, listing, settings.take_over, changed, results)


def refusal(destination: Destination, theirs: Mapping, manifest: Mapping, changed: list[str], shards: int) -> str:
    if "shards" in changed:
        return (
            f"--jobs {shards}: {destination.where()} holds results cut into {theirs['shards']} shard(s); run the same "
            f"command with --jobs {theirs['shards']} to finish them, or write elsewhere (another --config or OUTPUT)"
        )
    return settings_mismatch_message(destination.where(), dict(theirs), dict(manifest), changed)


def clear_earlier(
    destination: Destination, listing: Sequence[str], take_over: bool, changed: list[str], results: bool
) -> None:
    """Only while no run holds a live lease on the output (unless --take-over): one may be writing those results.
    A launcher's lease (this one's) writes nothing, and stays."""
    if not take_over:
        now = time.time()
        leases = destination.leases(list(listing))
        writing = [lease for lease in leases if lease.expires > now and lease.key != LAUNCHER]
        live = sorted(writing, key=attrgetter("started"))
        if live:
            raise LeaseTaken(taken_message(live[0].describe(), destination.where()))
    differ = f"({', '.join(changed)} differ)"
    if results:
        say(f"--overwrite: removing the results made another way {differ} before any job starts")
    else:
        say(f"the earlier run at {destination.where()} made no result; this run's settings replace its own {differ}")
    launchers = destination.in_progress(lease_files_of(LAUNCHER))
    destination.discard_progress([name for name in listing if not name.startswith(launchers)])


def stale_jobs(
    attempts: Mapping[int, Sequence[Attempt]], slices: Mapping[int, Mapping], retry_errors: bool
) -> dict[str, str]:
    """The COMPLETED jobs, newest of their shard, that do not count the shard in, each with the reason; `slices`
    read after the jobs were listed, so a job listed COMPLETED has published whatever it published."""
    stale: dict[str, str] = {}
    for shard, tried in attempts.items():
        if tried and tried[0].job.stage == DONE_STAGE:
            reason = stale_reason(slices.get(shard), retry_errors)
            if reason is not None:
                stale[tried[0].job.id] = reason
    return stale


def stale_reason(published: Mapping | None, retry_errors: bool) -> str | None:
    if published is None:
        return "its published slice is not on the output"
    if retry_errors and published["errors"]:
        return f"--retry-errors: its published slice holds {published['errors']} error row(s)"
    return None
