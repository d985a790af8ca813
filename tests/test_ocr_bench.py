"""Our output read by ocr-bench, the tool that compares OCR models over such datasets, through its released code.

Two recipes write two configs of one output (a Hub repo kept in a folder by the double; `datasets` and ocr-bench
read the folder as they would read the repo). ocr-bench must find both configs, the text column, the recipes'
models and rows that line up; every failed row must carry the sentinel ocr-bench recognises, never an empty answer
(an empty answer is judged against the other model's text, and loses).

ocr-bench 0.0.4 (the released version) has no sentinel check of its own yet; its source defines a sentinel as
`[OCR ERROR]` or `[OCR FAILED]`, or a bracketed upper-case token ending in ERROR or FAILED, checked here as written.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import datasets
import pytest
from ocr_bench.dataset import discover_configs, discover_ocr_columns, load_config_dataset
from PIL import Image

from ocr_core.store import hub as hub_module
from tests.test_resume_publish import REPO, SAMPLES, run_main
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub
from tests.testbed.recipes import model_facts

SENTINEL = re.compile(r"^\[[A-Z0-9 ._/-]{0,30}(?:ERROR|FAILED)\]$")
RECIPES = {
    "ovis": ("ovis-ocr2-server.py", model_facts("ovis_ocr2").model),
    "nano": ("nanonets-ocr2-server.py", model_facts("nanonets_ocr2").model),
}


@pytest.fixture(autouse=True)
def quick_hub_retries(monkeypatch):
    monkeypatch.setattr(hub_module, "UPLOAD_BACKOFF_S", 0.01)


def pages_with_failures(folder: Path) -> Path:
    """Six sample pages and two that no model can read, with the sample's own page id to align rows by."""
    samples = datasets.load_dataset(str(SAMPLES), split="train").cast_column("image", datasets.Image(decode=False))
    rows = samples.select(range(6)).to_list()
    broken = io.BytesIO()
    Image.new("RGB", (40, 40)).save(broken, format="PNG")
    rows += [
        {**rows[0], "page_id": "broken-empty", "image": {"bytes": b"", "path": None}},
        {**rows[0], "page_id": "broken-truncated", "image": {"bytes": broken.getvalue()[:30], "path": None}},
    ]
    features = samples.features
    datasets.Dataset.from_list(rows, features=features).save_to_disk(str(folder))
    return folder


def publish_both(tmp_path: Path, capsys, monkeypatch) -> Path:
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    source = pages_with_failures(tmp_path / "in")
    for config, (script, model) in RECIPES.items():
        with fake_server(model=model) as server:
            argv = [
                str(source), REPO, "--config", config, "--server", server.url, "--max-model-len", "2048",
                "--max-tokens", "16", "--temperature", "0",
            ]  # fmt: skip
            code, summary, err = run_main(script, argv, capsys, hub=hub)
        assert code == 0, err
        assert summary["errors"] == 2
    return hub.repo(REPO)


def audit(dataset: datasets.Dataset, column: str) -> dict[str, int]:
    texts = dataset[column]
    return {
        "rows": len(texts),
        "empty": sum(text is None or not text.strip() for text in texts),
        "sentinel": sum(bool(text) and bool(SENTINEL.match(text.strip())) for text in texts),
    }


def test_ocr_bench_reads_both_configs_and_every_failure_is_a_sentinel(tmp_path, capsys, monkeypatch):
    repo = str(publish_both(tmp_path, capsys, monkeypatch))
    configs = discover_configs(repo)
    assert sorted(configs) == ["nano", "ovis"]
    unified, models = load_config_dataset(repo, configs)
    assert models == {config: model for config, (_, model) in RECIPES.items()}
    for config in configs:
        own = datasets.load_dataset(repo, config, split="train")
        assert discover_ocr_columns(own) == {"markdown": RECIPES[config][1]}
        assert own["page_id"] == unified["page_id"], "rows of the two configs do not line up"
        assert unified[config] == own["markdown"]
        counts = audit(own, "markdown")
        print(f"ocr-bench audit of config {config}: {counts}")
        assert counts == {"rows": 8, "empty": 0, "sentinel": 2}
        failed = [page for page, error in zip(own["page_id"], own["ocr_error"]) if error is not None]
        assert failed == ["broken-empty", "broken-truncated"]
        assert all(text == "[OCR ERROR]" for text, error in zip(own["markdown"], own["ocr_error"]) if error)


def test_null_failed_text_leaves_failed_rows_empty(tmp_path, capsys):
    source = pages_with_failures(tmp_path / "in")
    with fake_server(model=model_facts("ovis_ocr2").model) as server:
        argv = [
            str(source), str(tmp_path / "out"), "--server", server.url, "--max-model-len", "2048", "--max-tokens", "16",
            "--null-failed-text",
        ]  # fmt: skip
        code, _, err = run_main("ovis-ocr2-server.py", argv, capsys)
    assert code == 0, err
    output = datasets.load_dataset(str(tmp_path / "out"), split="train", cache_dir=str(tmp_path / "cache"))
    assert [text for text, error in zip(output["markdown"], output["ocr_error"]) if error] == [None, None]
    assert "empty where the row failed" in (tmp_path / "out" / "README.md").read_text()
