"""PDF pages as page images: how many pages a PDF has, and each page rendered at the size the model's card asks for.

Users otherwise render PDFs to images themselves, at a size the model may not want. Each model's facts say how
its pages should look (`pdf_render`: a longest edge, or a DPI held inside a pixel band), and a page is rendered
straight to that size, never rendered big and shrunk. PDFium (through pypdfium2) is not thread-safe, not even
across documents, so every call into it holds one lock and no document handle outlives the call; the JPEG
encoding, a third to a half of a page's CPU, runs outside the lock, in the prep threads beside the window. One
lock renders about 30-40 pages/s of 2048 px on one core (bench/pdf_render.py), far more than a GPU OCRs. A page opens
its document again (from its path, or from bytes shared by all its pages), which costs far less than rendering.
pypdfium2 is imported only when the input holds PDFs.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .images import BadImage, ImageFrame, OutsidePath, PreparedImage, cell_bytes, prepare_frame, prepare_image, reencode

PDF_MAGIC = b"%PDF-"
PDF_SUFFIX = ".pdf"
POINTS_PER_INCH = 72.0
DEFAULT_DPI = 200.0
RENDER_PIXEL_CEILING = 40_000_000
PASSWORD_ERROR = 4
SECURITY_ERROR = 6
PDFIUM_LOCK = threading.Lock()
# The threads that run prepare_page beside the engine, in both shapes: one per core, up to eight.
PREP_THREADS = min(8, os.cpu_count() or 1)
INSTALL_HINT = "PDF input needs pypdfium2: `pip install pypdfium2` (uv run installs it with the script)"


class BadPdf(BadImage):
    """A page row whose PDF or page cannot be rendered; the reason says which file and why."""

    kind = "bad pdf"


class PdfiumMissing(ImportError):
    """pypdfium2 is not installed; the message names the install."""


@dataclass(frozen=True)
class RenderSize:
    """How big a page is rendered: exactly `longest_edge` pixels on its longer side, or `dpi` moved into the
    [min_pixels, max_pixels] band; the model's own image bounds apply on top."""

    longest_edge: int | None = None
    dpi: float = DEFAULT_DPI
    min_pixels: int | None = None
    max_pixels: int | None = None

    def describe(self) -> dict[str, Any]:
        """The settings that change the pixels (and so the text), for the manifest."""
        return asdict(self)


@dataclass(frozen=True)
class PdfPage:
    """One page row's cell: its PDF (bytes, a path, or None when the input holds none), which page, the name
    messages use, and the render size."""

    document: bytes | str | OutsidePath | None
    page_index: int
    name: str
    size: RenderSize


def render_size(spec: Mapping[str, Any], longest_edge: int | None = None) -> RenderSize:
    """A model's PDF_RENDER, or the --pdf-longest-edge the command gives instead."""
    return RenderSize(longest_edge=longest_edge) if longest_edge else RenderSize(**spec)


def pdfium() -> Any:
    try:
        import pypdfium2
    except ImportError as exc:
        raise PdfiumMissing(INSTALL_HINT) from exc
    return pypdfium2


def looks_like_pdf(cell: object) -> bool:
    """Whether a dataset cell holds a PDF (its bytes begin with %PDF-, or its path ends in .pdf)."""
    if isinstance(cell, dict):
        return looks_like_pdf(cell.get("bytes")) or looks_like_pdf(cell.get("path"))
    if isinstance(cell, (bytes, bytearray, memoryview)):
        return bytes(cell[: len(PDF_MAGIC)]) == PDF_MAGIC
    return isinstance(cell, str) and cell.lower().endswith(PDF_SUFFIX)


def open_reason(exc: Exception, name: str) -> str:
    code = getattr(exc, "err_code", None)
    if code == PASSWORD_ERROR or "password" in str(exc).lower():
        return (
            f"{name} is encrypted (password protected): decrypt it first, for example `qpdf --decrypt "
            "--password=PASSWORD in.pdf out.pdf`, then rerun with --retry-errors"
        )
    if code == SECURITY_ERROR:
        return f"{name} uses a security handler PDFium does not support: decrypt it first, then rerun"
    return f"{name} cannot be opened as a PDF ({exc}): the file is damaged or not a PDF"


def open_document(module: Any, document: bytes | str | OutsidePath | None, name: str) -> Any:
    """Opens a PDF; the caller holds PDFIUM_LOCK and closes it."""
    if document is None:
        raise BadPdf(f"{name}: the input holds no PDF here")
    if isinstance(document, OutsidePath):
        raise BadPdf(document.reason())
    try:
        return module.PdfDocument(Path(document) if isinstance(document, str) else document)
    except module.PdfiumError as exc:
        raise BadPdf(open_reason(exc, name)) from exc
    except OSError as exc:
        raise BadPdf(f"cannot read {name}: {exc.strerror or exc}") from exc


def page_count(document: bytes | str | OutsidePath | None, name: str) -> int:
    """How many pages a PDF has; raises BadPdf when it cannot be opened (encrypted, damaged, missing)."""
    module = pdfium()
    with PDFIUM_LOCK:
        opened = open_document(module, document, name)
        try:
            return len(opened)
        finally:
            opened.close()


def render_scale(
    width_pt: float, height_pt: float, size: RenderSize, max_side: int | None, max_pixels: int | None
) -> float:
    """Pixels per PDF point for a page of this size (points are 1/72 inch)."""
    area = max(width_pt * height_pt, 1e-6)
    if size.longest_edge:
        scale = size.longest_edge / max(width_pt, height_pt)
    else:
        scale = size.dpi / POINTS_PER_INCH
        if size.max_pixels and area * scale**2 > size.max_pixels:
            scale = math.sqrt(size.max_pixels / area)
        if size.min_pixels and area * scale**2 < size.min_pixels:
            scale = math.sqrt(size.min_pixels / area)
    if max_side:
        scale = min(scale, max_side / max(width_pt, height_pt))
    return min(scale, math.sqrt(min(max_pixels or RENDER_PIXEL_CEILING, RENDER_PIXEL_CEILING) / area))


def render_page(page: PdfPage, max_side: int | None, max_pixels: int | None) -> PreparedImage:
    """The page as a JPEG at its render size; a damaged file or page raises BadPdf, so it is that row's error."""
    module = pdfium()
    with PDFIUM_LOCK:
        opened = open_document(module, page.document, page.name)
        try:
            if not 0 <= page.page_index < len(opened):
                raise BadPdf(f"{page.name} has no page {page.page_index} (it has {len(opened)})")
            image = render_locked(module, opened, page, max_side, max_pixels)
        finally:
            opened.close()
    return reencode(image, 1.0, None)


def render_locked(module: Any, opened: Any, page: PdfPage, max_side: int | None, max_pixels: int | None) -> Any:
    """Renders one page into a PIL image of its own (a copy, so nothing of PDFium's outlives the lock)."""
    handle = None
    try:
        handle = opened[page.page_index]
        width, height = handle.get_size()
        if width <= 0 or height <= 0:
            raise BadPdf(f"page {page.page_index} of {page.name} has no area ({width}x{height} pt)")
        bitmap = handle.render(scale=render_scale(width, height, page.size, max_side, max_pixels))
        try:
            return bitmap.to_pil().copy()
        finally:
            bitmap.close()
    except module.PdfiumError as exc:
        raise BadPdf(f"page {page.page_index} of {page.name} cannot be rendered: {exc}") from exc
    finally:
        if handle is not None:
            handle.close()


def prepare_page(cell: object, max_side: int | None, max_pixels: int | None, verify: bool = False) -> PreparedImage:
    """A row's image ready to send: a PDF page rendered, a multi-page image's frame cut out, any other cell read and
    checked as an image."""
    if isinstance(cell, PdfPage):
        return render_page(cell, max_side, max_pixels)
    if isinstance(cell, ImageFrame):
        return prepare_frame(cell, max_side, max_pixels)
    return prepare_image(cell_bytes(cell), max_side, max_pixels, verify)
