"""The input side: which rows a run covers, in which order, under which stable ids.

Rows are addressed by position in the split, so a rerun, a shard or a shuffled subset all name a page the same
way, and image bytes are read a batch at a time only for pages that still need work. A local dataset's relative
image paths name files beside the dataset, so they are anchored to its folder here, not to the working folder;
a Hub dataset's paths are read only inside its own files, never from the job's machine.

PDF input (a .pdf file, a folder of them, or a dataset column of PDF bytes or paths) becomes one row per page:
a page table with `source_file` and `page_index` (and, for a dataset, the document row's other columns), ids
`<file or row>#p<page>`, so resume, shards and error rows work as for images. Pages are counted once here; a PDF
that cannot be opened (damaged, encrypted) becomes one row whose rendering fails with the reason. A folder that
mixes PDFs and page images (what a scanner leaves) is one table of both, in the order of the files' paths: each
image is one row with its path as `source_file` and id and no `page_index`.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

from .errors import CommandError
from .images import OutsidePath
from .inputs import input_problem
from .pdf import BadPdf, PdfiumMissing, PdfPage, RenderSize, looks_like_pdf, page_count
from .report import say

READ_BATCH = 64
PDF_COUNT_BATCH = 8
PDF_COLUMNS = ("source_file", "page_index")
DATA_SUFFIXES = {".parquet", ".arrow", ".csv", ".json", ".jsonl", ".tsv"}
BROKEN_SHOWN = 3
IMAGE_SUFFIXES = frozenset(ImageFolder.EXTENSIONS)


class InputError(CommandError, ValueError):
    """The input cannot be used as asked; the message says how to fix the command."""


@dataclass(frozen=True)
class RowInput:
    index: int
    row_id: str
    cell: object


@dataclass
class PdfDocuments:
    """The files behind a page table: each row's document and page number, and where each document lives. A row
    without a page number is a page image of a mixed folder: its cell is the image file itself."""

    names: list[str]
    page_document: list[int]
    page_index: list[int | None]
    size: RenderSize
    paths: list[str] | None = None
    base: datasets.Dataset | None = None
    column: str | None = None
    folder: Path | HubFiles | None = None

    def cells(self, positions: list[int]) -> list[PdfPage | str]:
        """The page rows' cells; a document's bytes are read once per batch and shared by its pages."""
        wanted = sorted({self.page_document[position] for position in positions})
        loaded = dict(zip(wanted, self.documents(wanted)))
        return [self.cell(position, loaded[self.page_document[position]]) for position in positions]

    def cell(self, position: int, document: bytes | str | OutsidePath | None) -> PdfPage | str:
        page = self.page_index[position]
        if page is None:
            return str(document)
        return PdfPage(document, page, self.names[self.page_document[position]], self.size)

    def documents(self, numbers: list[int]) -> list[bytes | str | OutsidePath | None]:
        if self.paths is not None:
            return [self.paths[number] for number in numbers]
        cells = self.base[numbers][self.column]
        return [pdf_document(anchored(cell, self.folder)) for cell in cells]


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


def shard_label(shard: tuple[int, int]) -> str:
    """Shard I of N as file names spell it, zero-padded so that names sort in shard order: `00001-of-00004`."""
    return f"{shard[0]:05d}-of-{shard[1]:05d}"


def shard_span(count: int, shard: tuple[int, int] | None) -> range:
    """Shard I of N owns the I-th of N contiguous, balanced ranges of the selected rows, so the shards' outputs
    concatenated in shard order are the input order, and a shard reads only its stretch of the input."""
    if shard is None:
        return range(count)
    index, total = shard
    return range(count * index // total, count * (index + 1) // total)


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` with 0 <= I < N, as given to --shard."""
    index, _, count = text.partition("/")
    try:
        shard = int(index), int(count)
    except ValueError:
        raise InputError(f"--shard {text!r} is not I/N (for example --shard 0/4)") from None
    if not 0 <= shard[0] < shard[1]:
        raise InputError(f"--shard {text!r}: I must be at least 0 and below N")
    return shard


@dataclass(frozen=True)
class HubFiles:
    """A Hub dataset's own files on this machine: its folder in the Hub cache (where `datasets` downloads the files
    an image column's paths name) and the folder `datasets` extracts downloaded archives into. Its path cells may
    name files there and nowhere else."""

    dataset: str
    roots: tuple[Path, ...]

    @classmethod
    def of(cls, name: str) -> HubFiles:
        from huggingface_hub import constants

        repo = Path(constants.HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}"
        return cls(name, (repo.resolve(), Path(datasets.config.EXTRACTED_DATASETS_PATH).resolve()))

    def confine(self, path: str) -> str | OutsidePath:
        """The path, resolved (links and `..` followed), when it lies inside the dataset's files; else the refusal
        its row fails with."""
        if path.startswith("~") or not Path(path).is_absolute():
            return OutsidePath(path, self.dataset)
        resolved = Path(os.path.realpath(path))
        inside = any(resolved.is_relative_to(root) for root in self.roots)
        return str(resolved) if inside else OutsidePath(path, self.dataset)


def anchored(cell: object, folder: Path | HubFiles | None) -> object:
    """The cell with its path made safe to read: a local input's relative path made absolute under its folder (its
    other paths are the user's own files), a Hub input's path kept only inside that dataset's files (HubFiles)."""
    if folder is None:
        return cell
    place = folder.confine if isinstance(folder, HubFiles) else lambda path: anchored_path(path, folder)
    if isinstance(cell, str) and "://" not in cell:
        return place(cell)
    if isinstance(cell, dict) and cell.get("bytes") is None and isinstance(cell.get("path"), str) and cell["path"]:
        if "://" in cell["path"]:
            return cell
        placed = place(cell["path"])
        return placed if isinstance(placed, OutsidePath) else {**cell, "path": placed}
    return cell


def anchored_path(path: str, folder: Path) -> str:
    local = Path(path).expanduser()
    return str(local if local.is_absolute() else folder / local)


def local_folder(name: str) -> Path | HubFiles:
    """The folder a local input lives in; a Hub dataset id's own files."""
    path = Path(name).expanduser()
    if not path.exists():
        return HubFiles.of(name)
    return (path if path.is_dir() else path.parent).resolve()


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


def load_source(
    name: str,
    split: str = "train",
    image_column: str = "image",
    config: str | None = None,
    id_column: str | None = None,
    max_samples: int | None = None,
    shuffle: bool = False,
    seed: int = 42,
    shard: tuple[int, int] | None = None,
    revision: str | None = None,
    pdf_size: RenderSize | None = None,
) -> Source:
    """`pdf_size` is how PDF pages are rendered when the input holds PDFs (the model's card size by default)."""
    folder = local_folder(name)
    size = pdf_size or RenderSize()
    offset, total = 0, None
    try:
        path = Path(name).expanduser()
        files = page_files(path)
        if files is not None:
            if id_column:
                raise InputError("--id-column applies to a dataset; PDF files are keyed by file name and page")
            dataset, pdfs, page_ids = file_pages(files, path if path.is_dir() else path.parent, size)
            features = dataset.features
        else:
            sliced = None
            if shard is not None and not shuffle and id_column is None:
                sliced = parquet_slice(name, split, config, revision, image_column, max_samples, shard)
            opened, offset, total = sliced or (open_dataset(name, split, config, revision), 0, None)
            dataset, features, pdfs, page_ids = dataset_rows(opened, name, split, image_column, id_column, size, folder)
    except PdfiumMissing as exc:
        raise InputError(str(exc)) from exc
    except CommandError:
        raise
    except Exception as exc:
        problem = input_problem(exc, name)
        if problem is None:
            raise
        raise InputError(problem) from exc
    selected = select_rows(len(dataset) if total is None else total, max_samples, shuffle, seed)
    ids = [page_ids[index] for index in selected] if pdfs else row_ids(dataset, split, selected, id_column)
    return Source(split, dataset, features, image_column, selected, ids, shard, folder, pdfs, offset, total)


def parquet_slice(
    name: str,
    split: str,
    config: str | None,
    revision: str | None,
    image_column: str,
    max_samples: int | None,
    shard: tuple[int, int],
) -> tuple[datasets.Dataset, int, int] | None:
    """For a shard of an input made of parquet files of images (a Hub dataset, or a local folder of them): only
    the files that hold its range of rows, the position of their first row, and the split's rows. Which files is
    read from their footers (a few KB each), so a shard never downloads the other shards' images. None for any
    other input, which is then loaded whole."""
    path = Path(name).expanduser()
    if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
        return None
    builder = datasets.load_dataset_builder(str(path) if path.exists() else name, name=config, revision=revision)
    files = list((builder.config.data_files or {}).get(split) or [])
    if builder.name != "parquet" or not files:
        return None
    features = builder.info.features or parquet_features(files[0])
    if not isinstance((features or {}).get(image_column), datasets.Image):
        return None
    counts = [parquet_rows(file) for file in files]
    starts = list(itertools.accumulate([0, *counts[:-1]]))
    total = sum(counts)
    span = shard_span(total if max_samples is None else min(total, max_samples), shard)
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


def pdf_document(cell: object) -> bytes | str | OutsidePath | None:
    """A dataset cell's PDF: its bytes, or its path (or the refusal of a Hub dataset's path that leaves it); None
    when the cell holds neither."""
    if isinstance(cell, OutsidePath):
        return cell
    if isinstance(cell, dict):
        return pdf_document(cell.get("bytes")) or pdf_document(cell.get("path"))
    if isinstance(cell, (bytes, bytearray, memoryview)):
        return bytes(cell) or None
    return (cell or None) if isinstance(cell, str) else None


def page_files(path: Path) -> list[Path] | None:
    """The files an input path names as pages: a .pdf file, or a folder holding PDFs (and perhaps page images
    beside them) and no data files, in path order; else None (a folder of images alone is an image dataset)."""
    if path.is_file():
        return [path] if path.suffix.lower() == ".pdf" else None
    if not path.is_dir() or (path / "state.json").exists() or (path / "dataset_dict.json").exists():
        return None
    files = [
        file
        for file in sorted(path.rglob("*"))
        if file.is_file() and not any(part.startswith(".") for part in file.relative_to(path).parts)
    ]
    pdfs = [file for file in files if file.suffix.lower() == ".pdf"]
    if not pdfs or any(file.suffix.lower() in DATA_SUFFIXES for file in files):
        return None
    return [file for file in files if file.suffix.lower() == ".pdf" or file.suffix.lower() in IMAGE_SUFFIXES]


def counted_pages(documents: Iterable[tuple[bytes | str | OutsidePath | None, str]], broken: list[str]) -> list[int]:
    """Each document's page count; a document that cannot be opened (or has no page) counts as one error row.

    Documents come one at a time, so a dataset of large PDFs is never held in memory at once.
    """
    counts = []
    for document, name in documents:
        try:
            counts.append(max(1, page_count(document, name)))
        except BadPdf as exc:
            broken.append(str(exc))
            counts.append(1)
    return counts


def page_rows(counts: list[int | None], keys: list[str]) -> tuple[list[int], list[int | None], list[str]]:
    """Per page row: its document, its page number in it, and its id `<key>#p<page>`; a count of None is a page
    image, one row with no page number whose id is its key."""
    documents: list[int] = []
    pages: list[int | None] = []
    ids: list[str] = []
    for number, count in enumerate(counts):
        if count is None:
            documents.append(number)
            pages.append(None)
            ids.append(keys[number])
            continue
        documents.extend([number] * count)
        pages.extend(range(count))
        ids.extend(f"{keys[number]}#p{page}" for page in range(count))
    return documents, pages, ids


def report_broken(broken: list[str]) -> None:
    if broken:
        shown = "; ".join(broken[:BROKEN_SHOWN])
        say(f"warning: {len(broken)} PDF(s) cannot be read, each becomes one error row: {shown}")


def file_pages(files: list[Path], root: Path, size: RenderSize) -> tuple[datasets.Dataset, PdfDocuments, list[str]]:
    """The page table of PDF and image files, each named by its path under `root` (the input folder, or the
    file's own)."""
    names = [file.relative_to(root).as_posix() for file in files]
    is_pdf = [file.suffix.lower() == ".pdf" for file in files]
    broken: list[str] = []
    pdf_counts = iter(counted_pages([(str(f), n) for f, n, pdf in zip(files, names, is_pdf) if pdf], broken))
    counts = [next(pdf_counts) if pdf else None for pdf in is_pdf]
    report_broken(broken)
    documents, pages, ids = page_rows(counts, names)
    table = datasets.Dataset.from_dict(
        {"source_file": [names[number] for number in documents], "page_index": pages},
        features=datasets.Features({"source_file": datasets.Value("string"), "page_index": datasets.Value("int32")}),
    )
    images = is_pdf.count(False)
    say(f"{len(files) - images} PDF file(s), {len(ids) - images} page(s)" + (f", {images} image(s)" if images else ""))
    return table, PdfDocuments(names, documents, pages, size, paths=[str(file) for file in files]), ids


def pdf_dataset_pages(
    dataset: datasets.Dataset,
    column: str,
    split: str,
    id_column: str | None,
    size: RenderSize,
    folder: Path | HubFiles | None,
) -> tuple[datasets.Dataset, PdfDocuments, list[str]]:
    """The page table of a dataset whose `column` holds PDFs: each document row repeated once per page, its other
    columns kept, the PDF itself replaced by `source_file` (its path, else its row id) and `page_index`."""
    clashing = [name for name in PDF_COLUMNS if name in dataset.column_names]
    if clashing:
        raise InputError(f"the input already has column(s) {clashing}, which PDF input writes; rename them first")
    keys = row_ids(dataset, split, list(range(len(dataset))), id_column)
    names: list[str] = []

    def documents() -> Iterator[tuple[bytes | str | OutsidePath | None, str]]:
        for start in range(0, len(dataset), PDF_COUNT_BATCH):
            for offset, cell in enumerate(dataset[start : start + PDF_COUNT_BATCH][column]):
                path = cell.get("path") if isinstance(cell, dict) else cell if isinstance(cell, str) else None
                names.append(path or keys[start + offset])
                yield pdf_document(anchored(cell, folder)), names[-1]

    broken: list[str] = []
    counts = counted_pages(documents(), broken)
    report_broken(broken)
    rows, pages, ids = page_rows(counts, keys)
    table = dataset.remove_columns([column]).select(rows).flatten_indices()
    table = table.add_column("source_file", [names[row] for row in rows]).add_column("page_index", pages)
    table = table.cast_column("page_index", datasets.Value("int32"))
    say(f"{len(dataset)} PDF(s) in column {column!r}, {len(ids)} page(s)")
    pdfs = PdfDocuments(names, rows, pages, size, base=dataset, column=column, folder=folder)
    return table, pdfs, ids


def select_rows(total: int, max_samples: int | None, shuffle: bool, seed: int) -> list[int]:
    """Row positions in output order; a seeded shuffle picks the same subset every time."""
    order = list(range(total))
    if shuffle:
        random.Random(seed).shuffle(order)
    return order[:max_samples] if max_samples is not None else order


def row_ids(dataset: datasets.Dataset, split: str, selected: list[int], id_column: str | None) -> list[str]:
    if id_column is None:
        return [f"{split}-{index}" for index in selected]
    values = dataset.select_columns([id_column])[id_column]
    ids = [str(values[index]) for index in selected]
    if len(set(ids)) != len(ids):
        raise InputError(f"--id-column {id_column!r} has duplicate values; pick a column that is unique per row")
    return ids
