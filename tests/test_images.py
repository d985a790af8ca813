"""Image preparation: pass-through of good pages byte for byte, one decode for the rest, a reason for bad ones."""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from ocr_core.inputs import source as source_module
from ocr_core.inputs.images import BadImage, cell_bytes, placeholder_part, prepare_image
from ocr_core.inputs.source import InputSelection, load_source

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
        assert prepared.data == data, page.name


def test_oversized_page_is_downscaled_never_upscaled():
    big = encode(Image.new("RGB", (3000, 1500), "white"), "JPEG")
    prepared = prepare_image(big, max_side=2048)
    assert prepared.data != big
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
    data = encode(image, fmt)
    prepared = prepare_image(data)
    assert prepared.data != data
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


def gray_levels(prepared) -> tuple[int, int]:
    return Image.open(io.BytesIO(prepared.data)).convert("L").getextrema()


@pytest.mark.parametrize(
    ("mode", "ink", "paper"),
    [("F", 0.0, 1.0), ("I", 0, 255), ("I", 0, 1), ("F", 0.0, 255.0), ("I", -1000, 1000)],
    ids=["float-0-1", "int32-0-255", "int32-mask", "float-0-255", "int32-signed"],
)
def test_float_and_32bit_pages_keep_their_contrast(mode, ink, paper):
    page = Image.new(mode, (40, 40), paper)
    page.paste(ink, (0, 0, 20, 40))
    dark, light = gray_levels(prepare_image(encode(page, "TIFF")))
    assert dark < 10
    assert light > 245


def test_float_page_keeps_its_grey_levels_on_the_usual_scale():
    page = Image.new("F", (40, 40), 0.9)
    page.paste(0.5, (0, 0, 20, 40))
    dark, light = gray_levels(prepare_image(encode(page, "TIFF")))
    assert abs(dark - 128) <= 2
    assert abs(light - 230) <= 2


def test_16bit_pages_keep_their_16bit_scale():
    page = Image.new("I;16", (40, 40), 65535)
    page.paste(Image.new("I;16", (20, 40), 32768), (0, 0))
    dark, light = gray_levels(prepare_image(encode(page, "PNG")))
    assert abs(dark - 128) <= 2
    assert light == 255


def frames_of(mode: str) -> list[Image.Image]:
    return [Image.new(mode, (40, 30), value) for value in (0, 90, 160, 200, 250)]


@pytest.mark.parametrize(
    ("fmt", "mode"),
    [("TIFF", "L"), ("GIF", "L"), ("WEBP", "RGB"), ("PNG", "RGB")],
    ids=["multipage-tiff", "gif", "animated-webp", "apng"],
)
def test_multi_frame_images_send_frame_one_and_say_so(fmt, mode):
    first, *rest = frames_of(mode)
    data = encode(first, fmt, save_all=True, append_images=rest, lossless=True)
    prepared = prepare_image(data)
    assert prepared.note == "only frame 1 of 5 of this multi-frame image was read; split it into one row per page"
    assert prepared.mime == "image/jpeg"
    assert gray_levels(prepared)[1] < 10


def test_single_frame_pages_carry_no_note():
    assert prepare_image(encode(Image.new("RGB", (40, 30)), "PNG")).note is None
    assert prepare_image(encode(Image.new("L", (40, 30)), "TIFF")).note is None


def test_a_side_beyond_the_jpeg_limit_is_fitted_into_it():
    strip = Image.new("P", (20, 70_000), 1)
    prepared = prepare_image(encode(strip, "PNG"))
    assert prepared.mime == "image/jpeg"
    assert max(prepared.width, prepared.height) <= 65_500
    assert Image.open(io.BytesIO(prepared.data)).size == (prepared.width, prepared.height)


def corrupted(data: bytes, rng: random.Random) -> bytes:
    broken = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        broken[rng.randrange(len(broken))] = rng.randrange(256)
    return bytes(broken[: rng.randrange(1, len(broken))] if rng.random() < 0.3 else broken)


@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.filterwarnings("ignore")
def test_corrupted_bytes_only_ever_give_bad_image(verify):
    """Seeded corruptions of every format a dataset may hold: each one is a page or a BadImage, never a crash."""
    noise = Image.effect_noise((64, 48), 60)
    pages = [
        encode(noise.convert("L"), "PNG"),
        encode(noise.convert("RGBA"), "PNG"),
        encode(noise.convert("P"), "GIF", save_all=True, append_images=[noise.convert("P")] * 2),
        encode(noise.convert("L"), "TIFF"),
        encode(noise.convert("I;16"), "TIFF"),
        encode(noise.convert("RGB"), "BMP"),
        encode(noise.convert("RGB"), "WEBP"),
        encode(noise.convert("RGB"), "JPEG"),
        encode(noise.convert("RGBA"), "ICO"),
        encode(noise.convert("RGB"), "TGA"),
    ]
    rng = random.Random(7)
    outcomes = {"page": 0, "bad": 0}
    for data in pages:
        for _ in range(150):
            try:
                prepare_image(corrupted(data, rng), verify=verify)
                outcomes["page"] += 1
            except BadImage:
                outcomes["bad"] += 1
    assert outcomes["bad"] > 100
    assert outcomes["page"] > 100


def test_a_relative_path_that_names_no_file_says_why():
    with pytest.raises(BadImage, match="relative"):
        cell_bytes({"bytes": None, "path": "pages/no-such-page-here.png"})


def write_pages(folder: Path) -> None:
    (folder / "pages").mkdir(parents=True)
    for name, shade in (("white.png", 255), ("black.png", 0)):
        Image.new("L", (30, 20), shade).save(folder / "pages" / name)


RELATIVE_PATHS = ["pages/white.png", "pages/black.png"]


def saved_dataset(folder: Path) -> None:
    datasets.Dataset.from_dict({"image": RELATIVE_PATHS}).save_to_disk(str(folder))


def parquet_dataset(folder: Path) -> None:
    """Image cells as {bytes: None, path}, the shape `datasets` gives an Image column that stores paths only."""
    cells = [{"bytes": None, "path": path} for path in RELATIVE_PATHS]
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"image": pa.array(cells, type=image_type)}), folder / "train.parquet")


@pytest.mark.parametrize("build", [saved_dataset, parquet_dataset], ids=["saved", "parquet"])
def test_relative_paths_of_a_local_dataset_are_read_beside_it(tmp_path, monkeypatch, build):
    """The working folder holds a different pages/white.png; the dataset's own pages must be the ones read."""
    dataset_folder = tmp_path / "dataset"
    build(dataset_folder)
    write_pages(dataset_folder)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "pages").mkdir(parents=True)
    Image.new("L", (30, 20), 128).save(elsewhere / "pages" / "white.png")
    monkeypatch.chdir(elsewhere)
    source = load_source(InputSelection(str(dataset_folder)))
    images = [prepare_image(cell_bytes(row.cell)) for row in source.rows(set())]
    assert [gray_levels(image) for image in images] == [(255, 255), (0, 0)]


def hub_dataset(monkeypatch, tmp_path: Path, cells: list) -> None:
    """`someone/scans` opens as a Hub dataset whose image cells give these paths (no bytes); the Hub cache is
    under tmp_path, so only its `datasets--someone--scans` folder holds the dataset's own files."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"image": pa.array([{"bytes": None, "path": path} for path in cells], type=image_type)})
    dataset = datasets.Dataset(table).cast_column("image", datasets.Image(decode=False))
    monkeypatch.setattr(source_module, "open_dataset", lambda *args, **kwargs: dataset)


def test_paths_in_a_hub_dataset_never_read_files_of_the_jobs_machine(tmp_path, monkeypatch):
    """Absolute, `~` and relative paths outside the dataset: each row fails alone, and no byte of the file is read."""
    secret = tmp_path / "secret.png"
    Image.new("L", (30, 20), 7).save(secret)
    home = tmp_path / "home"
    home.mkdir()
    Image.new("L", (30, 20), 7).save(home / "key.png")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    own = tmp_path / "hub-cache" / "datasets--someone--scans" / "snapshots" / "abc" / "pages"
    own.mkdir(parents=True)
    Image.new("L", (30, 20), 255).save(own / "white.png")
    escape = str(own / ".." / ".." / ".." / ".." / ".." / "secret.png")
    hub_dataset(monkeypatch, tmp_path, [str(secret), "~/key.png", "secret.png", escape, str(own / "white.png")])
    source = load_source(InputSelection("someone/scans"))
    cells = [row.cell for row in source.rows(set())]
    for cell in cells[:4]:
        with pytest.raises(BadImage, match="outside"):
            cell_bytes(cell)
    assert gray_levels(prepare_image(cell_bytes(cells[4]))) == (255, 255), "the dataset's own file is read"


def test_a_folder_says_once_which_files_it_skips(tmp_path, capsys):
    """Files neither images nor PDFs were left out of a folder input without a word."""
    pages = Path(__file__).resolve().parents[1] / "samples" / "pages"
    folder = tmp_path / "scans"
    shutil.copytree(pages, folder)
    (folder / "notes.txt").write_text("scanned on Tuesday")
    (folder / "box" / "index.docx").parent.mkdir()
    (folder / "box" / "index.docx").write_bytes(b"PK")
    (folder / ".hidden.txt").write_text("an editor's file")
    capsys.readouterr()
    source = load_source(InputSelection(str(folder)))
    err = capsys.readouterr().err
    assert len(source.ids) == 12
    assert err.count("skipping") == 1
    assert "skipping 2 file(s) that are neither images nor PDFs, e.g. box/index.docx" in err


def test_a_folder_of_pdfs_says_which_files_it_skips(tmp_path, capsys):
    folder = tmp_path / "scans"
    folder.mkdir()
    (folder / "letters.pdf").write_bytes(
        (Path(__file__).resolve().parents[1] / "samples/pdf/sample-pages.pdf").read_bytes()
    )
    (folder / "notes.txt").write_text("scanned on Tuesday")
    capsys.readouterr()
    load_source(InputSelection(str(folder)))
    assert "skipping 1 file(s) that are neither images nor PDFs, e.g. notes.txt" in capsys.readouterr().err
