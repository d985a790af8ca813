"""The columns a run writes beside the input's own, and the refusal of a name that clashes with one of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from .source import Source

FAILED_TEXT = "[OCR ERROR]"


@dataclass(frozen=True)
class Columns:
    """Where results go. A row with no text holds `failed_text`: ocr-bench and the other OCR scripts recognise
    `[OCR ERROR]` as a failure and leave it out of judging, where an empty answer would count as a losing one."""

    output: str
    error: str
    extra: Mapping[str, pa.DataType]
    failed_text: str | None = FAILED_TEXT
    keep: tuple[str, ...] | None = None

    def names(self) -> list[str]:
        return [self.output, self.error, *self.extra]


def clash_message(columns: Columns) -> str | None:
    """Why the output cannot hold these columns: two of its own under one name (the text, the error, the model's
    extra columns, inference_info), or an input column --columns keeps that a result column would replace. Either
    way every page would run and then every publish would fail, so the command is refused before the first page."""
    own = [*columns.names(), INFO_COLUMN]
    twice = sorted({name for name in own if own.count(name) > 1})
    if twice:
        return (
            f"the output would hold two columns named {twice} (text in --output-column {columns.output!r}, errors in "
            f"--error-column {columns.error!r}, the model's {sorted(columns.extra) or 'no'} extra columns and "
            f"{INFO_COLUMN!r}); pass --output-column / --error-column names that differ from each other and from those"
        )
    kept = sorted(set(columns.keep or ()) & set(own))
    if kept:
        return (
            f"--columns keeps input column(s) {kept}, which a result column replaces; pass --output-column / "
            "--error-column names of their own, or leave those names out of --columns"
        )
    return None


def collisions(source: Source, columns: Columns) -> list[str]:
    return [name for name in columns.names() if name in source.features]


INFO_COLUMN = "inference_info"
