"""Progress parts, resume bookkeeping and the final dataset, without a server."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from ocr_core.inputs.addresses import InputError
from ocr_core.inputs.columns import Columns
from ocr_core.inputs.source import InputSelection, load_source
from ocr_core.publishing.assembly import assemble, missing_rows
from ocr_core.publishing.card import CardFacts, render_card
from ocr_core.store.front_matter import split_front_matter
from ocr_core.store.progress import ResultLog, RowResult, finished_ids, read_results
from ocr_core.summary_line import RunFacts, Summary
from ocr_core.version import core_identity

SAMPLE_DATASET = Path(__file__).resolve().parent.parent / "samples" / "dataset"


def test_newest_part_wins_and_errors_can_be_retried(tmp_path):
    first = ResultLog(tmp_path, "20260101T000000Z-aaaaaa", flush_rows=2)
    first.add(RowResult(0, "train-0", text="zero"))
    first.add(RowResult(1, "train-1", error="server rejected the page (400): bad"))
    second = ResultLog(tmp_path, "20260102T000000Z-bbbbbb", flush_rows=10)
    second.add(RowResult(1, "train-1", text="one"))
    second.flush()
    results = read_results(tmp_path)
    texts = dict(zip(results["row_id"].to_pylist(), results["text"].to_pylist()))
    assert texts == {"train-0": "zero", "train-1": "one"}
    assert finished_ids(read_results(tmp_path), retry_errors=True) == {"train-0", "train-1"}


def test_error_rows_are_skipped_unless_retried(tmp_path):
    log = ResultLog(tmp_path, "20260101T000000Z-aaaaaa")
    log.add(RowResult(0, "train-0", text="zero"))
    log.add(RowResult(1, "train-1", error="bad image: image cell is empty (None)"))
    log.flush()
    results = read_results(tmp_path)
    assert finished_ids(results, retry_errors=False) == {"train-0", "train-1"}
    assert finished_ids(results, retry_errors=True) == {"train-0"}


def test_source_selection_is_stable(tmp_path):
    source = load_source(InputSelection(str(SAMPLE_DATASET), max_samples=5, shuffle=True, seed=7))
    again = load_source(InputSelection(str(SAMPLE_DATASET), max_samples=5, shuffle=True, seed=7))
    assert source.ids == again.ids
    assert len(set(source.ids)) == 5
    rows = list(source.rows(skip={source.ids[0]}))
    assert [row.row_id for row in rows] == source.ids[1:]
    assert all(isinstance(row.cell["bytes"], bytes) for row in rows)


def test_missing_column_names_the_fix():
    with pytest.raises(InputError, match="--image-column"):
        load_source(InputSelection(str(SAMPLE_DATASET), image_column="scan"))


def test_final_dataset_keeps_input_order_and_columns(tmp_path):
    source = load_source(InputSelection(str(SAMPLE_DATASET), max_samples=6, shuffle=True, seed=3))
    log = ResultLog(tmp_path / "progress", "20260101T000000Z-aaaaaa")
    for index, row_id in reversed(list(zip(source.selected, source.ids))):
        error = "bad image: broken" if index % 2 else None
        log.add(RowResult(index, row_id, text=None if error else f"text {index}", error=error))
    log.flush()
    results = read_results(tmp_path / "progress")
    assert missing_rows(source, results) == 0
    columns = Columns("markdown", "ocr_error", {})
    files = assemble(source, results, columns, lambda record: {"model_id": "m"}, tmp_path / "out", "data")
    assert list(files) == ["data/train-00000-of-00001-00000.parquet"]
    output = datasets.Dataset.from_parquet(str(*files.values()), cache_dir=str(tmp_path))
    assert output.column_names == [
        "image",
        "page_id",
        "format",
        "width",
        "height",
        "markdown",
        "ocr_error",
        "inference_info",
    ]
    assert isinstance(output.features["image"], datasets.Image)
    originals = datasets.load_dataset(str(SAMPLE_DATASET), split="train")
    assert output["page_id"] == [originals[index]["page_id"] for index in source.selected]
    for index, text, error in zip(source.selected, output["markdown"], output["ocr_error"]):
        assert (text == "[OCR ERROR]") == (index % 2 == 1)
        assert (error is not None) == (index % 2 == 1)
    assert json.loads(output[0]["inference_info"]) == [{"model_id": "m"}]
    assert output[0]["image"].size == (originals[source.selected[0]]["width"], originals[source.selected[0]]["height"])


def test_each_row_names_the_server_and_the_vllm_build_that_wrote_it(tmp_path):
    """Before: every row's inference_info named the run's one vLLM version, that of the first server, also for the
    rows another server of the fleet wrote."""
    source = load_source(InputSelection(str(SAMPLE_DATASET), max_samples=4))
    log = ResultLog(tmp_path / "progress", "20260101T000000Z-aaaaaa")
    servers = [
        json.dumps({"server": f"http://gpu-{index % 2}:8000", "vllm_version": f"0.1{index % 2}.0"})
        for index in range(4)
    ]
    for index, row_id in zip(source.selected, source.ids):
        log.add(RowResult(index, row_id, text="text", server=servers[index]))
    log.flush()
    files = assemble(source, read_results(tmp_path / "progress"), Columns("markdown", "ocr_error", {}),
                     lambda record: {"model_id": "m", "vllm_version": "0.10.0"}, tmp_path / "out", "data")  # fmt: skip
    output = datasets.Dataset.from_parquet(str(*files.values()), cache_dir=str(tmp_path))
    entries = [json.loads(info)[-1] for info in output["inference_info"]]
    assert [(entry["server"], entry["vllm_version"]) for entry in entries] == [
        (f"http://gpu-{index % 2}:8000", f"0.1{index % 2}.0") for index in source.selected
    ]


def test_card_merges_configs():
    facts = CardFacts(
        source="in/ds",
        split="train",
        config="ovis",
        data_prefix="ovis",
        model="m/x",
        script="s.py",
        image="img",
        mode="server",
        command="hf jobs uv run ...",
        output_column="markdown",
        error_column="ocr_error",
        rows=3,
        errors=1,
        truncated=0,
        failed_text="[OCR ERROR]",
        runs=(),
        pages_per_s=1.5,
        tokens_per_s=100.0,
        window=32,
    )
    first = render_card(None, facts)
    second = render_card(first, CardFacts(**{**facts.__dict__, "config": None, "data_prefix": "data"}))
    meta, body = split_front_matter(second)
    names = [config["config_name"] for config in meta["configs"]]
    assert names == ["ovis", "default"]
    assert meta["configs"][0]["data_files"] == [{"split": "train", "path": "ovis/train-*"}]
    assert "hf jobs uv run" in body


def test_the_card_states_the_sustained_and_billed_rates_beside_the_rate_over_inference():
    facts = CardFacts(
        source="in/ds", split="train", config=None, data_prefix="data", model="m/x", script="s.py", image=None,
        mode="server", command=None, output_column="markdown", error_column="ocr_error", rows=3, errors=0,
        truncated=0, failed_text=None, runs=(), pages_per_s=11.42, tokens_per_s=100.0, window=32,
        sustained_pages_per_s=16.5, billed_pages_per_s=7.25,
    )  # fmt: skip
    body = render_card(None, facts)
    assert "| sustained | 16.50 pages/s (every planned replica serving) |" in body
    assert "| billed | 7.25 pages/s (rows over the run's wall time, start-up included) |" in body
    assert "| throughput | 11.42 pages/s over inference, 100 output tokens/s |" in body
    short = render_card(None, CardFacts(**{**facts.__dict__, "sustained_pages_per_s": None}))
    assert "| sustained | none: the run ended before a steady state (more pages than the window give one) |" in short


def test_the_summary_line_carries_the_run_facts_then_the_failure_and_the_exit_code():
    summary = Summary("x.py", "org/model", "server", "./out")
    assert json.loads(summary.line()) == {
        "script": "x.py", "model": "org/model", "mode": "server", "output": "./out", "core": core_identity(),
        "exit_code": None,
    }  # fmt: skip
    summary.run = RunFacts(
        output="./out (config default)", rows=3, done_this_run=2, resumed=1, shard=None, errors=1, errors_this_run=1,
        truncated=0, loops_this_run=0, truncated_this_run=0, missing=0, pages_per_s=1.5, sustained_pages_per_s=1.8,
        output_tokens_per_s=9.0, inference_s=2.0, sustained_s=1.0, sustained_pages=2, sustained_unix=[1.0, 2.0],
        wall_s=3.0, flavor="l4x1", window=32, peak_in_flight=3, peak_window=32, interrupted=False,
        failure=None, extra={"usd_per_1000_pages": 0.4, "prefix_cache_hit_rate": 0.9},
    )  # fmt: skip
    summary.exit_code = 0
    line = json.loads(summary.line())
    assert line["output"] == "./out (config default)" and line["rows"] == 3 and line["failure"] is None
    assert line["usd_per_1000_pages"] == 0.4 and line["prefix_cache_hit_rate"] == 0.9 and "extra" not in line
    assert list(line)[-1] == "exit_code" and line["exit_code"] == 0
