"""How fast PDF pages are rendered alone, at each model's render size, one thread and the prep threads together.

PDFium is serialised by one lock (it is not thread-safe); the JPEG encoding runs outside it. The figures say
whether the prep threads can keep a GPU fed: one L4 OCRs about 1-2 pages/s, an H100 about 6 (models.json).
Two inputs: the bundled sample (scanned pages, an embedded JPEG each) and a generated text PDF (vector text,
60 lines a page), the two kinds users bring.

Run: .testbed/venv/bin/python bench/pdf_render.py
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from common import ROOT, save

from ocr_core.images import reencode
from ocr_core.pdf import (
    PDFIUM_LOCK,
    PREP_THREADS,
    PdfPage,
    RenderSize,
    open_document,
    pdfium,
    prepare_page,
    render_locked,
    render_size,
)
from ocr_models import hpd_parsing, lighton_ocr3, nanonets_ocr2, ovis_ocr2
from tests.testbed.pdfs import pdf_bytes

SAMPLE = ROOT / "samples" / "pdf" / "sample-pages.pdf"
TEXT_PAGES = 16
ROUNDS = 3
SIZES = {
    "lighton-ocr3 (longest edge 2048)": (render_size(lighton_ocr3.PDF_RENDER), lighton_ocr3.MAX_SIDE, None),
    "ovis-ocr2 (200 dpi in its band)": (render_size(ovis_ocr2.PDF_RENDER), None, ovis_ocr2.MAX_PIXELS),
    "nanonets-ocr2 (200 dpi in its band)": (render_size(nanonets_ocr2.PDF_RENDER), None, None),
    "hpd-parsing (200 dpi)": (render_size(hpd_parsing.PDF_RENDER), None, None),
}


def text_pdf(pages: int) -> bytes:
    """A US-letter PDF of `pages` pages of 60 lines of Helvetica each: what a born-digital report looks like."""
    line = "The survey recorded channel width, bank erosion and the condition of every culvert along the way."
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for page in range(pages):
        text = b"".join(b"(%d.%d %s) Tj T* " % (page, row, line.encode()) for row in range(60))
        stream = b"BT /F1 9 Tf 11 TL 54 740 Td " + text + b"ET"
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        content = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % content
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), pages)
    return pdf_bytes(objects)


def cells(document: bytes, pages: int, size: RenderSize) -> list[PdfPage]:
    return [PdfPage(document, index, "bench.pdf", size) for index in range(pages)]


def pages_per_s(pages: list[PdfPage], max_side: int | None, max_pixels: int | None, threads: int) -> float:
    work = pages * ROUNDS
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda page: prepare_page(page, max_side, max_pixels), work))
    return len(work) / (time.perf_counter() - started)


def split_ms(pages: list[PdfPage], max_side: int | None, max_pixels: int | None) -> tuple[float, float]:
    """Milliseconds per page inside the PDFium lock (opening and rendering) and outside it (JPEG), one thread."""
    module = pdfium()
    locked = encoding = 0.0
    for page in pages * ROUNDS:
        begin = time.perf_counter()
        with PDFIUM_LOCK:
            opened = open_document(module, page.document, page.name)
            try:
                image = render_locked(module, opened, page, max_side, max_pixels)
            finally:
                opened.close()
        middle = time.perf_counter()
        reencode(image, 1.0, None)
        locked += middle - begin
        encoding += time.perf_counter() - middle
    count = len(pages) * ROUNDS
    return locked / count * 1000, encoding / count * 1000


def run() -> dict:
    inputs = {"scanned sample (4 pages)": (SAMPLE.read_bytes(), 4), "text PDF (16 pages)": (text_pdf(TEXT_PAGES), 16)}
    results = []
    for input_name, (document, count) in inputs.items():
        for size_name, (size, max_side, max_pixels) in SIZES.items():
            pages = cells(document, count, size)
            image = prepare_page(pages[0], max_side, max_pixels)
            render_ms, encode_ms = split_ms(pages, max_side, max_pixels)
            row = {
                "input": input_name,
                "size": size_name,
                "pixels": f"{image.width}x{image.height}",
                "render_ms_in_lock": round(render_ms, 1),
                "jpeg_ms_outside_lock": round(encode_ms, 1),
                "one_thread_pages_per_s": round(pages_per_s(pages, max_side, max_pixels, 1), 1),
                f"{PREP_THREADS}_threads_pages_per_s": round(pages_per_s(pages, max_side, max_pixels, PREP_THREADS), 1),
            }
            results.append(row)
            print(row)
    return {"threads": PREP_THREADS, "rounds": ROUNDS, "results": results}


if __name__ == "__main__":
    save("pdf-render", run())
