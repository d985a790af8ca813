"""The README's first commands from a clone (issue 32): before a release, the scripts' URLs and the core wheel their
headers pin are not published, so `make run` builds the core's wheel from src/ and runs any recipe with its header
unedited, on one's own GPU box or against a `--server`. A fake vLLM server answers here; the wheel build and the
script's environment are uv's own, as on a user's machine (the package index is read, the Hub never).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.testbed.env import REPO_ROOT
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.fake_server import fake_server

SAMPLES = REPO_ROOT / "samples" / "dataset"
# What the test session sets for its own script runs (tests/conftest.py); a user's shell has none of it.
SESSION_ONLY = ("UV_NO_SOURCES", "UV_FIND_LINKS", "UV_PYTHON", "UV_OFFLINE")


def user_env() -> dict[str, str]:
    return {name: value for name, value in bed_env().items() if name not in SESSION_ONLY}


def test_make_run_runs_a_recipe_from_the_clone_against_a_server(tmp_path):
    out = tmp_path / "scans-ocr"
    with fake_server() as server:
        args = f"--server {server.url} --model {server.state.model} --max-model-len 1024 --max-tokens 16"
        result = subprocess.run(
            ["make", "-s", "run", "SCRIPT=lighton-ocr3-saturate.py", f"INPUT={SAMPLES}", f"OUTPUT={out}",
             f"ARGS={args} --max-samples 3"],
            cwd=REPO_ROOT, env=user_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
    assert (summary["rows"], summary["errors"], summary["exit_code"]) == (3, 0, 0)
    location = Path(summary["core"]["location"])
    assert not location.is_relative_to(REPO_ROOT / "src"), "the core came from src/, not from the wheel built from it"
    assert summary["core"]["version"] == "0.2.0"
    assert not (REPO_ROOT / "build").exists(), "the build left setuptools' scratch in the tree"
    assert os.listdir(out / "data")
