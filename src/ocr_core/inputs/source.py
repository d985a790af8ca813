"""The input a run reads, opened once as a table of rows: a Hub dataset (for a shard, only the files of its range),
a local dataset folder, or local image and PDF files (a file, or a folder of them: which files are pages is
`files.py`'s rule, not the loader's).

Rows are addressed by position in the split, so a rerun, a shard or a shuffled subset all name a page the same
way, and image bytes are read a batch at a time only for pages that still need work. A local dataset's relative
image paths name files beside the dataset, so they are anchored to its folder here, not to the working folder;
a Hub dataset's paths are read only inside its own files, never from the job's machine.

PDF input (a .pdf file, a folder of them, or a dataset column of PDF bytes or paths) becomes one row per page:
a page table with `source_file` and `page_index` (and, for a dataset, the document row's other columns), ids
`<file or row>#p<page>`, so resume, shards and error rows work as for images. Pages are counted once here; a PDF
that cannot be opened (damaged, encrypted) becomes one row whose rendering fails with the reason. Local files
are one table of images, PDF pages and TIFF frames, in the order of the files' paths: each image file is one row
with its path as `source_file` and id, the file in `image`, and no `page_index`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

from ..console import say
from ..errors import CommandError
from .addresses import InputError, input_problem
from .cells import HubFiles, anchored, local_folder
from .files import IMAGE_COLUMN, file_pages, page_files, report_skipped
from .pdf import PdfiumMissing, RenderSize, looks_like_pdf
from .pdf_rows import SOURCE_FILE, PdfDocuments, pdf_dataset_pages
from .selection import row_ids, select_rows, shard_span

READ_BATCH = 64


@dataclass(frozen=True)
class RowInput:
    index: int
    row_id: str
    cell: object


@dataclass
class Source:
    split: str
    dataset: datasets.Dataset
    features: datasets.Features
    image_column: str
    selected: list[int]
    ids: list[str]
    shard: tuple[int, int] | None = None
    folder: Path | HubFiles | None = None
    pdfs: PdfDocuments | None = None
    offset: int = 0
    total: int | None = None

    @property
    def input_rows(self) -> int:
        """Rows in the split; `dataset` may hold only the files of this shard's range (then it starts at `offset`)."""
        return len(self.dataset) if self.total is None else self.total

    @property
    def span(self) -> range:
        """This job's positions in the selection: all of them, or its shard's contiguous range."""
        return shard_span(len(self.selected), self.shard)

    def owned(self) -> list[str]:
        """The selected ids this job processes, in output order: all of them, or its shard's."""
        return self.ids[self.span.start : self.span.stop]

    def rows(self, skip: set[str]) -> Iterator[RowInput]:
        """Yields this job's selected rows still to do, reading image cells (or PDFs) a batch at a time."""
        todo = [
            (self.selected[position], self.ids[position]) for position in self.span if self.ids[position] not in skip
        ]
        for start in range(0, len(todo), READ_BATCH):
            batch = todo[start : start + READ_BATCH]
            for (index, row_id), cell in zip(batch, self.cells([index for index, _ in batch])):
                yield RowInput(index, row_id, cell)

    def cells(self, positions: list[int]) -> list[object]:
        if self.pdfs is not None:
            return self.pdfs.cells(positions)
        local = [position - self.offset for position in positions]
        return [anchored(cell, self.folder) for cell in self.dataset[local][self.image_column]]

    def input_table(self, positions: list[int]) -> pa.Table:
        """These rows of the input, every column, as Arrow (`positions` in the split)."""
        return self.dataset.select([position - self.offset for position in positions]).with_format("arrow")[:]


def open_dataset(name: str, split: str, config: str | None, revision: str | None = None) -> datasets.Dataset:
    """A local `save_to_disk` folder, a local data folder, or a Hub dataset id."""
    path = Path(name).expanduser()
    if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise InputError(f"{name} has no split {split!r}; it has {sorted(loaded)} (pass --split)")
            return loaded[split]
        return loaded
    if path.exists():
        return datasets.load_dataset(str(path), name=config, split=split, data_files=local_files(path, config))
    return datasets.load_dataset(name, name=config, split=split, revision=revision)


def local_files(path: Path, config: str | None) -> dict[str, list[str]]:
    """A local folder's files, config by config as its card or layout picks them, to pass back as `data_files`.

    datasets keys a local folder whose card has `configs:` by its basename and the card's patterns, not its files,
    so a plain load can return another folder's rows of the same name, or this folder's before it changed (issue
    35). Files passed explicitly are hashed with their paths and modification times, so the key follows them.
    """
    builder = datasets.load_dataset_builder(str(path), name=config)
    return {split: list(files) for split, files in (builder.config.data_files or {}).items()}


@dataclass(frozen=True)
class InputSelection:
    """Which rows of which input a run reads: the input's part of the run's plan, as one record."""

    name: str
    split: str = "train"
    image_column: str = "image"
    config: str | None = None
    id_column: str | None = None
    max_samples: int | None = None
    shuffle: bool = False
    seed: int = 42
    shard: tuple[int, int] | None = None
    revision: str | None = None


def load_source(wanted: InputSelection, revision: str | None = None, pdf_size: RenderSize | None = None) -> Source:
    """`revision` is the Hub input's commit to read; `pdf_size` is how PDF pages are rendered when the input holds
    PDFs (the model's card size by default)."""
    name, split, image_column, id_column = wanted.name, wanted.split, wanted.image_column, wanted.id_column
    folder = local_folder(name)
    size = pdf_size or RenderSize()
    offset, total = 0, None
    try:
        path = Path(name).expanduser()
        files = page_files(path)
        if files is not None:
            if id_column:
                raise InputError("--id-column applies to a dataset; image and PDF files are keyed by path and page")
            image_column = IMAGE_COLUMN
            dataset, pdfs, page_ids = file_pages(files, path if path.is_dir() else path.parent, size)
            if path.is_dir():
                report_skipped(path)
            features = dataset.features
        else:
            sliced = None
            if wanted.shard is not None and not wanted.shuffle and id_column is None:
                sliced = parquet_slice(wanted, wanted.shard, revision)
            opened, offset, total = sliced or (open_dataset(name, split, wanted.config, revision), 0, None)
            dataset, features, pdfs, page_ids = dataset_rows(opened, name, split, image_column, id_column, size, folder)
            if isinstance(folder, Path) and opened.info.builder_name == "imagefolder":
                dataset, features = with_source_files(dataset, features, image_column, folder)
                report_skipped(folder)
    except PdfiumMissing as exc:
        raise InputError(str(exc)) from exc
    except CommandError:
        raise
    except Exception as exc:
        problem = input_problem(exc, name)
        if problem is None:
            raise
        raise InputError(problem) from exc
    selected = select_rows(len(dataset) if total is None else total, wanted.max_samples, wanted.shuffle, wanted.seed)
    ids = [page_ids[index] for index in selected] if pdfs else row_ids(dataset, split, selected, id_column)
    return Source(split, dataset, features, image_column, selected, ids, wanted.shard, folder, pdfs, offset, total)


def parquet_slice(
    wanted: InputSelection, shard: tuple[int, int], revision: str | None
) -> tuple[datasets.Dataset, int, int] | None:
    """For a shard of an input made of parquet files of images (a Hub dataset, or a local folder of them): only
    the files that hold its range of rows, the position of their first row, and the split's rows. Which files is
    read from their footers (a few KB each), so a shard never downloads the other shards' images. None for any
    other input, which is then loaded whole."""
    name, split, image_column = wanted.name, wanted.split, wanted.image_column
    path = Path(name).expanduser()
    if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
        return None
    builder = datasets.load_dataset_builder(str(path) if path.exists() else name, name=wanted.config, revision=revision)
    files = list((builder.config.data_files or {}).get(split) or [])
    if builder.name != "parquet" or not files:
        return None
    features = builder.info.features or parquet_features(files[0])
    if not isinstance((features or {}).get(image_column), datasets.Image):
        return None
    counts = [parquet_rows(file) for file in files]
    starts = list(itertools.accumulate([0, *counts[:-1]]))
    total = sum(counts)
    span = shard_span(total if wanted.max_samples is None else min(total, wanted.max_samples), shard)
    needed = [
        number
        for number, (start, count) in enumerate(zip(starts, counts))
        if start < span.stop and span.start < start + count
    ] or [0]
    chosen = [files[number] for number in needed]
    dataset = datasets.load_dataset("parquet", data_files={split: chosen}, split=split, features=features)
    say(f"shard {shard[0]}/{shard[1]}: reading {len(chosen)} of the input's {len(files)} file(s)")
    return dataset, starts[needed[0]], total


def open_data_file(file: str) -> BinaryIO:
    """A data file the builder resolved: `hf://...` on the Hub (read by ranges, so a footer costs a few KB)."""
    if file.startswith("hf://"):
        from huggingface_hub import HfFileSystem

        return HfFileSystem().open(file, "rb")
    return open(file, "rb")


def parquet_rows(file: str) -> int:
    with open_data_file(file) as handle:
        return pq.ParquetFile(handle).metadata.num_rows


def parquet_features(file: str) -> datasets.Features | None:
    """The features `datasets` wrote into a parquet file's schema, or None when it holds none."""
    with open_data_file(file) as handle:
        schema = pq.read_schema(handle)
    written = schema.metadata and b"huggingface" in schema.metadata
    return datasets.Features.from_arrow_schema(schema) if written else None


def with_source_files(
    dataset: datasets.Dataset, features: datasets.Features, image_column: str, folder: Path
) -> tuple[datasets.Dataset, datasets.Features]:
    """A folder of images, read by datasets' imagefolder builder, names no file in its rows once the output embeds
    each image's bytes: each row gets `source_file`, its image's path under the folder, as a mixed folder's rows
    have, so every output leads back to its input files. A folder whose metadata file has that column keeps its own."""
    if SOURCE_FILE in dataset.column_names:
        return dataset, features
    paths = dataset.data.column(image_column).combine_chunks().field("path").to_pylist()
    names = [under(path, folder) if path else None for path in paths]
    named = dataset.add_column(SOURCE_FILE, names)
    return named, datasets.Features({**features, SOURCE_FILE: datasets.Value("string")})


def under(path: str, folder: Path) -> str:
    """A file's path under the (resolved) input folder, also where the builder read it through a link."""
    try:
        return str(Path(path).relative_to(folder))
    except ValueError:
        return os.path.relpath(os.path.realpath(path), folder)


def dataset_rows(
    dataset: datasets.Dataset,
    name: str,
    split: str,
    image_column: str,
    id_column: str | None,
    size: RenderSize,
    folder: Path | HubFiles | None,
) -> tuple[datasets.Dataset, datasets.Features, PdfDocuments | None, list[str]]:
    """A dataset's rows as they are, or, when its column holds PDFs, its page table (then ids come with it)."""
    for column in (image_column, id_column):
        if column and column not in dataset.column_names:
            raise InputError(
                f"{name} has no column {column!r}; its columns are {dataset.column_names} "
                "(pass --image-column / --id-column)"
            )
    features = dataset.features.copy()
    if isinstance(features[image_column], datasets.Image):
        return dataset.cast_column(image_column, datasets.Image(decode=False)), features, None, []
    if isinstance(features[image_column], datasets.Pdf):
        dataset = dataset.cast_column(image_column, datasets.Pdf(decode=False))
    elif not looks_like_pdf(next((cell for cell in dataset[:8][image_column] if cell is not None), None)):
        return dataset, features, None, []
    pages, pdfs, page_ids = pdf_dataset_pages(dataset, image_column, split, id_column, size, folder)
    return pages, pages.features, pdfs, page_ids
