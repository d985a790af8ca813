"""Which files of a local INPUT are pages, decided here and not by the `datasets` loader's guess by extension.

A file is an input of its own: an image is one page, a PDF its pages, a multi-page TIFF its frames. A folder that
holds no data files (and is no `save_to_disk` folder, and has no card naming its data) is a folder of pages: its
image and PDF files, whatever else lies beside them (old OCR text, notes), which are counted and left out. The
loader instead picked its builder by the most common extension, so a `.txt` beside each page made a text dataset.
Files follow their paths under the folder sorted as strings (`sorted()`, `LC_ALL=C ls`): `a-b.png`, `a.png`,
`a/b.png`. Each row is named by that path (`#p<page>` for a PDF page or a TIFF frame), so its id stays the same
however the folder grows.
"""

from __future__ import annotations

from pathlib import Path

import datasets
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder
from PIL import Image

from ..console import say
from .addresses import InputError
from .images import IMAGE_DATA_ERRORS
from .pdf import PDF_SUFFIX, RenderSize
from .pdf_rows import SOURCE_FILE, PdfDocuments, counted_pages, page_rows, report_broken

IMAGE_COLUMN = "image"
IMAGE_SUFFIXES = frozenset(ImageFolder.EXTENSIONS)
# Scanners write several pages into one TIFF; other formats' extra frames are animation or a camera's previews
# (MPO), not pages, and opening every image of a large folder to count its frames would cost its load time.
MULTI_PAGE_SUFFIXES = frozenset({".tif", ".tiff"})
DATA_SUFFIXES = frozenset({".parquet", ".arrow", ".csv", ".json", ".jsonl", ".tsv"})
FOLDER_OWN_FILES = frozenset({"readme.md", "metadata.csv", "metadata.jsonl", "metadata.parquet"})


def page_files(path: Path) -> list[Path] | None:
    """The files an input path names as pages: an image or PDF file, or a folder's image and PDF files; None for
    a dataset (a `save_to_disk` folder, a folder holding data files or a card naming them, or no page file)."""
    if path.is_file():
        if not is_page(path):
            raise InputError(
                f"{path} is neither an image nor a PDF: pass an image or PDF file, a folder of them, a dataset "
                "folder (parquet, arrow, csv or json files) or a Hub dataset id"
            )
        return [path]
    if not path.is_dir() or (path / "state.json").exists() or (path / "dataset_dict.json").exists():
        return None
    files = folder_files(path)
    if any(file.suffix.lower() in DATA_SUFFIXES for file in files) or card_names_data(path):
        return None
    return [file for file in files if is_page(file)] or None


def is_page(file: Path) -> bool:
    suffix = file.suffix.lower()
    return suffix == PDF_SUFFIX or suffix in IMAGE_SUFFIXES


def card_names_data(folder: Path) -> bool:
    """Whether the folder's dataset card says which files are its data (`configs:` in its YAML header)."""
    card = folder / "README.md"
    if not card.is_file():
        return False
    text = card.read_text(errors="replace")
    header = text.split("\n---", 1)[0] if text.startswith("---") else ""
    return "\nconfigs:" in header


def folder_files(path: Path) -> list[Path]:
    """A folder's files sorted by their path under it as a string, hidden ones (and those in hidden folders) left
    out."""
    named = [
        (file.relative_to(path).as_posix(), file)
        for file in path.rglob("*")
        if file.is_file() and not any(part.startswith(".") for part in file.relative_to(path).parts)
    ]
    return [file for _, file in sorted(named)]


def report_skipped(folder: Path) -> None:
    """Says once how many files of a folder of pages are neither page images nor PDFs, and names one: they are left
    out of the input (a folder's card and metadata file are its own, not pages)."""
    skipped = [file.relative_to(folder).as_posix() for file in folder_files(folder) if not is_read(file)]
    if skipped:
        say(f"skipping {len(skipped)} file(s) that are neither images nor PDFs, e.g. {skipped[0]}")


def is_read(file: Path) -> bool:
    """Whether a folder input reads this file: a page image, a PDF, or the folder's card or metadata."""
    return is_page(file) or file.name.lower() in FOLDER_OWN_FILES


def frame_count(file: Path) -> int | None:
    """A multi-page TIFF's number of frames; None for any other image (one page), and for one that does not open,
    whose row then fails with the reason when it is read."""
    if file.suffix.lower() not in MULTI_PAGE_SUFFIXES:
        return None
    try:
        with Image.open(file) as image:
            frames = getattr(image, "n_frames", 1)
    except (Image.DecompressionBombError, *IMAGE_DATA_ERRORS):
        return None
    return frames if frames > 1 else None


def file_pages(files: list[Path], root: Path, size: RenderSize) -> tuple[datasets.Dataset, PdfDocuments, list[str]]:
    """The page table of image and PDF files, each named by its path under `root` (the input folder, or the file's
    own): an image file's row keeps the file in `image`; a PDF page or TIFF frame has none of its own and is named
    by `source_file` and `page_index`."""
    names = [file.relative_to(root).as_posix() for file in files]
    is_pdf = [file.suffix.lower() == PDF_SUFFIX for file in files]
    broken: list[str] = []
    pdf_counts = iter(counted_pages([(str(f), n) for f, n, pdf in zip(files, names, is_pdf) if pdf], broken))
    counts = [next(pdf_counts) if pdf else frame_count(file) for file, pdf in zip(files, is_pdf)]
    report_broken(broken)
    documents, pages, ids = page_rows(counts, names)
    framed = frozenset(number for number, count in enumerate(counts) if count is not None and not is_pdf[number])
    say(holdings(is_pdf, counts, framed))
    paths = [str(file) for file in files]
    pdfs = PdfDocuments(names, documents, pages, size, paths, framed=framed, has_pdfs=any(is_pdf))
    return page_table(paths, names, documents, pages), pdfs, ids


def page_table(paths: list[str], names: list[str], documents: list[int], pages: list[int | None]) -> datasets.Dataset:
    """The rows' own columns: `image` (the file, on an image file's row; absent when no row is one), `source_file`
    and `page_index`."""
    columns = {SOURCE_FILE: [names[number] for number in documents], "page_index": pages}
    features = {SOURCE_FILE: datasets.Value("string"), "page_index": datasets.Value("int32")}
    if None in pages:
        cells = [None if page is not None else {"bytes": None, "path": paths[d]} for d, page in zip(documents, pages)]
        columns, features = {IMAGE_COLUMN: cells, **columns}, {IMAGE_COLUMN: datasets.Image(), **features}
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


def holdings(is_pdf: list[bool], counts: list[int | None], framed: frozenset[int]) -> str:
    """What the files hold, e.g. `3 image(s), 1 multi-page TIFF(s) of 5 page(s), 2 PDF file(s), 9 page(s)`."""
    parts = []
    images = sum(count is None for count in counts)
    if images:
        parts.append(f"{images} image(s)")
    if framed:
        parts.append(f"{len(framed)} multi-page TIFF(s) of {sum(counts[number] or 0 for number in framed)} page(s)")
    if any(is_pdf):
        pdf_pages = sum(count or 0 for count, pdf in zip(counts, is_pdf) if pdf)
        parts.append(f"{is_pdf.count(True)} PDF file(s), {pdf_pages} page(s)")
    return ", ".join(parts)
