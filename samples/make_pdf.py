"""Write the bundled sample PDF: four of the sample pages as one multi-page, scanned-style PDF.

PDF input is tested and demonstrated on this file (`samples/pdf/sample-pages.pdf`): four pages, portrait and
landscape, each an embedded JPEG the way a scanner writes them, small enough to keep in the repository. The page
images come from `samples/pages/` (made by make_samples.py); the dates are fixed, so a rerun writes identical bytes.

Usage: python samples/make_pdf.py [--out FILE]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
PAGES = ("page-01-report.png", "page-03-water-table.png", "page-06-invoice.webp", "page-11-article.jpg")
LONGEST_SIDE = 1100
DPI = 100.0
QUALITY = 75
FIXED_DATE = time.strptime("2024-06-01", "%Y-%m-%d")


def page(name: str) -> Image.Image:
    image = Image.open(HERE / "pages" / name).convert("RGB")
    image.thumbnail((LONGEST_SIDE, LONGEST_SIDE), Image.Resampling.LANCZOS)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "pdf" / "sample-pages.pdf")
    args = parser.parse_args()
    first, *rest = (page(name) for name in PAGES)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    first.save(
        args.out,
        format="PDF",
        save_all=True,
        append_images=rest,
        resolution=DPI,
        quality=QUALITY,
        title="vLLM OCR sample pages",
        creationDate=FIXED_DATE,
        modDate=FIXED_DATE,
    )
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {len(PAGES)} pages)")


if __name__ == "__main__":
    main()
