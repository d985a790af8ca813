"""Renders N synthetic 1540x2000 JPEG pages of text into a local `datasets` folder (save_to_disk).

    python3 bench/gpu/make_pages.py OUT_DIR [--pages 192] [--workers 8]

Every page is different (its number, a seeded shuffle of words, a table whose cells differ), so no cache in vLLM
(multimodal inputs are hashed) can serve one page for another. The `image` column is a `datasets.Image` feature
holding JPEG bytes, which the recipes pass through to the server untouched, as they do real scans. DejaVu fonts
are used where installed, else Pillow's built-in scalable font; no network.
"""

from __future__ import annotations

import argparse
import io
import random
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 1540, 2000
MARGIN = 110
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
TEXT = (
    "the water table of the valley rose slowly after the spring floods and the survey team measured each well "
    "twice a week recording depth temperature and conductivity in the field book before sending the results to "
    "the regional office where analysts compared them with the readings of previous years and drafted a short "
    "report for the council meeting which approved the budget for new loggers pumps and a second vehicle"
)
WORDS = TEXT.split()


def font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSerif.ttf"
    try:
        return ImageFont.truetype(str(FONT_DIR / name), size)
    except OSError:
        return ImageFont.load_default(size=size)


def render(index: int, quality: int) -> bytes:
    rng = random.Random(index)
    page = Image.new("RGB", (WIDTH, HEIGHT), (252, 251, 247))
    draw = ImageDraw.Draw(page)
    body, heading, small = font(30), font(52, bold=True), font(24)
    y = MARGIN
    draw.text(
        (MARGIN, y),
        f"Field report {index + 1:04d}: {' '.join(rng.sample(WORDS, 4)).title()}",
        font=heading,
        fill=(20, 20, 20),
    )
    y += 90
    draw.line((MARGIN, y, WIDTH - MARGIN, y), fill=(60, 60, 60), width=3)
    y += 30
    while y < HEIGHT - 2 * MARGIN:
        kind = rng.random()
        if kind < 0.12 and y < HEIGHT - 600:
            y = table(draw, rng, y, small)
        elif kind < 0.2:
            draw.text(
                (MARGIN, y), " ".join(rng.sample(WORDS, 5)).capitalize(), font=font(36, bold=True), fill=(30, 30, 30)
            )
            y += 60
        else:
            for _ in range(rng.randint(3, 7)):
                line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(9, 12)))
                draw.text((MARGIN, y), line.capitalize(), font=body, fill=(25, 25, 25))
                y += 42
                if y >= HEIGHT - 2 * MARGIN:
                    break
            y += 24
    draw.text((WIDTH // 2, HEIGHT - MARGIN // 2), f"- {index + 1} -", font=small, fill=(40, 40, 40), anchor="mm")
    buffer = io.BytesIO()
    page.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def table(draw: ImageDraw.ImageDraw, rng: random.Random, y: int, cell_font) -> int:
    columns, rows = 5, rng.randint(6, 12)
    width = (WIDTH - 2 * MARGIN) // columns
    for r in range(rows + 1):
        for c in range(columns):
            x0, y0 = MARGIN + c * width, y + r * 44
            draw.rectangle((x0, y0, x0 + width, y0 + 44), outline=(90, 90, 90), width=1)
            text = rng.choice(WORDS).title() if r == 0 else f"{rng.uniform(0, 999):.2f}"
            draw.text((x0 + 10, y0 + 9), text, font=cell_font, fill=(20, 20, 20))
    return y + (rows + 1) * 44 + 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="dataset folder to write (save_to_disk)")
    parser.add_argument("--pages", type=int, default=192)
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality (default: 90)")
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()

    import datasets

    started = time.monotonic()
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        pages = list(pool.map(render, range(args.pages), [args.quality] * args.pages, chunksize=4))
    features = datasets.Features({"id": datasets.Value("string"), "image": datasets.Image()})
    dataset = datasets.Dataset.from_dict(
        {
            "id": [f"page-{i + 1:04d}" for i in range(args.pages)],
            "image": [{"bytes": data, "path": None} for data in pages],
        },
        features=features,
    )
    dataset.save_to_disk(str(args.out))
    total = sum(len(p) for p in pages)
    print(
        f"{args.out}: {args.pages} pages of {WIDTH}x{HEIGHT} JPEG, {total / 1e6:.1f} MB, "
        f"{time.monotonic() - started:.1f} s"
    )


if __name__ == "__main__":
    main()
