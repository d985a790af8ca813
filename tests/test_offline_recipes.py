"""The offline recipes on the CPU engine: same output as their server twins, bad pages isolated, resumable."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.test_server_recipes import (
    FAST,
    SAMPLES,
    broken_dataset,
    load_output,
    recipe_command,
    repeated_dataset,
    run_recipe,
    stop_after_first_part,
    summary_of,
)
from tests.testbed.env import REPO_ROOT, ran_the_installed_wheel, script_python
from tests.testbed.env import testbed_env as bed_env

# A line of vLLM's own log, `INFO 12-02 16:40:01 [file.py:12] ...`, also behind an engine's `(EngineCore pid=1)`.
VLLM_LOG_LINE = re.compile(r"\b(INFO|WARNING) \d{2}-\d{2} \d{2}:\d{2}:\d{2}")
CPU_ENGINE = "--extra-serve-args=--enforce-eager --mm-processor-kwargs {}"
TWINS = [
    ("lighton-ocr3.py", "lighton-ocr3-saturate.py"),
    ("ovis-ocr2.py", "ovis-ocr2-server.py"),
    ("nanonets-ocr2.py", "nanonets-ocr2-server.py"),
]


@pytest.mark.heavy
@pytest.mark.parametrize(("offline", "server"), TWINS, ids=[offline for offline, _ in TWINS])
def test_offline_output_equals_the_server_twin(vllm_server, tmp_path, offline, server):
    """Both arms send each page alone (a batch of one, a window of one), so the engine computes every page the same
    way in both. The random tiny model's logits are nearly flat: with pages batched, its greedy answer followed the
    batch composition (which the window's timing and the offline batch cut differently) and the CPU's rounding of
    it, so the test passed or failed by machine and by load. What is compared is what the recipes control: the
    same request for the same page gives the same row."""
    model = ["--model", vllm_server.model, *FAST]
    offline_run = run_recipe(offline, str(SAMPLES), str(tmp_path / "offline"), *model, "--batch-size", "1", CPU_ENGINE)
    assert offline_run.returncode == 0, offline_run.stderr[-3000:]
    assert summary_of(offline_run.stdout)["mode"] == "offline"
    assert ran_the_installed_wheel(offline, summary_of(offline_run.stdout))
    server_run = run_recipe(
        server, str(SAMPLES), str(tmp_path / "server"), "--server", vllm_server.url, *model, "--max-inflight", "1"
    )
    assert server_run.returncode == 0, server_run.stderr[-3000:]
    offline_rows = load_output(tmp_path / "offline")
    server_rows = load_output(tmp_path / "server")
    assert offline_rows["page_id"] == server_rows["page_id"]
    assert all(offline_rows["markdown"])
    different = [
        page for page, a, b in zip(offline_rows["page_id"], offline_rows["markdown"], server_rows["markdown"]) if a != b
    ]
    assert different == []


@pytest.mark.heavy
def test_offline_bad_pages_fail_alone(tiny_model, tmp_path):
    source, expected = broken_dataset(tmp_path / "in")
    result = run_recipe(
        "ovis-ocr2.py", str(source), str(tmp_path / "out"), "--model", str(tiny_model), "--batch-size", "4", *FAST,
        CPU_ENGINE,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    output = load_output(tmp_path / "out")
    assert output["name"] == list(expected)
    for name, text, error in zip(output["name"], output["markdown"], output["ocr_error"]):
        if expected[name] is None:
            assert error is None and text, (name, error)
        else:
            assert text == "[OCR ERROR]" and error.startswith("bad image:"), (name, error)


@pytest.mark.heavy
def test_offline_run_resumes_after_sigterm(tiny_model, tmp_path):
    source = repeated_dataset(tmp_path / "in", copies=4)
    out = tmp_path / "out"
    args = [
        str(source), str(out), "--model", str(tiny_model), "--max-model-len", "1024", "--max-tokens", "200",
        "--temperature", "0", "--batch-size", "4", "--ignore-eos", CPU_ENGINE,
    ]  # fmt: skip
    stopped = stop_after_first_part("nanonets-ocr2.py", args, out)
    assert stopped["interrupted"] and 0 < stopped["done_this_run"] < 48

    rerun = run_recipe("nanonets-ocr2.py", *args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    finished = summary_of(rerun.stdout)
    assert finished["resumed"] == stopped["done_this_run"]
    assert finished["done_this_run"] == 48 - stopped["done_this_run"]
    assert len(load_output(out)) == 48


def test_the_summary_is_the_last_thing_on_screen_after_the_engine_stops(tiny_model, tmp_path):
    """The engine's processes stopped at the interpreter's exit, after the closing sentence and the summary line,
    and buried them under their shutdown log: one terminal (stdout and stderr in one stream) must end with them.
    vLLM's own INFO and WARNING lines (about 60 while the engine started, issue 44) stay off that terminal too, as a
    server recipe keeps them in its server log."""
    result = subprocess.run(
        recipe_command(
            "lighton-ocr3.py", str(SAMPLES), str(tmp_path / "out"), "--model", str(tiny_model), *FAST,
            "--max-samples", "2", CPU_ENGINE,
        ),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, env=bed_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines[-1].startswith("{") and json.loads(lines[-1])["exit_code"] == 0, lines[-12:]
    assert "OCR'd this run" in lines[-2], lines[-12:]
    logged = [line for line in lines if VLLM_LOG_LINE.search(line)]
    assert logged == [], f"{len(logged)} lines of vLLM's own log: {logged[:5]}"


def test_where_the_header_installs_no_vllm_an_offline_recipe_prints_its_usage_and_says_where_to_run(tmp_path):
    """Off Linux the header's vLLM pin does not apply (its platform marker), so uv installs the core alone, fast,
    where it used to resolve CUDA torch or try to build vLLM: the recipe's usage and a `--jobs` launch need nothing
    more, and a run says where it can run. The server twin's environment, which has no vLLM, stands in for that
    machine."""
    python = str(script_python("lighton-ocr3-saturate.py"))
    assert subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode != 0, "vLLM is installed"
    script = str(REPO_ROOT / "lighton-ocr3.py")
    usage = subprocess.run([python, script, "--help"], capture_output=True, text=True, env=bed_env(), timeout=120)
    assert usage.returncode == 0 and "--batch-size" in usage.stdout, usage.stderr[-2000:]
    run = subprocess.run(
        [python, script, str(SAMPLES), str(tmp_path / "out"), "--max-samples", "2"],
        capture_output=True, text=True, env=bed_env(), timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert "vLLM is not installed here" in run.stderr and "on a machine with a GPU" in run.stderr, run.stderr[-2000:]
    assert "hf jobs" not in run.stderr, "a job command was offered for local paths no job can read"
    assert summary_of(run.stdout)["exit_code"] == 2


def test_the_offline_engine_compiles_into_the_engine_cache_and_keeps_no_token_there(tiny_model, tmp_path):
    """Issue 42 offline: the cache's folders are set before vLLM reads them, so what the in-process engine writes
    under VLLM_CACHE_ROOT lands in the run's cache and goes to the volume; the run's token never does."""
    cache = tmp_path / "engine-cache"
    token = "hf_" + "OfflineT0ken" * 3
    result = run_recipe(
        "lighton-ocr3.py", str(SAMPLES), str(tmp_path / "out"), "--model", str(tiny_model), *FAST,
        "--max-samples", "1", CPU_ENGINE, "--engine-cache", str(cache), env={**bed_env(), "HF_TOKEN": token},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    used = summary_of(result.stdout)["engine_cache"]
    assert used["outcome"] == "miss" and used["written_bytes"] > 0, used
    (archive,) = cache.iterdir()
    assert archive.name == f"{used['key']}.tar"
    assert token.encode() not in archive.read_bytes()


def test_from_a_clone_a_run_that_cannot_start_offers_the_clones_make_commands(tmp_path):
    """`make run` of a recipe on a machine without vLLM offered `hf jobs uv run URL` and `uv run SCRIPT`, neither of
    which works from a clone before a release (issue 44): tools/run.sh marks the run as a clone's, and the offers
    are the clone's `make run`, and `make demo` on this machine's CPU (a Hub INPUT and OUTPUT get `make submit`)."""
    python = str(script_python("lighton-ocr3-saturate.py"))
    env = {**bed_env(), "OCR_VLLM_CLONE": str(REPO_ROOT)}
    script = str(REPO_ROOT / "lighton-ocr3.py")
    out = tmp_path / "out"
    run = subprocess.run(
        [python, script, str(SAMPLES), str(out), "--max-samples", "2"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    offered = f"make run SCRIPT=lighton-ocr3.py INPUT={SAMPLES} OUTPUT={out} ARGS='--max-samples 2'"
    assert offered in run.stderr, run.stderr[-2000:]
    assert f"make demo SCRIPT=lighton-ocr3.py INPUT={SAMPLES}" in run.stderr
    assert "hf jobs" not in run.stderr and "uv run" not in run.stderr
