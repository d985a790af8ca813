"""Which files of a local INPUT are pages: the run decides, not the `datasets` loader's guess by extension.

A file is an input of its own (an image: one page; a PDF: its pages; a multi-page TIFF: its frames); a folder that
holds no data files is its image and PDF files, whatever else lies beside them (counted and left out), in the order
of their relative paths sorted as strings. Rows of image files keep their image; a PDF page or TIFF frame is named
by `source_file` and `page_index`. Ids are the paths (with `#p<page>`), so a rerun resumes every row. Loading is
tested directly, the runs against the fake vLLM server.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from ocr_core.inputs.pdf import prepare_page
from ocr_core.inputs.source import InputSelection, load_source
from tests.test_pdf import SMALL
from tests.test_resume_publish import run_main, served
from tests.test_server_recipes import load_output
from tests.testbed.fake_server import fake_server
from tests.testbed.pdfs import SAMPLE_PAGES, SAMPLE_PDF

SCRIPT = "lighton-ocr3-saturate.py"


def page(path: Path, shade: int, size: tuple[int, int] = (120, 160)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L", size, shade).save(path)
    return path


def tiff(path: Path, shades: list[int]) -> Path:
    """A multi-page TIFF, one flat gray page per shade: what a scanner's feeder writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = [Image.new("L", (120, 160), shade) for shade in shades]
    frames[0].save(path, save_all=True, append_images=frames[1:])
    return path


def shade_of(prepared) -> tuple[int, int]:
    return Image.open(io.BytesIO(prepared.data)).convert("L").getextrema()


def test_a_single_image_file_is_a_one_page_input_and_its_rerun_resumes(tmp_path, capsys):
    """`make demo INPUT=./page.png` ended exit 1, "internal error", and the rerun failed the same way."""
    scan = page(tmp_path / "page.png", 30)
    out = tmp_path / "out"
    with fake_server() as server:
        argv = [str(scan), str(out), *served(server)]
        code, summary, err = run_main(SCRIPT, argv, capsys)
        assert (code, summary.get("rows"), summary.get("errors")) == (0, 1, 0), err[-2000:]
        code, summary, err = run_main(SCRIPT, argv, capsys)
        assert (code, summary["resumed"], summary["done_this_run"]) == (0, 1, 0), err[-2000:]
    output = load_output(out)
    assert output["source_file"] == ["page.png"] and output["markdown"][0]
    assert output[0]["image"] is not None


def test_a_folder_of_images_with_old_ocr_text_beside_each_reads_the_images(tmp_path, capsys):
    """The loader picked its text builder (more .txt than any image type) and the run asked for --image-column."""
    folder = tmp_path / "scans"
    for number, suffix in enumerate(("png", "jpg", "png")):
        page(folder / f"p{number}.{suffix}", 50 * number)
        (folder / f"p{number}.txt").write_text(f"old OCR of page {number}")
    capsys.readouterr()
    source = load_source(InputSelection(str(folder)))
    assert source.ids == ["p0.png", "p1.jpg", "p2.png"]
    assert source.dataset["source_file"] == source.ids
    err = capsys.readouterr().err
    assert "skipping 3 file(s) that are neither images nor PDFs, e.g. p0.txt" in err
    shades = [shade_of(prepare_page(row.cell, None, None)) for row in source.rows(set())]
    assert shades == [(0, 0), (50, 50), (100, 100)]


def test_every_frame_of_a_multi_page_tiff_is_a_page(tmp_path):
    """A three-page TIFF gave one row (its first page, marked as an error) where a PDF beside it gave its pages."""
    folder = tmp_path / "scans"
    tiff(folder / "feeder.tif", [0, 128, 255])
    (folder / "letters.pdf").write_bytes(SAMPLE_PDF.read_bytes())
    source = load_source(InputSelection(str(folder)), pdf_size=SMALL)
    pdf_ids = [f"letters.pdf#p{number}" for number in range(SAMPLE_PAGES)]
    assert source.ids == ["feeder.tif#p0", "feeder.tif#p1", "feeder.tif#p2", *pdf_ids]
    assert source.dataset["page_index"] == [0, 1, 2, *range(SAMPLE_PAGES)]
    prepared = [prepare_page(row.cell, None, None) for row in source.rows(set())][:3]
    assert [shade_of(frame) for frame in prepared] == [(0, 0), (128, 128), (255, 255)]
    assert [frame.note for frame in prepared] == [None] * 3
    alone = load_source(InputSelection(str(folder / "feeder.tif")))
    assert alone.ids == ["feeder.tif#p0", "feeder.tif#p1", "feeder.tif#p2"], "a TIFF given as INPUT is its frames"


def test_a_one_page_tiff_is_one_image_row(tmp_path):
    folder = tmp_path / "scans"
    tiff(folder / "single.tiff", [90])
    source = load_source(InputSelection(str(folder)))
    assert source.ids == ["single.tiff"] and source.dataset["page_index"] == [None]


def test_a_folder_of_images_tiffs_and_pdfs_keeps_each_image_rows_image_and_resumes(tmp_path, capsys):
    """A PDF in the folder dropped the `image` column for every row, the image files' rows included."""
    folder, out = tmp_path / "scans", tmp_path / "out"
    page(folder / "cover.png", 40)
    tiff(folder / "feeder.tiff", [10, 200])
    (folder / "letters.pdf").write_bytes(SAMPLE_PDF.read_bytes())
    (folder / "notes.txt").write_text("box 4")
    with fake_server() as server:
        argv = [str(folder), str(out), *served(server), "--pdf-longest-edge", "256"]
        code, summary, err = run_main(SCRIPT, argv, capsys)
        assert (code, summary.get("rows"), summary.get("errors")) == (0, 3 + SAMPLE_PAGES, 0), err[-2000:]
        code, summary, _ = run_main(SCRIPT, argv, capsys)
        assert (code, summary["resumed"], summary["done_this_run"]) == (0, 3 + SAMPLE_PAGES, 0)
    output = load_output(out)
    assert output["source_file"] == ["cover.png", "feeder.tiff", "feeder.tiff", *["letters.pdf"] * SAMPLE_PAGES]
    assert output["page_index"] == [None, 0, 1, *range(SAMPLE_PAGES)]
    images = output["image"]
    assert images[0] is not None and images[0].size == (120, 160), "the image file's row lost its image"
    assert images[1:] == [None] * (2 + SAMPLE_PAGES), "a page rendered or cut from a file holds no image of its own"
    assert all(output["markdown"])


def test_rows_follow_the_relative_paths_sorted_as_strings(tmp_path):
    """Rows followed path components (`a/b.png` before `a-b.png`), not the names as `sorted()` or `ls` give them."""
    folder = tmp_path / "scans"
    for name in ("a/b.png", "a.png", "a-b.png", "B.png"):
        page(folder / name, 60)
    assert load_source(InputSelection(str(folder))).ids == ["B.png", "a-b.png", "a.png", "a/b.png"]


@pytest.mark.parametrize("name", ["page.docx", "notes.txt"])
def test_a_file_that_is_neither_an_image_nor_a_pdf_is_refused_with_what_would_work(tmp_path, name):
    from ocr_core.inputs.addresses import InputError

    (tmp_path / name).write_text("not a page")
    with pytest.raises(InputError, match="neither an image nor a PDF"):
        load_source(InputSelection(str(tmp_path / name)))


def test_a_folder_of_images_alone_records_no_pdf_render_size(tmp_path, capsys):
    """Only a folder holding PDFs records how they are rendered: another --pdf-longest-edge still resumes images."""
    folder, out = tmp_path / "scans", tmp_path / "out"
    page(folder / "one.png", 20)
    with fake_server() as server:
        argv = [str(folder), str(out), *served(server)]
        assert run_main(SCRIPT, argv, capsys)[0] == 0
        code, summary, err = run_main(SCRIPT, [*argv, "--pdf-longest-edge", "300"], capsys)
    assert (code, summary.get("resumed")) == (0, 1), err[-2000:]


def test_a_frame_that_cannot_be_read_fails_alone_naming_file_and_page(tmp_path):
    from ocr_core.inputs.images import BadImage, ImageFrame

    path = tiff(tmp_path / "feeder.tif", [0, 255])
    assert shade_of(prepare_page(ImageFrame(str(path), 1, "feeder.tif"), None, None)) == (255, 255)
    with pytest.raises(BadImage, match=r"page 5 of feeder\.tif cannot be read"):
        prepare_page(ImageFrame(str(path), 5, "feeder.tif"), None, None)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(BadImage, match=r"page 1 of feeder\.tif cannot be read"):
        prepare_page(ImageFrame(str(path), 1, "feeder.tif"), None, None)
