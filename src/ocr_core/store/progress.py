"""Results as they come, in small parquet parts, so that no finished page is lost and a rerun resumes.

Each flush writes a new immutable part, made durable before anything else counts on it: written to a temporary
name, fsynced, renamed, and the folder fsynced. A row can appear in several files (a retried error, a merge that
raced another job's): every row carries the time it was recorded and the newest record wins, whatever the file
names, so files may be merged, mirrored and fetched in any order. A part that cannot be read (a crash between the
rename and the data reaching the disk) is set aside with a warning; its rows count as not done and are redone.

Each outcome carries `provenance`, the record of the run that wrote it (provenance.py), so that a later run that
only publishes (nothing left to do, after a failed publish or a timeout) names what wrote the text, not itself.

A row whose `strikes` is set is not an outcome but a failed-attempts record (poison.py): the page got no answer
that many times and is still to do. It lives in the same parts, so it is mirrored, merged and fetched like a
result, and the newest record still wins: the page's outcome replaces it, and it hides an older outcome while a
`--retry-errors` run is trying that page again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..console import say
from .layout import FOLDER_LOCK, PROGRESS_GLOB, SET_ASIDE_SUFFIX, part_name

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
        ("recorded_at", pa.float64()),
        ("strikes", pa.int64()),
        ("server", pa.string()),
        ("provenance", pa.string()),
    ]
)


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
    recorded_at: float = field(default_factory=time.time)
    strikes: int | None = None
    server: str | None = None
    """The server that wrote the text and its vLLM version (JSON), for the row's inference_info entry."""
    provenance: str | None = None


def new_run_id() -> str:
    """Sorts by start time, which makes a folder listing readable; correctness never depends on it."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def write_durably(path: Path, tables: Iterable[pa.Table]) -> None:
    """Writes the tables, one after another, as one part that is complete on disk before this returns."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as handle:
            with pq.ParquetWriter(handle, RESULT_SCHEMA) as writer:
                for table in tables:
                    writer.write_table(table)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class ResultLog:
    """Buffers results and writes a part every `flush_rows` rows or `flush_seconds` seconds; `provenance` gives
    the record of what is writing each outcome as it is added."""

    def __init__(
        self,
        folder: Path,
        run_id: str,
        flush_rows: int = 64,
        flush_seconds: float = 30.0,
        provenance: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.folder = folder
        self.provenance = provenance
        self.run_id = run_id
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.buffer: list[RowResult] = []
        self.sequence = 0
        self.last_flush = time.monotonic()
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, result: RowResult) -> None:
        """Stamps the result with the time it is recorded (not when its page started, which would make the page's
        own failed-attempt records look newer than its outcome)."""
        result.recorded_at = max(result.recorded_at, time.time())
        if result.strikes is None and result.provenance is None:
            result.provenance = self.provenance()
        self.buffer.append(result)
        if len(self.buffer) >= self.flush_rows or time.monotonic() - self.last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        self.last_flush = time.monotonic()
        if not self.buffer:
            return
        table = pa.Table.from_pylist([asdict(result) for result in self.buffer], schema=RESULT_SCHEMA)
        path = self.folder / part_name(self.run_id, self.sequence)
        write_durably(path, [table])
        self.sequence += 1
        self.buffer.clear()


@contextlib.contextmanager
def folder_lock(folder: Path, exclusive: bool) -> Iterator[None]:
    """Readers share the folder; a merge, which removes files, has it alone (runs of several shards share it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / FOLDER_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield


def part_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(PROGRESS_GLOB)) if folder.is_dir() else []


def read_part(path: Path, columns: Sequence[str] | None = None) -> pa.Table | None:
    """A part's rows (columns a part from an older version lacks are null), or None when its bytes are bad or it
    is gone (merged away meanwhile).

    A part whose bytes cannot be decoded is renamed aside, with a warning, so it is neither read again nor
    mirrored; an error of the machine (an errno: too many open files, EIO) is raised, since the part may be fine.
    """
    wanted = list(columns or RESULT_SCHEMA.names)
    try:
        with pq.ParquetFile(path) as parquet:
            table = parquet.read(columns=[name for name in wanted if name in parquet.schema_arrow.names])
    except FileNotFoundError:
        return None
    except (pa.ArrowException, OSError, ValueError) as exc:
        if not bad_bytes(exc):
            raise
        aside = path.with_name(path.name + SET_ASIDE_SUFFIX)
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, aside)
        say(
            f"warning: skipped unreadable progress part {path.name} ({type(exc).__name__}: {exc}); its rows will be "
            f"redone (set aside as {aside.name})"
        )
        return None
    for name in wanted:
        if name not in table.column_names:
            column = RESULT_SCHEMA.field(name)
            table = table.append_column(column, pa.nulls(table.num_rows, column.type))
    return table.select(wanted).cast(pa.schema([RESULT_SCHEMA.field(name) for name in wanted]))


def bad_bytes(exc: BaseException) -> bool:
    """Whether a read failed on the part's own bytes (pyarrow's decoding errors carry no errno), not on the
    machine: a brief "too many open files" or a full file table says nothing about the part, which must then be
    neither set aside nor redone (the caller fails and the rerun reads it again)."""
    return not isinstance(exc, OSError) or exc.errno is None


def newest_rows(table: pa.Table) -> pa.Table:
    """One row per row_id: the one recorded last (a retried error's success, or the canary's verdict on an answer
    that was logged before the canary judged it)."""
    if table.num_rows == 0:
        return table
    order = pc.sort_indices(table, sort_keys=[("row_id", "ascending"), ("recorded_at", "descending")])
    table = table.take(order)
    ids = table["row_id"].combine_chunks()
    first = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    keep = pa.concat_arrays([pa.array([True]), first.fill_null(True)])
    return table.filter(keep)


def newest_records(folder: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """Every row's newest record, outcome or failed-attempts record (only `columns`, if given)."""
    wanted = list(dict.fromkeys([*columns, "row_id", "recorded_at", "strikes"])) if columns else None
    with folder_lock(folder, exclusive=False):
        tables = [table for table in (read_part(part, wanted) for part in part_files(folder)) if table is not None]
    schema = pa.schema([RESULT_SCHEMA.field(name) for name in wanted]) if wanted else RESULT_SCHEMA
    if not tables:
        return schema.empty_table()
    return newest_rows(pa.concat_tables(tables).select(schema.names))


def read_results(folder: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """Every row's newest result (only `columns`, if given), in no particular order; a row whose newest record
    is a failed-attempts record has no result yet."""
    records = newest_records(folder, columns)
    return records.filter(pc.is_null(records["strikes"]))


def read_strikes(folder: Path) -> dict[str, int]:
    """The pages still to do that got no answer before, with how many times: a rerun goes on counting from there.
    A page whose newest record is an outcome (a row set aside, redone by --retry-errors) starts again from none."""
    records = newest_records(folder, ["strikes"])
    records = records.filter(pc.is_valid(records["strikes"]))
    return dict(zip(records["row_id"].to_pylist(), records["strikes"].to_pylist()))


def finished_ids(results: pa.Table, retry_errors: bool) -> set[str]:
    """Rows a rerun skips: all of them, or only the successful ones with --retry-errors."""
    if retry_errors:
        results = results.filter(pc.is_null(results["error"]))
    return set(results["row_id"].to_pylist())
