"""Small PDFs for the tests: the bundled sample, one cut short, one password protected, one with a broken page.

The encrypted one is written by hand: a one-page PDF whose trailer names a standard security handler with made-up
keys, so no password (not even the empty one) opens it, exactly what PDFium reports for a real protected file.
"""

from __future__ import annotations

from pathlib import Path

from tests.testbed.env import REPO_ROOT

SAMPLE_PDF = REPO_ROOT / "samples" / "pdf" / "sample-pages.pdf"
SAMPLE_PAGES = 4


def pdf_bytes(objects: list[bytes], trailer: bytes = b"") -> bytes:
    """A PDF of these numbered objects (1 is the catalog), with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    start = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer, start)
    return bytes(out)


PAGE_OBJECTS = [
    b"<< /Type /Catalog /Pages 2 0 R >>",
    b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
    b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 300] >>",
]


def blank_pdf() -> bytes:
    return pdf_bytes(PAGE_OBJECTS)


def broken_page_pdf() -> bytes:
    """Two pages, the second of which is no page at all (its object is a font): PDFium cannot load it."""
    pages = b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>"
    return pdf_bytes([PAGE_OBJECTS[0], pages, PAGE_OBJECTS[2], b"<< /Type /Font /Subtype /Type1 >>"])


def encrypted_pdf() -> bytes:
    handler = b"<< /Filter /Standard /V 1 /R 2 /O <" + b"11" * 32 + b"> /U <" + b"22" * 32 + b"> /P -4 >>"
    trailer = b"/Encrypt 4 0 R /ID [<" + b"33" * 16 + b"> <" + b"33" * 16 + b">] "
    return pdf_bytes([*PAGE_OBJECTS, handler], trailer)


def truncated_pdf() -> bytes:
    data = SAMPLE_PDF.read_bytes()
    return data[: len(data) // 3]


def pdf_folder(folder: Path) -> Path:
    """reports/sample-pages.pdf (4 pages), then scans/encrypted.pdf and scans/truncated.pdf (one error row each)."""
    (folder / "reports").mkdir(parents=True)
    (folder / "scans").mkdir()
    (folder / "reports" / "sample-pages.pdf").write_bytes(SAMPLE_PDF.read_bytes())
    (folder / "scans" / "encrypted.pdf").write_bytes(encrypted_pdf())
    (folder / "scans" / "truncated.pdf").write_bytes(truncated_pdf())
    return folder
