"""The start-up summaries of issue 51 on small inputs with known answers: bench/gpu/importtime_summary.py on
`-X importtime` lines (nested imports counted once, own time by top package), bench/gpu/startup_spy.py on
`py-spy record --subprocesses --idle --threads --format raw` stacks (each process's main thread, its imports and the
module it was importing), and importtime_site/sitecustomize.py giving each process, a forked one too, its own file."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testbed.env import REPO_ROOT

KIT = REPO_ROOT / "bench" / "gpu"

IMPORTTIME = """\
# cmdline: python3 -m vllm.entrypoints.cli.main serve
import time: self [us] | cumulative | imported package
import time:    100000 |     100000 |     torch._C
import time:   2000000 |    2100000 |   torch.nn
import time:    900000 |    3000000 | torch
INFO 12-03 19:00:00 [logger.py:1] a log line between imports
import time:    500000 |     500000 |   vllm.config
import time:   1500000 |    2000000 | vllm
import time:     50000 |      50000 | json
"""

STACKS = (
    'process 9:"python3 vllm serve --limit-mm-per-prompt {"image": 1}";thread (9): MainThread;<module> (vllm:8) 7\n'
    'process 10:"python3 vllm serve";thread (10): MainThread;<module> (vllm:8);_find_and_load (<frozen '
    "importlib._bootstrap>:1);<module> (vllm/config.py:3);_find_and_load (<frozen importlib._bootstrap>:1);"
    "<module> (torch/__init__.py:9) 30\n"
    'process 10:"python3 vllm serve";thread (10): MainThread;<module> (vllm:8);main (vllm/cli/main.py:5) 20\n'
    'process 10:"python3 vllm serve";thread (11);_bootstrap (threading.py:1);run (threading.py:2) 40\n'
    'process 10:"python3 vllm serve";process 12:"python3 -c from multiprocessing.spawn import spawn_main; '
    'spawn_main(tracker_fd=5)";thread (12);<module> (<string>:1);spawn_main (multiprocessing/spawn.py:1);'
    "_find_and_load (<frozen importlib._bootstrap>:1);<module> (vllm/entrypoints/api_server.py:1) 10\n"
)


@pytest.fixture(scope="module")
def kit():
    sys.path.insert(0, str(KIT))
    try:
        yield importlib.import_module("importtime_summary"), importlib.import_module("startup_spy")
    finally:
        sys.path.remove(str(KIT))


def test_importtime_adds_top_level_imports_and_own_time_by_package(kit):
    importtime, _ = kit
    summary = importtime.summarize(IMPORTTIME, top=2)
    assert summary["cmdline"] == "python3 -m vllm.entrypoints.cli.main serve"
    assert summary["modules"] == 6
    assert summary["import_s"] == 5.05  # 3 + 2 + 0.05 s: nested lines are inside their parents
    assert summary["top_level_cumulative_s"] == [["torch", 3.0], ["vllm", 2.0]]
    assert summary["slowest_cumulative_any_level_s"] == [["torch", 3.0], ["torch.nn", 2.1]]
    assert summary["slowest_self_s"] == [["torch.nn", 2.0], ["vllm", 1.5]]
    assert summary["by_package_s"] == [["torch", 3.0], ["vllm", 2.0]]


def test_startup_spy_splits_each_process_main_thread_into_imports_and_the_rest(kit):
    _, spy = kit
    summary = spy.summarize(STACKS, rate=10)
    serve = summary["10 python3 vllm serve"]
    assert serve["main_thread_s"] == 5.0 and serve["imports_s"] == 3.0, "the other thread's 40 samples are left out"
    assert serve["top_imports_s"] == [["vllm/config.py", 3.0]]
    assert ["main (vllm/cli/main.py)", 2.0] in serve["outside_imports_on_stack_s"]
    assert summary['9 python3 vllm serve --limit-mm-per-prompt {"image": 1}']["main_thread_s"] == 0.7, "quotes inside"
    (child,) = [name for name in summary if name.startswith("12 ")]
    assert "spawn_main(tracker_fd=5)" in child, "a command line with ';' stays whole"
    assert summary[child]["imports_s"] == 1.0
    assert summary[child]["top_imports_s"] == [["vllm/entrypoints/api_server.py", 1.0]]


def test_sitecustomize_gives_each_process_and_a_forked_child_its_own_file(tmp_path):
    env = dict(os.environ, IMPORTTIME_DIR=str(tmp_path), PYTHONPROFILEIMPORTTIME="1",
               PYTHONPATH=str(KIT / "importtime_site"))  # fmt: skip
    code = "import os, sys\nif os.fork() == 0:\n    import csv\n    os._exit(0)\nos.wait()\nimport wave"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    files = {path: path.read_text() for path in tmp_path.glob("*.txt")}
    assert len(files) == 2
    (child,) = [text for text in files.values() if "# forked from:" in text]
    (parent,) = [text for text in files.values() if "# forked from:" not in text]
    assert "| csv" in child and "| wave" not in child
    assert "| wave" in parent and "| csv" not in parent
    assert parent.startswith("# cmdline: ")


def test_startup_study_times_the_serve_imports_before_and_after_compiling_and_summarizes_them(tmp_path):
    """startup_study.py on a stand-in vLLM (the serve modules, one importing json): each step's file and time, the
    bytecode compileall wrote between the two import runs, and the summary of all three files."""
    site = tmp_path / "site"
    for module in ("entrypoints/cli/main", "entrypoints/cli/serve", "entrypoints/openai/api_server", "v1/engine/core"):
        folder = site / "vllm" / Path(module).parent
        while folder != site:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch()
            folder = folder.parent
        (site / "vllm" / f"{module}.py").write_text("import json\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(KIT / "startup_study.py"), "--site", str(site), "--out", str(out)],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},  # as on the GPU machine: imports write no bytecode
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    times = json.loads((out / "times.json").read_text())
    assert times["pyc_files_before"] == 0 and times["pyc_files_after"] == 10, "compileall compiled the stand-in"
    assert {"nopyc_importtime_s", "compileall_s", "pyc_importtime_s", "pyc_s", "recipe_importtime_s"} <= set(times)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"imports-nopyc.txt", "imports-pyc.txt", "imports-recipe.txt"}
    assert "vllm.v1.engine.core" in (out / "imports-pyc.txt").read_text()
    assert summary["imports-recipe.txt"]["modules"] > summary["imports-pyc.txt"]["modules"], "the recipe's own"


SERVE_ONLY = """\
import time:    200000 |     200000 |   torch.nn
import time:   3000000 |    3200000 | torch
import time:    400000 |     400000 |   vllm.config
import time:    500000 |     900000 | vllm
"""


def test_importtime_beyond_counts_only_the_modules_the_baseline_never_imports(kit):
    """The CLI's cost over `serve` alone: torch.nn's 2 s under the CLI is shared, however it nests; only json and
    torch._C, which serve-only never imports, are the difference."""
    importtime, _ = kit
    extra = importtime.beyond(IMPORTTIME, SERVE_ONLY)
    assert extra["modules"] == 2
    assert extra["own_s"] == 0.15
    assert extra["slowest_self_s"] == [["torch._C", 0.1], ["json", 0.05]]
    assert extra["by_package_s"] == [["torch", 0.1], ["json", 0.05]]


def test_importtime_summary_beyond_on_the_command_line(kit, tmp_path):
    (tmp_path / "cli.txt").write_text(IMPORTTIME)
    (tmp_path / "serve.txt").write_text(SERVE_ONLY)
    done = subprocess.run(
        [
            sys.executable,
            str(KIT / "importtime_summary.py"),
            str(tmp_path / "cli.txt"),
            "--beyond",
            str(tmp_path / "serve.txt"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["cli.txt"]["own_s"] == 0.15
