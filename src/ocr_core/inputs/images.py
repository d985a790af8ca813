"""Turns one dataset image cell into the bytes a request carries.

Most scanned pages are already JPEG, PNG or WebP of a sane size: those bytes go to the server untouched, because
decoding and re-encoding a 3 MP page costs tens of milliseconds of CPU that the driver needs for keeping pages in
flight. Everything else is decoded, converted and resized once, here. Whatever a page's own bytes make Pillow
raise becomes a `BadImage`, so one odd page is one error row and never the end of the job.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import struct
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

URL_PLACEHOLDER = "@@page-image-data-url@@"
MIME_BY_FORMAT = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}
PASS_THROUGH_MODES = {"RGB", "L"}
EXIF_ORIENTATION = 0x0112
REENCODE_QUALITY = 95
JPEG_MAX_SIDE = 65_500
USUAL_CEILINGS = (1.0, 255.0, 65_535.0)
IMAGE_DATA_ERRORS = (
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    struct.error,
    ArithmeticError,
    IndexError,
    KeyError,
    TypeError,
)


class BadImage(ValueError):
    """A row whose image cannot be sent; its error column reads `kind: message`."""

    kind = "bad image"


@dataclass(frozen=True)
class PreparedImage:
    data: bytes
    mime: str
    width: int
    height: int
    note: str | None = None
    """Why the text may be incomplete although the page was read (a multi-frame file); the row keeps its text."""

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def content_part(self) -> dict:
        return {"type": "image_url", "image_url": {"url": self.data_url()}}

    def json_with_image(self, body: dict) -> bytes:
        """`body` as JSON bytes, its placeholder URL replaced by the image's data URL.

        json.dumps would scan the megabyte of base64 for characters to escape, none of which base64 has; splicing
        the bytes in instead halves the CPU a page costs the driver.
        """
        encoded = json.dumps(body).encode()
        url = b"data:" + self.mime.encode() + b";base64," + base64.b64encode(self.data)
        return encoded.replace(URL_PLACEHOLDER.encode(), url, 1)


@dataclass(frozen=True)
class OutsidePath:
    """A path cell of a Hub dataset that names a file outside the dataset's own files (an absolute or `~` path, a
    relative one, or one that climbs out with `..`): reading it would OCR whatever the job's machine holds there and
    publish it to OUTPUT, so the row fails instead, and the file is never opened."""

    path: str
    dataset: str

    def reason(self) -> str:
        return (
            f"path {self.path!r} in {self.dataset} lies outside the dataset's own files; a Hub dataset's paths are "
            "read only inside its own files, never from the job's machine: carry the image (or PDF) bytes in the "
            "dataset"
        )


@dataclass(frozen=True)
class ImageFrame:
    """One page of a multi-page image file (a TIFF from a scanner's feeder): its path, which frame (from 0), and
    the name messages use. Each frame is a row of its own, as each page of a PDF is."""

    path: str
    frame: int
    name: str


def prepare_frame(page: ImageFrame, max_side: int | None, max_pixels: int | None) -> PreparedImage:
    """The frame decoded and written as a JPEG, so the server sees this page and no other; Pillow reads only the
    frames up to it. A frame that cannot be read is that row's BadImage, naming the file and page."""
    try:
        with Image.open(page.path) as image:
            image.seek(page.frame)
            width, height = image.size
            return reencode(image, target_scale(width, height, max_side, max_pixels), None)
    except Image.DecompressionBombError as exc:
        raise BadImage(f"page {page.frame} of {page.name} is too large to decode safely: {exc}") from exc
    except (UnidentifiedImageError, *IMAGE_DATA_ERRORS) as exc:
        raise BadImage(f"page {page.frame} of {page.name} cannot be read: {type(exc).__name__}: {exc}") from exc


def with_note(error: str | None, note: str | None) -> str | None:
    """A row's error column once its image's note (e.g. frames not read) is added; its text stays."""
    return "; ".join(part for part in (error, note) if part) or None


def placeholder_part() -> dict:
    """The image part of a request body before `PreparedImage.json_with_image` fills it in."""
    return {"type": "image_url", "image_url": {"url": URL_PLACEHOLDER}}


def cell_bytes(cell: object) -> bytes:
    """Reads an undecoded `datasets` Image cell ({"bytes", "path"}), a path string or raw bytes."""
    if cell is None:
        raise BadImage("image cell is empty (None)")
    if isinstance(cell, OutsidePath):
        raise BadImage(cell.reason())
    if isinstance(cell, (bytes, bytearray, memoryview)):
        return bytes(cell)
    if isinstance(cell, dict):
        if cell.get("bytes") is not None:
            return bytes(cell["bytes"])
        if cell.get("path"):
            return read_image_file(cell["path"])
        raise BadImage("image cell has neither bytes nor a path")
    if isinstance(cell, str):
        return read_image_file(cell)
    if isinstance(cell, Image.Image):
        buffer = io.BytesIO()
        cell.save(buffer, format="PNG")
        return buffer.getvalue()
    raise BadImage(f"image cell has an unsupported type: {type(cell).__name__}")


def read_image_file(path: str) -> bytes:
    """Reads a path as given; the source has already anchored a local dataset's relative paths to its folder."""
    local = os.path.expanduser(path)
    if not os.path.isabs(local) and not os.path.exists(local):
        raise BadImage(
            f"image path {path!r} is relative and names no file here: a Hub dataset must carry the image bytes "
            "(an Image column), not paths to files of its own"
        )
    try:
        with open(local, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise BadImage(f"cannot read image file {path!r}: {exc.strerror or exc}") from exc


def target_scale(width: int, height: int, max_side: int | None, max_pixels: int | None) -> float:
    """The downscale factor that fits both bounds; never above 1, so pages are never upscaled."""
    scale = 1.0
    if max_side:
        scale = min(scale, max_side / max(width, height))
    if max_pixels:
        scale = min(scale, math.sqrt(max_pixels / (width * height)))
    return scale


def open_image(data: bytes) -> Image.Image:
    if not data:
        raise BadImage("image bytes are empty")
    try:
        return Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise BadImage(f"image is too large to decode safely: {exc}") from exc
    except UnidentifiedImageError as exc:
        raise BadImage(
            f"not a readable image: in no image format Pillow reads (its bytes begin {data[:16]!r})"
        ) from exc
    except IMAGE_DATA_ERRORS as exc:
        raise BadImage(f"not a readable image: {exc}") from exc


def prepare_image(
    data: bytes,
    max_side: int | None = None,
    max_pixels: int | None = None,
    verify: bool = False,
) -> PreparedImage:
    """Passes acceptable bytes through; decodes the rest once. `verify` fully decodes pass-through pages too.

    Pillow's decoders raise many kinds of error on malformed files (OSError, SyntaxError, struct.error, ...) at any
    step, not only when opening: all of them mean this page is unreadable, so all of them become a BadImage.
    """
    try:
        return prepare_opened(open_image(data), data, max_side, max_pixels, verify)
    except BadImage:
        raise
    except Image.DecompressionBombError as exc:
        raise BadImage(f"image is too large to decode safely: {exc}") from exc
    except IMAGE_DATA_ERRORS as exc:
        raise BadImage(f"image data is broken: {type(exc).__name__}: {exc}") from exc


def prepare_opened(
    image: Image.Image, data: bytes, max_side: int | None, max_pixels: int | None, verify: bool
) -> PreparedImage:
    width, height = image.size
    if width < 1 or height < 1:
        raise BadImage(f"image has no pixels ({width}x{height})")
    scale = target_scale(width, height, max_side, max_pixels)
    orientation = image.getexif().get(EXIF_ORIENTATION, 1)
    frames = getattr(image, "n_frames", 1)
    mime = MIME_BY_FORMAT.get(image.format or "")
    if mime and image.mode in PASS_THROUGH_MODES and scale >= 1.0 and orientation == 1 and frames == 1:
        if verify:
            image.load()
        return PreparedImage(data, mime, width, height)
    note = None
    if frames > 1:
        note = f"only frame 1 of {frames} of this multi-frame image was read; split it into one row per page"
    return reencode(image, scale, note)


def reencode(image: Image.Image, scale: float, note: str | None) -> PreparedImage:
    """Decodes at reduced size where the codec allows it, fixes orientation and mode, and writes a JPEG.

    A multi-frame file is re-encoded too, so the server sees exactly the one frame that `note` says was read.
    """
    width, height = image.size
    if image.getexif().get(EXIF_ORIENTATION, 1) in (5, 6, 7, 8):
        width, height = height, width
    scale = min(scale, JPEG_MAX_SIDE / max(width, height))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    if scale < 1.0:
        image.draft("RGB", size)
    image.load()
    image = to_rgb_or_gray(ImageOps.exif_transpose(image))
    if image.size != size:
        image = image.resize(size, Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=REENCODE_QUALITY)
    return PreparedImage(buffer.getvalue(), "image/jpeg", image.width, image.height, note=note)


def to_rgb_or_gray(image: Image.Image) -> Image.Image:
    """Flattens transparency onto white (scans are paper) and maps every other mode to RGB or L."""
    if image.mode in PASS_THROUGH_MODES:
        return image
    if image.mode.startswith("I") or image.mode == "F":
        return to_gray8(image)
    if "A" in image.mode or "transparency" in image.info:
        rgba = image.convert("RGBA")
        page = Image.new("RGB", rgba.size, (255, 255, 255))
        page.paste(rgba, mask=rgba.getchannel("A"))
        return page
    if image.mode == "1":
        return image.convert("L")
    return image.convert("RGB")


def to_gray8(image: Image.Image) -> Image.Image:
    """Maps a 16-bit, 32-bit integer or float page to 8-bit gray.

    16-bit pages have a fixed scale. 32-bit integer and float pages have none: a float page usually holds 0..1, an
    integer one 0..255 or a 0/1 mask, so their values are read on the smallest of those usual scales that holds
    them, or on their own min..max when none does (values above 65535, or below 0). Stretching every page to
    min..max instead would turn the faint noise of a near-blank page into black speckles.
    """
    if image.mode.startswith("I;16"):
        return image.convert("I").point(lambda value: value / 256).convert("L")
    values = image if image.mode == "F" else image.convert("F")
    low, high = values.getextrema()
    usual = next((ceiling for ceiling in USUAL_CEILINGS if low >= 0 and high <= ceiling), None)
    floor, ceiling = (0.0, usual) if usual is not None else (low, high)
    gain = 255.0 / ((ceiling - floor) or 1.0)
    return values.point(lambda value: value * gain - floor * gain).convert("L")
