"""Image preparation: pass-through of good pages byte for byte, one decode for the rest, a reason for bad ones."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from ocr_core.images import BadImage, cell_bytes, placeholder_part, prepare_image

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "pages"


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def test_sample_pages_pass_through_unchanged():
    pages = sorted(SAMPLES.iterdir())
    assert len(pages) >= 12
    for page in pages:
        data = page.read_bytes()
        prepared = prepare_image(data, max_side=4096)
        assert prepared.passed_through, page.name
        assert prepared.data == data


def test_oversized_page_is_downscaled_never_upscaled():
    big = encode(Image.new("RGB", (3000, 1500), "white"), "JPEG")
    prepared = prepare_image(big, max_side=2048)
    assert not prepared.passed_through
    assert (prepared.width, prepared.height) == (2048, 1024)
    small = encode(Image.new("RGB", (600, 400), "white"), "JPEG")
    assert prepare_image(small, max_side=2048).data == small


def test_max_pixels_bounds_the_area():
    data = encode(Image.new("L", (4000, 3000), 255), "PNG")
    prepared = prepare_image(data, max_pixels=3_000_000)
    assert prepared.width * prepared.height <= 3_000_000
    assert abs(prepared.width / prepared.height - 4 / 3) < 0.01


@pytest.mark.parametrize(
    ("image", "fmt"),
    [
        (Image.new("CMYK", (80, 60), (0, 0, 0, 0)), "JPEG"),
        (Image.new("RGBA", (80, 60), (255, 0, 0, 0)), "PNG"),
        (Image.new("LA", (80, 60), (10, 255)), "PNG"),
        (Image.new("I;16", (80, 60), 40000), "PNG"),
        (Image.new("1", (80, 60), 1), "PNG"),
        (Image.new("P", (80, 60), 3), "PNG"),
        (Image.new("RGB", (80, 60), "white"), "BMP"),
        (Image.new("RGB", (80, 60), "white"), "TIFF"),
    ],
    ids=["cmyk", "rgba", "la", "16bit", "bilevel", "palette", "bmp", "tiff"],
)
def test_unusual_modes_and_formats_become_jpeg(image, fmt):
    prepared = prepare_image(encode(image, fmt))
    assert not prepared.passed_through
    assert prepared.mime == "image/jpeg"
    decoded = Image.open(io.BytesIO(prepared.data))
    assert decoded.mode in ("RGB", "L")
    assert decoded.size == (80, 60)


def test_transparent_pixels_become_white_paper():
    prepared = prepare_image(encode(Image.new("RGBA", (20, 20), (0, 0, 0, 0)), "PNG"))
    assert Image.open(io.BytesIO(prepared.data)).convert("L").getpixel((10, 10)) > 250


def test_exif_rotation_is_applied():
    image = Image.new("RGB", (200, 100), "white")
    exif = Image.Exif()
    exif[0x0112] = 6
    prepared = prepare_image(encode(image, "JPEG", exif=exif))
    assert (prepared.width, prepared.height) == (100, 200)


@pytest.mark.parametrize(
    ("cell", "reason"),
    [
        (None, "empty"),
        ({"bytes": b"", "path": None}, "empty"),
        ({"bytes": None, "path": None}, "neither"),
        ({"bytes": b"not an image at all", "path": None}, "not a readable image"),
        ({"bytes": None, "path": "/nonexistent/page.png"}, "cannot read"),
        (42, "unsupported type"),
    ],
)
def test_bad_cells_give_a_reason(cell, reason):
    with pytest.raises(BadImage, match=reason):
        prepare_image(cell_bytes(cell))


def test_truncated_page_fails_when_verified():
    data = encode(Image.effect_noise((400, 400), 60).convert("RGB"), "JPEG")
    truncated = data[: len(data) // 3]
    with pytest.raises(BadImage, match="broken"):
        prepare_image(truncated, verify=True)


def test_data_url_carries_the_mime_type():
    data = encode(Image.new("RGB", (8, 8)), "PNG")
    part = prepare_image(data).content_part()
    assert part["type"] == "image_url"
    assert part["image_url"]["url"].startswith("data:image/png;base64,")


def test_spliced_body_equals_plain_json():
    data = (SAMPLES / "page-02-newsletter.jpg").read_bytes()
    prepared = prepare_image(data)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [placeholder_part(), {"type": "text", "text": "é"}]}],
    }
    spliced = json.loads(prepared.json_with_image(body))
    assert spliced["messages"][0]["content"][0] == prepared.content_part()
    assert spliced["messages"][0]["content"][1]["text"] == "é"
