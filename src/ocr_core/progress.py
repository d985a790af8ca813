"""Results as they come, in small parquet parts, so that no finished page is lost and a rerun resumes.

Each flush writes a new immutable part (part-<run>-<seq>.parquet); a row that appears in several parts (a retried
error) is taken from the newest. Parts are only ever added, which makes them safe to mirror to a Hub repo.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

RESULT_SCHEMA = pa.schema(
    [
        ("row_index", pa.int64()),
        ("row_id", pa.string()),
        ("text", pa.string()),
        ("error", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("attempts", pa.int64()),
        ("seconds", pa.float64()),
        ("extra", pa.string()),
    ]
)
MANIFEST = "manifest.json"


@dataclass
class RowResult:
    row_index: int
    row_id: str
    text: str | None = None
    error: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0
    seconds: float = 0.0
    extra: str | None = None


def new_run_id() -> str:
    """Sorts by start time, so the newest part of a row wins when parts are read in name order."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


class ProgressLog:
    """Buffers results and writes a part every `flush_rows` rows or `flush_seconds` seconds."""

    def __init__(self, folder: Path, run_id: str, flush_rows: int = 64, flush_seconds: float = 30.0) -> None:
        self.folder = folder
        self.run_id = run_id
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.buffer: list[RowResult] = []
        self.sequence = 0
        self.last_flush = time.monotonic()
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, result: RowResult) -> Path | None:
        self.buffer.append(result)
        due = time.monotonic() - self.last_flush >= self.flush_seconds
        if len(self.buffer) >= self.flush_rows or due:
            return self.flush()
        return None

    def flush(self) -> Path | None:
        self.last_flush = time.monotonic()
        if not self.buffer:
            return None
        table = pa.Table.from_pylist([asdict(result) for result in self.buffer], schema=RESULT_SCHEMA)
        path = self.folder / f"part-{self.run_id}-{self.sequence:05d}.parquet"
        temporary = path.with_suffix(".tmp")
        pq.write_table(table, temporary)
        os.replace(temporary, path)
        self.sequence += 1
        self.buffer.clear()
        return path


def part_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []


def read_results(folder: Path) -> pa.Table:
    """Every row's newest result, in no particular order."""
    parts = part_files(folder)
    if not parts:
        return RESULT_SCHEMA.empty_table()
    table = pa.concat_tables([pq.read_table(part, schema=RESULT_SCHEMA) for part in parts])
    order = pa.array(range(len(table)), pa.int64())
    table = table.append_column("_order", order)
    newest = table.group_by("row_id").aggregate([("_order", "max")])
    keep = pc.is_in(table["_order"], value_set=newest["_order_max"])
    return table.filter(keep).drop_columns(["_order"])


def finished_ids(results: pa.Table, retry_errors: bool) -> set[str]:
    """Rows a rerun skips: all of them, or only the successful ones with --retry-errors."""
    if retry_errors:
        results = results.filter(pc.is_null(results["error"]))
    return set(results["row_id"].to_pylist())


def check_manifest(folder: Path, manifest: dict, overwrite: bool) -> None:
    """Refuses to mix two different jobs' results in one progress folder."""
    path = folder / MANIFEST
    if path.exists():
        previous = json.loads(path.read_text())
        clashes = {key: previous.get(key) for key, value in manifest.items() if previous.get(key) != value}
        if clashes and not overwrite:
            raise ValueError(
                f"{folder} holds results of another job ({clashes}); pass --overwrite to start over, or choose "
                "another --config / --output-column"
            )
        if clashes:
            for part in part_files(folder):
                part.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
