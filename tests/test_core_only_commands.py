"""`--help` and a `--dry-run` launch through `make run` / `make submit` need only the core (issue 50): an offline
recipe's header pins vLLM, whose CUDA torch took a dry run from 8-12 s to 52 s before it printed a line. The header
is left as it is for a real run. uv is offline for the offline recipe, so its vLLM pin cannot resolve: the commands
pass only when nothing but the core (whose dependencies the server recipe's dry run put in uv's cache) is installed.
"""

from __future__ import annotations

import json
import subprocess

from tests.test_from_a_clone import clone_of_this_checkout
from tests.testbed.env import REPO_ROOT, user_env

OFFLINE = "lighton-ocr3.py"
SERVER = "lighton-ocr3-saturate.py"


def make(clone, *words: str, offline: bool = False) -> subprocess.CompletedProcess:
    env = {**user_env(), **({"UV_OFFLINE": "1"} if offline else {})}
    return subprocess.run(["make", "-s", *words], cwd=clone, env=env, capture_output=True, text=True, timeout=600)


def test_help_and_a_dry_run_of_an_offline_recipe_install_only_the_core(tmp_path):
    clone = clone_of_this_checkout(tmp_path)
    (clone / OFFLINE).write_bytes((REPO_ROOT / OFFLINE).read_bytes())
    hub = ["INPUT=someone/scans", "OUTPUT=someone/scans-ocr", "JOBS=2", "ARGS=--dry-run"]
    warm = make(clone, "submit", f"SCRIPT={SERVER}", *hub)
    assert warm.returncode == 0, warm.stderr[-3000:]
    dry = make(clone, "submit", f"SCRIPT={OFFLINE}", *hub, offline=True)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert json.loads(dry.stdout.strip().splitlines()[-1])["dry_run"]
    assert dry.stdout.count("hf jobs uv run") == 2
    usage = make(clone, "run", f"SCRIPT={OFFLINE}", "ARGS=--help", offline=True)
    assert usage.returncode == 0 and "--max-samples" in usage.stdout, usage.stderr[-3000:]
