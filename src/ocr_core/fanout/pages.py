"""A running shard's pages, read live off the output repo while the launcher watches, and each shard's plan.

Each job mirrors its shard's progress files to `.ocr-progress/<config>/<split>/` as it goes, named after the
shard (`part-shard-<I>-of-<N>-...` and `merged-shard-<I>-of-<N>-...`, layout.shard_tag). A file there never
changes: every name is new (a part's run id and sequence, a merge's fresh run id) and files only go, merged away
in the same commit that adds the file holding their rows. So the watch lists the repo once a poll and reads only
the files it has not read, and of those only the four small columns that say which page a record is, when it was
recorded and whether it is an error or a failed-attempts record (by byte ranges on the Hub, never the text). As on
resume (progress.py), a page's newest record wins, so a page retried, or merged into a larger file, counts once,
and the files of a shard's earlier jobs count too: its relaunch resumes from them.

A shard's planned pages are its range of the selected rows (source.shard_span), from the rows the first job
wrote into the results' manifest and --max-samples; unknown until a job has written it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..inputs.selection import shard_span
from ..store.layout import MANIFEST, shard_progress_pattern
from ..store.manifest import read_manifest
from ..store.output import Destination
from ..store.progress import RESULT_SCHEMA, newest_rows

KEY_COLUMNS = ("row_id", "recorded_at", "error", "strikes")


@dataclass(frozen=True)
class PageCount:
    """A shard's pages with an outcome: `done` have text, `errors` an error row."""

    done: int
    errors: int

    @property
    def pages(self) -> int:
        return self.done + self.errors


NO_PAGES = PageCount(0, 0)


def shard_files(listing: Sequence[str], prefix: str, shards: int) -> dict[int, list[str]]:
    """The progress files each shard of this N holds on the output, by shard."""
    pattern = shard_progress_pattern(prefix, shards)
    files: dict[int, list[str]] = {}
    for name in listing:
        found = pattern.fullmatch(name)
        if found is not None and int(found[1]) < shards:
            files.setdefault(int(found[1]), []).append(name)
    return files


def record_keys(table: pa.Table) -> pa.Table:
    """A file's records as counting needs them: the page, when, whether an error, whether a failed-attempts
    record (a column a file from an older version lacks is null)."""

    def column(name: str) -> pa.Array | pa.ChunkedArray:
        if name in table.column_names:
            return table[name]
        return pa.nulls(table.num_rows, RESULT_SCHEMA.field(name).type)

    return pa.table(
        {
            "row_id": column("row_id"),
            "recorded_at": column("recorded_at"),
            "failed": pc.is_valid(column("error")),
            "struck": pc.is_valid(column("strikes")),
        }
    )


def counted(keys: Sequence[pa.Table]) -> PageCount:
    """Pages whose newest record is an outcome, with text or an error."""
    if not keys:
        return NO_PAGES
    newest = newest_rows(pa.concat_tables(keys))
    outcomes = newest.filter(pc.invert(newest["struck"]))
    errors = pc.sum(outcomes["failed"].cast(pa.int64())).as_py() or 0
    return PageCount(outcomes.num_rows - errors, errors)


def planned_pages(manifest: Mapping | None, max_samples: int | None, shards: int) -> dict[int, int] | None:
    """Each shard's pages to do, from the split's rows the manifest holds; None while it holds none."""
    rows = manifest.get("input_rows") if manifest else None
    if not isinstance(rows, int):
        return None
    selected = rows if max_samples is None else min(rows, max_samples)
    return {shard: len(shard_span(selected, (shard, shards))) for shard in range(shards)}


@dataclass
class LivePages:
    """Each file's record keys, read once; each shard's count, computed again only when its files change. A file
    that cannot be read is tried again at the next poll, and its shard keeps its last count meanwhile."""

    destination: Destination
    shards: int
    max_samples: int | None
    keys: dict[str, pa.Table] = field(default_factory=dict)
    counts: dict[int, tuple[frozenset[str], PageCount]] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)
    planned: dict[int, int] | None = None

    def count(self, listing: Sequence[str]) -> dict[int, PageCount]:
        """Every shard's pages on the output now (`listing`: the output repo's files, listed once this poll)."""
        files = shard_files(listing, self.destination.progress_prefix, self.shards)
        listed = {name for names in files.values() for name in names}
        self.keys = {name: keys for name, keys in self.keys.items() if name in listed}
        self.unread = {}
        for name in sorted(listed - set(self.keys)):
            try:
                self.keys[name] = record_keys(self.read(name))
            except Exception as exc:
                self.unread[name] = f"{type(exc).__name__}: {exc}"
        return {shard: self.shard_count(shard, files.get(shard, [])) for shard in range(self.shards)}

    def shard_count(self, shard: int, names: Sequence[str]) -> PageCount:
        before = self.counts.get(shard)
        if any(name in self.unread for name in names):
            return before[1] if before is not None else NO_PAGES
        if before is None or before[0] != frozenset(names):
            self.counts[shard] = (frozenset(names), counted([self.keys[name] for name in sorted(names)]))
        return self.counts[shard][1]

    def read(self, name: str) -> pa.Table:
        if self.destination.local:
            with pq.ParquetFile(self.destination.root / name) as parquet:
                return parquet.read(columns=[column for column in KEY_COLUMNS if column in parquet.schema_arrow.names])
        return self.destination.hub.read_columns(self.destination.spec, name, KEY_COLUMNS)

    def plan(self, listing: Sequence[str]) -> dict[int, int] | None:
        """Each shard's planned pages, read once, from the manifest the first job writes."""
        if self.planned is None and self.destination.in_progress(MANIFEST) in listing:
            if self.destination.local:
                manifest = read_manifest(self.destination.progress_dir)
            else:
                manifest = self.destination.manifest_on_hub(listing)
            self.planned = planned_pages(manifest, self.max_samples, self.shards)
        return self.planned
