"""Builds the final dataset: the input's own columns and rows, in input order, with the results beside them.

It works a shard of rows at a time straight from Arrow, so a run over millions of pages never holds more than
one shard of images in memory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets.table import embed_table_storage

from .progress import RESULT_SCHEMA
from .source import Source

SHARD_BYTES = 500 * 1024**2
SAMPLE_ROWS = 32
INFO_COLUMN = "inference_info"
FAILED_TEXT = "[OCR ERROR]"


@dataclass(frozen=True)
class Columns:
    """Where results go. A row with no text holds `failed_text`: ocr-bench and the other OCR scripts recognise
    `[OCR ERROR]` as a failure and leave it out of judging, where an empty answer would count as a losing one."""

    output: str
    error: str
    extra: Mapping[str, pa.DataType]
    failed_text: str | None = FAILED_TEXT

    def names(self) -> list[str]:
        return [self.output, self.error, *self.extra]


def collisions(source: Source, columns: Columns) -> list[str]:
    return [name for name in columns.names() if name in source.features]


def missing_rows(source: Source, results: pa.Table, owned_only: bool = False) -> int:
    """Selected rows (or only this shard's) that have no result yet."""
    done = set(results["row_id"].to_pylist())
    return sum(row_id not in done for row_id in (source.owned() if owned_only else source.ids))


def output_features(source: Source, columns: Columns) -> datasets.Features:
    dropped = {*columns.names(), INFO_COLUMN}
    features = datasets.Features({k: v for k, v in source.features.items() if k not in dropped})
    features[columns.output] = datasets.Value("string")
    features[columns.error] = datasets.Value("string")
    for name, arrow_type in columns.extra.items():
        features[name] = datasets.features.features.generate_from_arrow_type(arrow_type)
    features[INFO_COLUMN] = datasets.Value("string")
    return features


def rows_per_shard(source: Source) -> int:
    sample = source.selected[:SAMPLE_ROWS]
    if not sample:
        return 1
    table = source.dataset.select(sample).with_format("arrow")[:]
    per_row = max(1, embed_table_storage(table).nbytes // len(sample))
    return max(1, SHARD_BYTES // per_row)


def assemble(
    source: Source, results: pa.Table, columns: Columns, info: dict[str, Any], folder: Path, prefix: str
) -> dict[str, Path]:
    """Writes `<prefix>/<split>-<i>-of-<n>.parquet` files under `folder`; returns them by path in the repo."""
    position = {row_id: i for i, row_id in enumerate(results["row_id"].to_pylist())}
    features = output_features(source, columns)
    step = rows_per_shard(source)
    total = max(1, math.ceil(len(source.selected) / step))
    files: dict[str, Path] = {}
    for shard, start in enumerate(range(0, max(1, len(source.selected)), step)):
        name = f"{prefix}/{source.split}-{shard:05d}-of-{total:05d}.parquet"
        rows = slice(start, start + step)
        table = shard_table(source, source.selected[rows], source.ids[rows], results, position, columns, info)
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.cast(features.arrow_schema), path)
        files[name] = path
    return files


def shard_table(
    source: Source,
    positions: list[int],
    ids: list[str],
    results: pa.Table,
    position: Mapping[str, int],
    columns: Columns,
    info: dict[str, Any],
) -> pa.Table:
    table = embed_table_storage(source.dataset.select(positions).with_format("arrow")[:])
    previous_info = table[INFO_COLUMN].to_pylist() if INFO_COLUMN in table.column_names else None
    table = table.drop_columns([name for name in [*columns.names(), INFO_COLUMN] if name in table.column_names])
    picked = results.take([position[row_id] for row_id in ids]) if ids else RESULT_SCHEMA.empty_table()
    table = table.append_column(columns.output, text_or_failed(picked, columns.failed_text))
    table = table.append_column(columns.error, picked["error"])
    extras = [json.loads(value) if value else {} for value in picked["extra"].to_pylist()]
    for name, arrow_type in columns.extra.items():
        table = table.append_column(name, pa.array([extra.get(name) for extra in extras], type=arrow_type))
    return table.append_column(INFO_COLUMN, pa.array(info_values(previous_info, info, len(ids)), pa.string()))


def text_or_failed(results: pa.Table, failed_text: str | None) -> pa.ChunkedArray:
    """The text column, with `failed_text` in the rows that have an error and no text."""
    text = results["text"]
    if failed_text is None:
        return text
    failed = pc.and_(pc.is_null(text), pc.is_valid(results["error"]))
    return pc.if_else(failed, pa.scalar(failed_text, pa.string()), text)


def inference_history(source: Source) -> list[dict[str, Any]]:
    """The `inference_info` entries the input already carries (earlier runs over these rows), oldest first."""
    if INFO_COLUMN not in source.dataset.column_names or not source.selected:
        return []
    value = source.dataset.select_columns([INFO_COLUMN])[source.selected[0]][INFO_COLUMN]
    history = json.loads(value) if value else []
    return history if isinstance(history, list) else [history]


def info_values(previous: list[str | None] | None, entry: dict[str, Any], count: int) -> list[str]:
    """`inference_info` is a JSON list per row; an earlier model's entries are kept and this run's appended."""
    if previous is None:
        return [json.dumps([entry])] * count
    values = []
    for item in previous:
        history = json.loads(item) if item else []
        history = history if isinstance(history, list) else [history]
        values.append(json.dumps([*history, entry]))
    return values
