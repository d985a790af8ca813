"""PDF input as rows: one row per page of each PDF, from a folder of files or a dataset column of documents."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import datasets
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

from ..console import say
from .addresses import InputError
from .cells import HubFiles, anchored
from .images import OutsidePath
from .pdf import BadPdf, PdfPage, RenderSize, page_count
from .selection import row_ids

PDF_COUNT_BATCH = 8


SOURCE_FILE = "source_file"


PDF_COLUMNS = (SOURCE_FILE, "page_index")


BROKEN_SHOWN = 3


IMAGE_SUFFIXES = frozenset(ImageFolder.EXTENSIONS)


FOLDER_OWN_FILES = frozenset({"readme.md", "metadata.csv", "metadata.jsonl", "metadata.parquet"})


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
    files = folder_files(path)
    pdfs = [file for file in files if file.suffix.lower() == ".pdf"]
    if not pdfs or any(file.suffix.lower() in DATA_SUFFIXES for file in files):
        return None
    return [file for file in files if file.suffix.lower() == ".pdf" or file.suffix.lower() in IMAGE_SUFFIXES]


def folder_files(path: Path) -> list[Path]:
    """A folder's files in path order, hidden ones (and those in hidden folders) left out."""
    return [
        file
        for file in sorted(path.rglob("*"))
        if file.is_file() and not any(part.startswith(".") for part in file.relative_to(path).parts)
    ]


def report_skipped(folder: Path) -> None:
    """Says once how many files of a folder of pages are neither page images nor PDFs, and names one: they are left
    out of the input (a folder's card and metadata file are its own, not pages)."""
    skipped = [file.relative_to(folder).as_posix() for file in folder_files(folder) if not is_read(file)]
    if skipped:
        say(f"skipping {len(skipped)} file(s) that are neither images nor PDFs, e.g. {skipped[0]}")


def is_read(file: Path) -> bool:
    """Whether a folder input reads this file: a page image, a PDF, or the folder's card or metadata."""
    suffix = file.suffix.lower()
    return suffix == ".pdf" or suffix in IMAGE_SUFFIXES or file.name.lower() in FOLDER_OWN_FILES


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


DATA_SUFFIXES = {".parquet", ".arrow", ".csv", ".json", ".jsonl", ".tsv"}
