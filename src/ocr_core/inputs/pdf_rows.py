"""PDF input as rows: one row per page of each PDF, from a folder of files or a dataset column of documents."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import datasets

from ..console import say
from .addresses import InputError
from .cells import HubFiles, anchored
from .images import ImageFrame, OutsidePath
from .pdf import BadPdf, PdfPage, RenderSize, page_count
from .selection import row_ids

PDF_COUNT_BATCH = 8


SOURCE_FILE = "source_file"


PDF_COLUMNS = (SOURCE_FILE, "page_index")


BROKEN_SHOWN = 3


@dataclass
class PdfDocuments:
    """The files behind a page table: each row's document and page number, and where each document lives. A row
    without a page number is an image file: its cell is the file itself; a row of a `framed` document is one frame
    of a multi-page image file. `has_pdfs` says whether any document is a PDF, whose render size the run records."""

    names: list[str]
    page_document: list[int]
    page_index: list[int | None]
    size: RenderSize
    paths: list[str] | None = None
    base: datasets.Dataset | None = None
    column: str | None = None
    folder: Path | HubFiles | None = None
    framed: frozenset[int] = frozenset()
    has_pdfs: bool = True

    def cells(self, positions: list[int]) -> list[PdfPage | ImageFrame | str]:
        """The page rows' cells; a document's bytes are read once per batch and shared by its pages."""
        wanted = sorted({self.page_document[position] for position in positions})
        loaded = dict(zip(wanted, self.documents(wanted)))
        return [self.cell(position, loaded[self.page_document[position]]) for position in positions]

    def cell(self, position: int, document: bytes | str | OutsidePath | None) -> PdfPage | ImageFrame | str:
        page, number = self.page_index[position], self.page_document[position]
        if page is None:
            return str(document)
        if number in self.framed:
            return ImageFrame(str(document), page, self.names[number])
        return PdfPage(document, page, self.names[number], self.size)

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
