"""Keeps the progress folder small: parts are merged into larger files as they pile up.

A million pages in parts of 16-64 rows would be about 30,000 files: slow to list, fetch and read at every start,
and far over the Hub's advice of 10,000 files per folder. Files are grouped in size classes (a factor of FAN_IN
in rows apart); FAN_IN files of one class are merged into one file of the next, so a folder holds at most about
FAN_IN files per class and a row is rewritten once per class (about four times on its way to the top). Files of
the top class are never merged again. A merge streams its sources one at a time, so its memory is one source file
plus the row ids, never the merged text.

A shard merges only the files its own runs wrote (their names start with its tag, output.slice_tag): another
shard's rows never end up in its files, so each shard fetches only its own files and merging never deletes
another shard's. An unsharded run (tag "") owns every file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .layout import is_own_progress_file, merged_name
from .progress import bad_bytes, folder_lock, new_run_id, newest_rows, part_files, read_part, sync_folder, write_durably

FAN_IN = 16
TOP_CLASS = 4


def size_class(rows: int) -> int:
    """0 below FAN_IN rows, 1 below FAN_IN**2, ... capped at TOP_CLASS."""
    return min(TOP_CLASS, int(math.log(max(1, rows), FAN_IN) + 1e-9))


def plan_merges(rows_by_name: Mapping[str, int]) -> list[list[str]]:
    """The groups of files to merge now: every class below the top that holds FAN_IN files or more."""
    classes: dict[int, list[str]] = {}
    for name, rows in rows_by_name.items():
        classes.setdefault(size_class(rows), []).append(name)
    return [sorted(names) for level, names in sorted(classes.items()) if level < TOP_CLASS and len(names) >= FAN_IN]


def row_counts(folder: Path, tag: str = "") -> dict[str, int]:
    """Rows per part of this slice (its tag) from the parquet footers; an unreadable part counts as 0 and is
    merged (and set aside)."""
    counts = {}
    for part in part_files(folder):
        if not is_own_progress_file(part.name, tag):
            continue
        try:
            counts[part.name] = pq.ParquetFile(part).metadata.num_rows
        except (pa.ArrowException, OSError) as exc:
            if not bad_bytes(exc):
                raise
            counts[part.name] = 0
    return counts


def merge(folder: Path, names: list[str], tag: str = "") -> list[str]:
    """Writes one file holding the newest record of every row in `names`, then removes the sources it merged and
    returns their names. A source set aside for bad bytes is not among them: its copy on the Hub may be the only
    good one, so the mirror must not delete it as merged away."""
    keys, merged = [], []
    for position, name in enumerate(names):
        table = read_part(folder / name, ["row_id", "recorded_at"])
        if table is not None:
            merged.append(name)
            table = table.append_column("_file", pa.array([position] * table.num_rows, pa.int32()))
            keys.append(table.append_column("_row", pa.array(range(table.num_rows), pa.int64())))
    kept = newest_rows(pa.concat_tables(keys)) if keys else None
    write_durably(folder / merged_name(tag, new_run_id()), kept_rows(folder, names, kept))
    for name in merged:
        (folder / name).unlink(missing_ok=True)
    sync_folder(folder)
    return merged


def kept_rows(folder: Path, names: list[str], kept: pa.Table | None) -> Iterator[pa.Table]:
    """Each source's surviving rows, reading one source at a time."""
    if kept is None:
        return
    for position, name in enumerate(names):
        source = read_part(folder / name) if (folder / name).exists() else None
        if source is not None:
            yield source.take(kept.filter(pc.equal(kept["_file"], position))["_row"])


def compact(folder: Path, tag: str = "") -> Iterator[list[str]]:
    """Runs every merge of this slice's files that is due, yielding the names each merge removed as soon as it is
    on disk, so a caller that stops early (a full disk in a later merge) still knows of the merges already done."""
    with folder_lock(folder, exclusive=True):
        while groups := plan_merges(row_counts(folder, tag)):
            for names in groups:
                yield merge(folder, names, tag)
