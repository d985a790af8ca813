"""How fast PDF pages are rendered alone, at each model's render size, one thread and the prep threads together.

PDFium is serialised by one lock (it is not thread-safe); the JPEG encoding runs outside it. The figures say
whether the prep threads can keep a GPU fed: one L4 OCRs about 1-2 pages/s, an H100 about 6 (models.json).
Two inputs: the bundled sample (scanned pages, an embedded JPEG each) and a generated text PDF (vector text,
60 lines a page), the two kinds users bring.

Run: .testbed/venv/bin/python bench/pdf_render.py
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from common import ROOT, save

from ocr_core.internals import (
    PDFIUM_LOCK,
    PREP_THREADS,
    PdfPage,
    RenderSize,
    open_document,
    pdfium,
    prepare_page,
    reencode,
    render_locked,
    render_size,
)
from tests.testbed.pdfs import pdf_bytes
from tools.recipes import facts_of

SAMPLE = ROOT / "samples" / "pdf" / "sample-pages.pdf"
TEXT_PAGES = 16
ROUNDS = 3
SCRIPTS = {
    "lighton-ocr3 (longest edge 2048)": "lighton-ocr3.py",
    "ovis-ocr2 (200 dpi in its band)": "ovis-ocr2.py",
    "nanonets-ocr2 (200 dpi in its band)": "nanonets-ocr2.py",
    "hpd-parsing (200 dpi)": "hpd-parsing-saturate.py",
}


def sizes() -> dict[str, tuple[RenderSize, int | None, int | None]]:
    """Each model's render size and image bounds, read from its shipped script's FACTS (what a user runs)."""
    return {
        name: (render_size(facts.pdf_render), facts.max_side, facts.max_pixels)
        for name, facts in ((name, facts_of(script)) for name, script in SCRIPTS.items())
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


def pages_per_s(pages: list[PdfPage], max_side: int | None, max_pixels: int | None, threads: int, rounds: int) -> float:
    work = pages * rounds
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda page: prepare_page(page, max_side, max_pixels), work))
    return len(work) / (time.perf_counter() - started)


def split_ms(pages: list[PdfPage], max_side: int | None, max_pixels: int | None, rounds: int) -> tuple[float, float]:
    """Milliseconds per page inside the PDFium lock (opening and rendering) and outside it (JPEG), one thread."""
    module = pdfium()
    locked = encoding = 0.0
    for page in pages * rounds:
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
    count = len(pages) * rounds
    return locked / count * 1000, encoding / count * 1000


def run(text_pages: int, rounds: int) -> dict:
    inputs = {
        "scanned sample (4 pages)": (SAMPLE.read_bytes(), 4),
        f"text PDF ({text_pages} pages)": (text_pdf(text_pages), text_pages),
    }
    results = []
    for input_name, (document, count) in inputs.items():
        for size_name, (size, max_side, max_pixels) in sizes().items():
            pages = cells(document, count, size)
            image = prepare_page(pages[0], max_side, max_pixels)
            render_ms, encode_ms = split_ms(pages, max_side, max_pixels, rounds)
            row = {
                "input": input_name,
                "size": size_name,
                "pixels": f"{image.width}x{image.height}",
                "render_ms_in_lock": round(render_ms, 1),
                "jpeg_ms_outside_lock": round(encode_ms, 1),
                "one_thread_pages_per_s": round(pages_per_s(pages, max_side, max_pixels, 1, rounds), 1),
                f"{PREP_THREADS}_threads_pages_per_s": round(
                    pages_per_s(pages, max_side, max_pixels, PREP_THREADS, rounds), 1
                ),
            }
            results.append(row)
            print(row)
    return {"threads": PREP_THREADS, "rounds": rounds, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--text-pages", type=int, default=TEXT_PAGES, help="pages of the generated text PDF")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="passes over the pages per figure")
    args = parser.parse_args()
    save("pdf-render", run(args.text_pages, args.rounds))


if __name__ == "__main__":
    main()
