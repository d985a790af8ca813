"""Builds a job's slice of the final dataset: the input's own columns (all, or those --columns names) and rows, in
input order, with the results beside them.

Each job (one --shard, or the whole selection) writes only its own contiguous range of rows, as files named by
layout.data_file_name, so that `load_dataset` over `<prefix>/<split>-*` reads the union of the finished shards in
input order. Rows are read from the input and written WRITE_ROWS at a time through one writer per file
(layout.SLICE_WRITER), so memory holds one batch of images, never the slice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
from datasets.table import embed_table_storage

from ..inputs.columns import INFO_COLUMN, Columns
from ..inputs.source import Source
from ..store.layout import SLICE_WRITER, data_file_name
from ..store.progress import RESULT_SCHEMA

SHARD_BYTES = 500 * 1024**2
SAMPLE_ROWS = 32
WRITE_ROWS = 256


def missing_rows(source: Source, results: pa.Table, owned_only: bool = False) -> int:
    """Selected rows (or only this shard's) that have no result yet."""
    done = set(results["row_id"].to_pylist())
    return sum(row_id not in done for row_id in (source.owned() if owned_only else source.ids))


def kept_input_columns(source: Source, columns: Columns) -> list[str]:
    """The input columns the output carries: every one, or those --columns names; never ones the results replace."""
    dropped = {*columns.names(), INFO_COLUMN}
    named = source.features if columns.keep is None else columns.keep
    return [name for name in named if name not in dropped]


def output_features(source: Source, columns: Columns) -> datasets.Features:
    features = datasets.Features({name: source.features[name] for name in kept_input_columns(source, columns)})
    features[columns.output] = datasets.Value("string")
    features[columns.error] = datasets.Value("string")
    for name, arrow_type in columns.extra.items():
        features[name] = datasets.features.features.generate_from_arrow_type(arrow_type)
    features[INFO_COLUMN] = datasets.Value("string")
    return features


def image_columns(source: Source, columns: Columns) -> tuple[str, ...]:
    """The output's columns that `datasets` decodes as images, for the card's way through the rows undecoded: an
    input's other image columns keep their bytes as they came; the page column holds null where its page did not
    decode (`readable_pages`)."""
    features = output_features(source, columns)
    return tuple(name for name, feature in features.items() if isinstance(feature, datasets.Image))


def page_image_column(source: Source, columns: Columns) -> str | None:
    """The output's column of the page images this run read, when it carries them as images."""
    feature = output_features(source, columns).get(source.image_column)
    return source.image_column if isinstance(feature, datasets.Image) else None


def rows_per_shard(source: Source) -> int:
    span = source.span
    sample = source.selected[span.start : min(span.stop, span.start + SAMPLE_ROWS)]
    if not sample:
        return 1
    table = source.input_table(sample)
    per_row = max(1, embed_table_storage(table).nbytes // len(sample))
    return max(1, SHARD_BYTES // per_row)


EntryOf = Callable[[str | None], dict[str, Any]]


def assemble(
    source: Source, results: pa.Table, columns: Columns, info: EntryOf, folder: Path, prefix: str
) -> dict[str, Path]:
    """Writes this job's range of rows (its shard's, or all) as slice files under `folder`; returns them by path in
    the repo. `results` needs to hold only this range's rows; `info` makes a row's inference_info entry from the
    record of the run that wrote it."""
    position = {row_id: i for i, row_id in enumerate(results["row_id"].to_pylist())}
    schema = output_features(source, columns).arrow_schema
    span = source.span
    step = rows_per_shard(source)
    files: dict[str, Path] = {}
    for part, start in enumerate(range(span.start, span.stop, step)):
        name = data_file_name(prefix, source.split, source.shard or (0, 1), part)
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with closing(SLICE_WRITER.open(path, schema)) as writer:
            for first in range(start, min(start + step, span.stop), WRITE_ROWS):
                rows = slice(first, min(first + WRITE_ROWS, start + step, span.stop))
                batch = shard_table(source, source.selected[rows], source.ids[rows], results, position, columns, info)
                writer.write(batch)
        files[name] = path
    return files


def shard_table(
    source: Source,
    positions: list[int],
    ids: list[str],
    results: pa.Table,
    position: Mapping[str, int],
    columns: Columns,
    info: EntryOf,
) -> pa.Table:
    table = embed_table_storage(source.input_table(positions))
    previous_info = table[INFO_COLUMN].to_pylist() if INFO_COLUMN in table.column_names else None
    table = table.select(kept_input_columns(source, columns))
    picked = results.take([position[row_id] for row_id in ids]) if ids else RESULT_SCHEMA.empty_table()
    pages = page_image_column(source, columns)
    if pages is not None:
        table = readable_pages(table, pages, picked["error"].to_pylist())
    table = table.append_column(columns.output, text_or_failed(picked, columns.failed_text))
    table = table.append_column(columns.error, picked["error"])
    extras = [json.loads(value) if value else {} for value in picked["extra"].to_pylist()]
    for name, arrow_type in columns.extra.items():
        table = table.append_column(name, pa.array([extra.get(name) for extra in extras], type=arrow_type))
    entries = [
        row_entry(info(record), server)
        for record, server in zip(picked["provenance"].to_pylist(), picked["server"].to_pylist(), strict=True)
    ]
    return table.append_column(INFO_COLUMN, pa.array(info_values(previous_info, entries), pa.string()))


def readable_pages(table: pa.Table, column: str, errors: list[str | None]) -> pa.Table:
    """The page column with null in each row whose image does not decode, so every row of the published dataset
    opens as `load_dataset` returns it (a `.jpg` holding text raised on reading its row); the row's error column
    says why its page could not be read. Only rows with an error are tried: a page that was read decodes."""
    cells = table[column]
    unreadable = {index for index, error in enumerate(errors) if error is not None and not decodes(cells[index])}
    if not unreadable:
        return table
    mask = pa.array([index in unreadable for index in range(len(table))])
    cleared = pc.if_else(mask, pa.scalar(None, cells.type), cells)
    return table.set_column(table.column_names.index(column), column, cleared)


def decodes(cell: pa.Scalar) -> bool:
    """Whether a reader's `datasets.Image()` opens this image cell (a null cell is an empty page, not a broken one)."""
    value = cell.as_py()
    if value is None:
        return True
    try:
        datasets.Image().decode_example(value)
    except Exception:
        return False
    return True


def text_or_failed(results: pa.Table, failed_text: str | None) -> pa.ChunkedArray:
    """The text column, with `failed_text` in the rows that have an error and no text."""
    text = results["text"]
    if failed_text is None:
        return text
    failed = pc.and_(pc.is_null(text), pc.is_valid(results["error"]))
    return pc.if_else(failed, pa.scalar(failed_text, pa.string()), text)


def inference_history(source: Source) -> list[dict[str, Any]]:
    """The `inference_info` entries the input already carries (earlier runs over these rows), oldest first."""
    if INFO_COLUMN not in source.dataset.column_names or not source.span:
        return []
    value = source.input_table([source.selected[source.span.start]])[INFO_COLUMN][0].as_py()
    history = json.loads(value) if value else []
    return history if isinstance(history, list) else [history]


def row_entry(info: dict[str, Any], server: str | None) -> dict[str, Any]:
    """This run's entry for one row: the run's, with the server that wrote the row's text and its vLLM version
    (progress.RowResult.server) where the row records them, since a fleet may mix servers and builds."""
    return {**info, **json.loads(server)} if server else info


def info_values(previous: list[str | None] | None, entries: list[dict[str, Any]]) -> list[str]:
    """`inference_info` is a JSON list per row; an earlier model's entries are kept and this row's appended."""
    if previous is None:
        return [json.dumps([entry]) for entry in entries]
    values = []
    for item, entry in zip(previous, entries):
        history = json.loads(item) if item else []
        history = history if isinstance(history, list) else [history]
        values.append(json.dumps([*history, entry]))
    return values
