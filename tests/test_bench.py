"""The bench kit runs as shipped: every bench script at tiny sizes, the GPU ones against the fake `vllm serve`
(BENCH_FAKE=1), so that a refactor of the core cannot leave them behind again (issue 30: three GPU scripts died on
`No module named 'ocr_core'` under plain python, four CPU benches on names that no longer existed, and no test ran
them). The CPU benches run in the background while the GPU kit runs: each is mostly imports and sleeps.

bench/saturation.py and bench/ceiling.py are left out: each needs a real vLLM engine (minutes of CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed.env import REPO_ROOT, VENV_PYTHON

CPU_BENCHES = {
    "driver-cost": ["bench/driver_cost.py", "--repeats", "1", "--pages", "16", "--window", "4"],
    "pdf-render": ["bench/pdf_render.py", "--text-pages", "1", "--rounds", "1"],
    "shard-publish": ["bench/shard_publish.py", "--rows", "12", "--shards", "1", "--text-chars", "20"],
    "progress-store": ["bench/progress_store.py", "--rows", "64", "--cycle-rows", "32"],
}
EFFICIENCY_FIELDS = {
    "recipe",
    "shape",
    "pages",
    "defaults",
    "sustained_pages_per_s",
    "billed_pages_per_s",
    "pages_per_s",
    "gpu_util_sustained",
    "mfu_sustained",
    "startup",
    "engine_cache",
}


def plain_env(**extra: str) -> dict[str, str]:
    """The environment a bench is started in by hand: no PYTHONPATH, so the scripts must find the core themselves."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return {**env, **extra}


@pytest.fixture(scope="module")
def cpu_benches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, subprocess.Popen]]]:
    results = tmp_path_factory.mktemp("bench-results")
    logs = tmp_path_factory.mktemp("bench-logs")
    started = {}
    for name, command in CPU_BENCHES.items():
        with open(logs / f"{name}.log", "w") as log:
            started[name] = subprocess.Popen(
                [str(VENV_PYTHON), *command],
                cwd=REPO_ROOT,
                env=plain_env(BENCH_RESULTS=str(results)),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    yield results, started
    for process in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def run_gpu_script(script: str, args: list[str], out: Path, work: Path, **knobs: str) -> None:
    env = plain_env(
        BENCH_FAKE="1",
        PYTHON=str(VENV_PYTHON),
        OUT=str(out),
        BENCH_WORK=str(work),
        PAGES_N="24",
        MAX_TOKENS="8",
        **knobs,
    )
    done = subprocess.run(
        ["bash", f"bench/gpu/{script}", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-4000:]}"


def fake_py_spy(path: Path) -> Path:
    """A `py-spy record` stand-in: writes one folded stack for the pid it is given, where --output says."""
    path.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do [ "$1" = --output ] && out=$2; shift; done\n'
        'echo "Thread 1;main (fake.py:1);serve (fake.py:2) 5" > "$out"\n'
    )
    path.chmod(0o755)
    return path


@pytest.mark.heavy
def test_the_gpu_kit_runs_on_a_fake_engine_and_writes_the_efficiency_file(tmp_path, cpu_benches):
    """run_all.sh, efficiency.sh (sweep.sh, then fleet_arms.sh) and hand_replicas.sh as shipped, one warm machine's
    calls in a row: every arm lands in one h200-efficiency file with the issue's fields, and says which core ran
    (src/ of this checkout)."""
    out, work = tmp_path / "out", tmp_path / "work"
    run_gpu_script("run_all.sh", ["server", "hand"], out, work, HAND_CONCURRENCY="4")
    efficiency = {"RESULTS": str(out), "BUDGET_S": "400", "MIN_LEFT_S": "60", "ARMS": "p1|1|0||full:24:1,vp:24:1:1"}
    home, inductor = tmp_path / "home", tmp_path / "inductor"
    (home / ".cache" / "vllm").mkdir(parents=True)
    inductor.mkdir()
    spy = fake_py_spy(tmp_path / "py-spy")
    efficiency |= {"BENCH_PY_SPY": str(spy), "BENCH_PY_SPY_AT": "0", "BENCH_PY_SPY_S": "1", "FAKE_VLLM_SECONDS": "4"}
    run_gpu_script(
        "efficiency.sh",
        ["start", "qwen2_5_vl@lighton-ocr3-saturate.py@base||--max-samples 24", "wipe",
         "qwen2_5_vl@lighton-ocr3-saturate.py@tok1||--max-samples 8@1"],
        out,
        work,
        HOME=str(home),
        TORCHINDUCTOR_CACHE_DIR=str(inductor),
        **efficiency,
    )  # fmt: skip
    assert not (home / ".cache" / "vllm").exists() and not inductor.exists(), "wipe leaves a new job's caches"
    tokens = {row["setting"]: row["max_tokens"] for row in map(json.loads, (out / "sweep.jsonl").open())}
    assert tokens["base"] != 1 and tokens["tok1"] == 1
    run_gpu_script("hand_replicas.sh", [], out, work, REPLICAS="1", MANY_PAGES="24", ONE_PAGES="8")
    (found,) = out.glob("h200-efficiency-*.json")
    document = json.loads(found.read_text())
    arms = {arm["arm"]: arm for arm in document["arms"]}
    assert set(arms) == {"server", "hand", "p1-full", "p1-vp", "base", "tok1", "replicas-1", "one"}, (
        out / "job.log"
    ).read_text()
    profiled = arms["base"]["py_spy"]
    assert [p["file"].split("-")[0] for p in profiled] == ["engine_core"], "the fake engine is the busiest core"
    assert profiled[0]["innermost"] == [["serve (fake.py)", 1.0]]
    phase_rows = {row["arm"]: row for row in map(json.loads, (out / "fleet-arms.jsonl").open())}
    assert "engine_core" in phase_rows["p1-full"]["processes"]["cpu_s_by_role"], "a phase's servers are watched"
    hand_rows = {row["arm"]: row for row in map(json.loads, (out / "hand-replicas.jsonl").open())}
    assert "engine_core" in hand_rows["replicas-1"]["processes"]["cpu_s_by_role"], "hand-started servers are watched"
    held = arms["hand"]["cpu_sustained"]
    assert held["seconds"] > 0 and held["cores_total"] is not None, "CPU cut to the sustained interval"
    assert arms["p1-vp"]["recipe"].endswith("1 output tokens") and arms["p1-full"]["recipe"].endswith("8 output tokens")
    for name, arm in arms.items():
        assert set(arm) >= EFFICIENCY_FIELDS, name
        assert arm["ok"] and arm["pages"] in (8, 24), name
        assert 0 < arm["billed_pages_per_s"] < arm["pages_per_s"], f"{name}: billed counts the start-up"
    assert arms["server"]["recipe"] == "nanonets-ocr2-server.py" and arms["server"]["defaults"] is True
    assert arms["base"]["recipe"] == "lighton-ocr3-saturate.py" and arms["base"]["defaults"] is True
    assert arms["replicas-1"]["shape"] == "qwen3_5" and arms["replicas-1"]["defaults"] is False
    assert arms["hand"]["sustained_pages_per_s"] > 0, "4 in flight over 24 pages reach a sustained interval"
    assert arms["server"]["sustained_pages_per_s"] is None, "a window of 32 holds all 24 pages: no steady state"
    core = arms["server"]["core"]
    assert core["location"] == str(REPO_ROOT / "src" / "ocr_core") and core["version"].endswith("not installed)")


@pytest.mark.heavy
def test_the_cpu_benches_run_at_tiny_sizes(cpu_benches):
    results, started = cpu_benches
    for name, process in started.items():
        assert process.wait(timeout=600) == 0, f"bench {name} failed (its log is in the bench-logs temp folder)"
        (written,) = results.glob(f"{name}-*.json")
        assert json.loads(written.read_text())["benchmark"] == name
