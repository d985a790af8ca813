"""The published data files as parquet: what `load_dataset` reads, and the one SliceWriter (layout.py) there is.

One writer per file, fed a batch of rows at a time, so memory holds one batch of images, never the slice.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq


class ParquetSliceWriter:
    suffix: ClassVar[str] = ".parquet"

    def __init__(self, writer: pq.ParquetWriter, schema: pa.Schema) -> None:
        self.writer = writer
        self.schema = schema

    @classmethod
    def open(cls, path: Path, schema: pa.Schema) -> ParquetSliceWriter:
        return cls(pq.ParquetWriter(path, schema), schema)

    def write(self, rows: pa.Table) -> None:
        """Rows are cast to the file's schema, so every batch (and every shard's file) has the same one."""
        self.writer.write_table(rows.cast(self.schema))

    def close(self) -> None:
        self.writer.close()
