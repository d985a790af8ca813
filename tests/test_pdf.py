"""PDF input: a PDF, a folder of PDFs, or a dataset column of PDFs becomes one row per page, rendered at the size
the model's card asks for; a damaged or encrypted PDF is one error row that says so; resume, shards and the
manifest work as for images. Rendering is tested directly, the run against the fake vLLM server, and once through
the real CPU engine (the tiny model, canary on: the no-false-alarm check, and the cost in the summary).
"""

from __future__ import annotations

import base64
import io
import sys
from concurrent.futures import ThreadPoolExecutor

import datasets
import pytest
from PIL import Image

from ocr_core.inputs.addresses import InputError
from ocr_core.inputs.files import page_files
from ocr_core.inputs.pdf import BadPdf, PdfPage, RenderSize, looks_like_pdf, prepare_page, render_scale, render_size
from ocr_core.inputs.source import InputSelection, load_source
from ocr_core.judging.canary import Canary, CanaryContext
from ocr_core.planning.plan_records import rules_of
from ocr_core.publishing.cost import JOB_PRICES_USD_PER_HOUR
from ocr_core.shapes.llm_batches import OfflineRunner
from ocr_core.shapes.tally import ProgressBar
from ocr_core.store.progress import ResultLog, read_results
from tests.test_offline_faults import FakeLLM, completion, recipe
from tests.test_resume_publish import run_main, served
from tests.test_server_recipes import FAST, load_output, run_recipe, summary_of
from tests.testbed.fake_server import fake_server
from tests.testbed.pdfs import SAMPLE_PAGES, SAMPLE_PDF, blank_pdf, broken_page_pdf, encrypted_pdf, pdf_folder
from tests.testbed.recipes import model_facts

SMALL = RenderSize(longest_edge=256)
FOLDER_IDS = [*(f"reports/sample-pages.pdf#p{page}" for page in range(SAMPLE_PAGES))]
FOLDER_IDS += ["scans/encrypted.pdf#p0", "scans/truncated.pdf#p0"]


def size_of(prepared) -> tuple[int, int]:
    return Image.open(io.BytesIO(prepared.data)).size


# ---- the render size ----


@pytest.mark.parametrize(("width", "height"), [(612, 792), (792, 612), (100, 3000)])
def test_a_longest_edge_is_met_exactly_whatever_the_page(width, height):
    scale = render_scale(width, height, RenderSize(longest_edge=2048), None, None)
    assert max(width, height) * scale == pytest.approx(2048)


def test_a_dpi_is_moved_into_the_pixel_band():
    band = RenderSize(dpi=200, min_pixels=200_704, max_pixels=8_294_400)
    assert render_scale(595, 842, band, None, None) == pytest.approx(200 / 72)
    assert 100 * 100 * render_scale(100, 100, band, None, None) ** 2 == pytest.approx(200_704)
    assert 2000 * 3000 * render_scale(2000, 3000, band, None, None) ** 2 == pytest.approx(8_294_400)


def test_the_models_image_limits_and_a_memory_ceiling_apply_on_top():
    assert 792 * render_scale(612, 792, RenderSize(longest_edge=4000), 2048, None) == pytest.approx(2048)
    poster = render_scale(5000, 5000, RenderSize(dpi=200), None, None)
    assert 5000 * 5000 * poster**2 == pytest.approx(40_000_000)


def test_the_command_line_size_replaces_the_cards():
    assert render_size({"dpi": 200, "min_pixels": 3136}, 300) == RenderSize(longest_edge=300)
    assert render_size({"dpi": 150}) == RenderSize(dpi=150)


def test_each_model_states_the_size_its_card_asks_for():
    assert render_size(model_facts("lighton_ocr3").pdf_render) == RenderSize(
        longest_edge=model_facts("lighton_ocr3").max_side
    )
    ovis = render_size(model_facts("ovis_ocr2").pdf_render)
    assert (ovis.min_pixels, ovis.max_pixels) == (448 * 448, model_facts("ovis_ocr2").max_pixels)
    assert render_size(model_facts("nanonets_ocr2").pdf_render).max_pixels == 12_845_056
    assert render_size(model_facts("hpd_parsing").pdf_render) == RenderSize(dpi=200)


# ---- reading PDFs into page rows ----


def test_a_single_pdf_is_one_row_per_page_at_the_asked_size():
    source = load_source(InputSelection(str(SAMPLE_PDF)), pdf_size=SMALL)
    assert source.ids == [f"sample-pages.pdf#p{page}" for page in range(SAMPLE_PAGES)]
    assert source.dataset["source_file"] == ["sample-pages.pdf"] * SAMPLE_PAGES
    assert source.dataset["page_index"] == list(range(SAMPLE_PAGES))
    sizes = [size_of(prepare_page(row.cell, None, None)) for row in source.rows(set())]
    assert [max(size) for size in sizes] == [256] * SAMPLE_PAGES
    assert sizes[1][0] > sizes[1][1] and sizes[0][0] < sizes[0][1], "page 2 is landscape, page 1 portrait"


def test_a_folder_names_pages_by_path_and_a_bad_pdf_is_one_error_row_that_says_why(tmp_path):
    folder = pdf_folder(tmp_path / "in")
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "skip.pdf").write_bytes(blank_pdf())
    source = load_source(InputSelection(str(folder)), pdf_size=SMALL)
    assert source.ids == FOLDER_IDS
    cells = {row.row_id: row.cell for row in source.rows(set())}
    with pytest.raises(BadPdf, match=r"scans/encrypted\.pdf is encrypted \(password protected\).*qpdf --decrypt"):
        prepare_page(cells["scans/encrypted.pdf#p0"], None, None)
    with pytest.raises(BadPdf, match=r"scans/truncated\.pdf cannot be opened as a PDF .* damaged"):
        prepare_page(cells["scans/truncated.pdf#p0"], None, None)
    with pytest.raises(BadPdf, match="has no page 9"):
        prepare_page(PdfPage(SAMPLE_PDF.read_bytes(), 9, "sample.pdf", SMALL), None, None)


def test_a_page_that_cannot_be_rendered_fails_alone(tmp_path):
    (tmp_path / "two.pdf").write_bytes(broken_page_pdf())
    first, second = (
        row.cell for row in load_source(InputSelection(str(tmp_path / "two.pdf")), pdf_size=SMALL).rows(set())
    )
    assert max(size_of(prepare_page(first, None, None))) == 256
    with pytest.raises(BadPdf, match=r"page 1 of two\.pdf cannot be rendered"):
        prepare_page(second, None, None)


def test_a_folder_with_data_files_is_a_dataset_not_a_pile_of_pdfs(tmp_path):
    (tmp_path / "a.pdf").write_bytes(blank_pdf())
    assert page_files(tmp_path) is not None
    (tmp_path / "train.parquet").write_bytes(b"")
    assert page_files(tmp_path) is None


def pdf_dataset(folder, cells: list, feature) -> str:
    features = datasets.Features({"doc": datasets.Value("string"), "pdf": feature})
    datasets.Dataset.from_dict({"doc": ["first", "second"], "pdf": cells}, features=features).save_to_disk(str(folder))
    return str(folder)


def test_a_dataset_column_of_pdf_bytes_keeps_its_other_columns(tmp_path):
    cells = [{"bytes": SAMPLE_PDF.read_bytes(), "path": None}, {"bytes": blank_pdf(), "path": "blank.pdf"}]
    source = load_source(
        InputSelection(pdf_dataset(tmp_path / "in", cells, datasets.Pdf()), image_column="pdf"), pdf_size=SMALL
    )
    assert source.ids == [*(f"train-0#p{page}" for page in range(SAMPLE_PAGES)), "train-1#p0"]
    assert source.dataset.column_names == ["doc", "source_file", "page_index"]
    assert source.dataset["doc"] == ["first"] * SAMPLE_PAGES + ["second"]
    assert source.dataset["source_file"] == ["train-0"] * SAMPLE_PAGES + ["blank.pdf"]
    assert all(prepare_page(row.cell, None, None).data for row in source.rows(set()))
    keyed = load_source(InputSelection(str(tmp_path / "in"), image_column="pdf", id_column="doc"), pdf_size=SMALL)
    assert keyed.ids[-1] == "second#p0"


def test_a_dataset_column_of_relative_pdf_paths_reads_them_beside_the_dataset(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "sample.pdf").write_bytes(SAMPLE_PDF.read_bytes())
    (tmp_path / "files" / "locked.pdf").write_bytes(encrypted_pdf())
    folder = pdf_dataset(tmp_path / "in", ["../files/sample.pdf", "../files/locked.pdf"], datasets.Value("string"))
    source = load_source(InputSelection(folder, image_column="pdf"), pdf_size=SMALL)
    assert len(source.ids) == SAMPLE_PAGES + 1
    rows = list(source.rows(set()))
    assert max(size_of(prepare_page(rows[0].cell, None, None))) == 256
    with pytest.raises(BadPdf, match=r"locked\.pdf is encrypted"):
        prepare_page(rows[-1].cell, None, None)


def test_pdf_cells_are_told_from_image_cells():
    assert looks_like_pdf(blank_pdf()) and looks_like_pdf({"bytes": None, "path": "scan.PDF"})
    assert not looks_like_pdf(b"\x89PNG\r\n") and not looks_like_pdf("page.png") and not looks_like_pdf(None)


def test_without_pypdfium2_pdf_input_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    with pytest.raises(InputError, match="pip install pypdfium2"):
        load_source(InputSelection(str(SAMPLE_PDF)))


def test_rendering_in_many_threads_gives_the_bytes_of_one():
    cells = [row.cell for row in load_source(InputSelection(str(SAMPLE_PDF)), pdf_size=SMALL).rows(set())] * 6
    alone = [prepare_page(cell, None, None).data for cell in cells]
    with ThreadPoolExecutor(8) as threads:
        together = list(threads.map(lambda cell: prepare_page(cell, None, None).data, cells))
    assert together == alone


# ---- the offline shape renders in its prep threads ----


def test_the_offline_runner_sends_rendered_pages_and_fails_a_bad_pdf_alone(tmp_path):
    facts, args = recipe()
    log = ResultLog(tmp_path / "progress", "20260101T000000Z-aaaaaa", flush_rows=1000)
    engine = FakeLLM(lambda n: completion(f"page {n}"))
    sent: list[bytes] = []
    chat = engine.chat

    def keep_images(conversations, *rest, **options):
        for conversation in conversations:
            url = conversation[0]["content"][0]["image_url"]["url"]
            sent.append(base64.b64decode(url.split(",", 1)[1]))
        return chat(conversations, *rest, **options)

    engine.chat = keep_images
    canary = Canary(log, CanaryContext("m", "i", "c"))
    runner = OfflineRunner(engine, facts, rules_of(facts, args), log, ProgressBar(6, 0), canary)
    runner.run(load_source(InputSelection(str(pdf_folder(tmp_path / "in"))), pdf_size=SMALL).rows(set()), 4)
    results = {row["row_id"]: row for row in read_results(tmp_path / "progress").to_pylist()}
    assert sorted(results) == sorted(FOLDER_IDS)
    assert [max(Image.open(io.BytesIO(image)).size) for image in sent] == [256] * SAMPLE_PAGES
    assert results["scans/encrypted.pdf#p0"]["error"].startswith("bad pdf: scans/encrypted.pdf is encrypted")
    assert results["reports/sample-pages.pdf#p2"]["error"] is None


# ---- a run over PDFs, against the fake server ----


def test_a_pdf_folder_runs_resumes_and_refuses_another_render_size(tmp_path, capsys):
    folder, out = pdf_folder(tmp_path / "in"), tmp_path / "out"
    with fake_server() as server:
        argv = [str(folder), str(out), *served(server), "--pdf-longest-edge", "256"]
        code, summary, _ = run_main("lighton-ocr3-saturate.py", argv, capsys)
        assert code == 0 and (summary["rows"], summary["errors"]) == (6, 2)
        code, summary, _ = run_main("lighton-ocr3-saturate.py", argv, capsys)
        assert code == 0 and (summary["resumed"], summary["done_this_run"]) == (6, 0)
        code, _, err = run_main("lighton-ocr3-saturate.py", [*argv[:-1], "300"], capsys)
        assert code == 2 and "pdf_render" in err
    output = load_output(out)
    assert output["source_file"] == [row_id.split("#")[0] for row_id in FOLDER_IDS]
    assert output["page_index"] == [0, 1, 2, 3, 0, 0]
    assert len(set(output["markdown"][:SAMPLE_PAGES])) == SAMPLE_PAGES
    assert output["markdown"][4:] == ["[OCR ERROR]"] * 2
    assert output["ocr_error"][4].startswith("bad pdf: scans/encrypted.pdf is encrypted")


def scan(path, shade: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (120, 160), (shade, shade, shade)).save(path)


def test_a_folder_of_pdfs_and_images_ocrs_both_in_path_order(tmp_path, capsys):
    """A scanner's folder mixes page images and PDFs: every image is one row and every PDF page another, each row
    named by its path under the folder (subfolders kept), in the order of those paths."""
    folder, out = pdf_folder(tmp_path / "in"), tmp_path / "out"
    scan(folder / "cover.png", 40)
    scan(folder / "scans" / "back.jpg", 90)
    scan(folder / "scans" / "deep" / "z-last.webp", 140)
    with fake_server() as server:
        argv = [str(folder), str(out), *served(server), "--pdf-longest-edge", "256"]
        code, summary, err = run_main("lighton-ocr3-saturate.py", argv, capsys)
        assert code == 0 and (summary["rows"], summary["errors"]) == (9, 2), err[-2000:]
        assert "3 image(s)" in err
        code, summary, _ = run_main("lighton-ocr3-saturate.py", argv, capsys)
        assert code == 0 and (summary["resumed"], summary["done_this_run"]) == (9, 0)
    output = load_output(out)
    pages = ["reports/sample-pages.pdf"] * SAMPLE_PAGES
    assert output["source_file"] == [
        "cover.png",
        *pages,
        "scans/back.jpg",
        "scans/deep/z-last.webp",
        "scans/encrypted.pdf",
        "scans/truncated.pdf",
    ]
    assert output["page_index"] == [None, 0, 1, 2, 3, None, None, 0, 0]
    assert all(output["markdown"][:7]) and output["ocr_error"][:7] == [None] * 7


def test_two_shards_of_pdf_pages_make_one_dataset(tmp_path, capsys):
    folder, out = pdf_folder(tmp_path / "in"), tmp_path / "out"
    with fake_server() as server:
        argv = [str(folder), str(out), *served(server), "--pdf-longest-edge", "256"]
        first, _, _ = run_main("lighton-ocr3-saturate.py", [*argv, "--shard", "0/2"], capsys)
        second, summary, _ = run_main("lighton-ocr3-saturate.py", [*argv, "--shard", "1/2"], capsys)
    assert (first, second) == (0, 0) and summary["missing"] == 0
    assert sorted(load_output(out)["page_index"]) == [0, 0, 0, 1, 2, 3]


# ---- the real CPU engine ----


def test_pdf_pages_through_the_real_engine_with_canary_and_cost(vllm_server, tmp_path):
    """Nine of ten pages (a sample): eight real pages of two PDFs, then the encrypted one; the canary (on by
    default) reads the tiny model's first answers and must let them through."""
    folder, out = pdf_folder(tmp_path / "in"), tmp_path / "out"
    (folder / "reports" / "copy.pdf").write_bytes(SAMPLE_PDF.read_bytes())
    run = run_recipe(
        "lighton-ocr3-saturate.py", str(folder), str(out), "--server", vllm_server.url, "--model", vllm_server.model,
        *FAST, "--pdf-longest-edge", "384", "--max-samples", "9",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    summary = summary_of(run.stdout)
    assert (summary["rows"], summary["errors"], summary["missing"]) == (9, 1, 0)
    assert summary["flavor"] == "l4x1" and summary["price_per_hour"] == JOB_PRICES_USD_PER_HOUR["l4x1"]
    assert summary["usd_per_1000_pages"] > 0 and summary["projected_pages"] == 10 and summary["projected_usd"] > 0
    output = load_output(out)
    real = 2 * SAMPLE_PAGES
    assert output["source_file"] == ["reports/copy.pdf"] * 4 + ["reports/sample-pages.pdf"] * 4 + [
        "scans/encrypted.pdf"
    ]
    assert all(output["markdown"][:real]) and output["ocr_error"][:real] == [None] * real
    assert "| cost |" not in (out / "README.md").read_text(), "a local run's flavor is not known: no price on the card"


def test_a_hub_dataset_pdf_path_outside_the_dataset_is_never_opened(tmp_path, monkeypatch):
    """A Hub dataset's cell naming /some/file.pdf on the job's machine: one error row, no page of it rendered."""
    import huggingface_hub.constants

    from ocr_core.inputs import source as source_module

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    private = tmp_path / "private.pdf"
    private.write_bytes(SAMPLE_PDF.read_bytes())
    features = datasets.Features({"doc": datasets.Value("string"), "pdf": datasets.Value("string")})
    dataset = datasets.Dataset.from_dict({"doc": ["mine"], "pdf": [str(private)]}, features=features)
    monkeypatch.setattr(source_module, "open_dataset", lambda *args, **kwargs: dataset)
    source = load_source(InputSelection("someone/scans", image_column="pdf"), pdf_size=SMALL)
    rows = list(source.rows(set()))
    assert len(rows) == 1, "the private PDF's pages were counted"
    with pytest.raises(BadPdf, match="outside"):
        prepare_page(rows[0].cell, None, None)
