"""The README's first commands from a clone (issue 32): before a release, the scripts' URLs and the core wheel their
headers pin are not published, so `make run` builds the core's wheel from src/ and runs any recipe with its header
unedited, on one's own GPU box or against a `--server`, and `make submit` sends it to HF Jobs with that wheel. A fake
vLLM server answers here; the wheel build and the script's environment are uv's own, as on a user's machine (the
package index is read, the Hub never: the submission is a dry run, whose command tests/test_fanout.py gives to hf's
own CLI and whose job it runs as HF Jobs start one).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from tests.testbed.env import REPO_ROOT, script_python, user_env
from tests.testbed.fake_server import fake_server

SAMPLES = REPO_ROOT / "samples" / "dataset"
SCRIPT = "lighton-ocr3-saturate.py"
CLONE_FILES = ("Makefile", "pyproject.toml", "README.md", SCRIPT)
CLONE_FOLDERS = ("src", "tools")


def clone_of_this_checkout(folder: Path) -> Path:
    """What `make run` reads of a clone, copied from this checkout as it stands (uncommitted edits included). Its own
    path gives the script its own uv environment: uv keys a script's environment by the script's path, and `make run`
    reinstalls the core there, which under the suite's runs of the same script broke their imports."""
    for name in CLONE_FILES:
        shutil.copy2(REPO_ROOT / name, folder / name)
    for name in CLONE_FOLDERS:
        shutil.copytree(REPO_ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return folder


def test_make_run_runs_a_recipe_from_the_clone_against_a_server(tmp_path):
    clone = clone_of_this_checkout(tmp_path)
    out = tmp_path / "scans-ocr"
    suites_own = script_python(SCRIPT).parent.parent
    with fake_server() as server:
        args = f"--server {server.url} --model {server.state.model} --max-model-len 1024 --max-tokens 16"
        result = subprocess.run(
            ["make", "-s", "run", f"SCRIPT={SCRIPT}", f"INPUT={SAMPLES}", f"OUTPUT={out}",
             f"ARGS={args} --max-samples 3"],
            cwd=clone, env=user_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])
    assert (summary["rows"], summary["errors"], summary["exit_code"]) == (3, 0, 0)
    location = Path(summary["core"]["location"])
    assert not location.is_relative_to(clone / "src"), "the core came from src/, not from the wheel built from it"
    assert not location.is_relative_to(suites_own), "make run reinstalled the core under the suite's own runs"
    assert summary["core"]["version"] == "0.2.0"
    assert not (clone / "build").exists(), "the build left setuptools' scratch in the tree"
    assert os.listdir(out / "data")


def test_make_submit_ships_the_wheel_it_builds_with_each_job(tmp_path):
    """Its dry run: the launcher's command for each job, which carries the wheel built into the clone's dist/ as a
    word of its own (hf uploads such a file with the job) and the variables that make the job's uv install it."""
    clone = clone_of_this_checkout(tmp_path)
    result = subprocess.run(
        ["make", "-s", "submit", f"SCRIPT={SCRIPT}", "INPUT=someone/scans", "OUTPUT=someone/scans-ocr", "JOBS=2",
         "ARGS=--dry-run --max-samples 20"],
        cwd=clone, env=user_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.replace("\\\n", " ").splitlines()
    commands = [shlex.split(line) for line in lines if line.startswith("hf jobs uv run")]
    wheel = clone / "dist" / "ocr_vllm_core-0.2.0-py3-none-any.whl"
    assert wheel.is_file() and len(commands) == 2
    for index, words in enumerate(commands):
        assert words[-6:] == ["--max-samples", "20", "--core-wheel", str(wheel), "--shard", f"{index}/2"]
        assert str(clone / SCRIPT) in words and "UV_NO_SOURCES=1" in words and "UV_FIND_LINKS=/data" in words
    assert "they install the core wheel" in result.stderr and json.loads(lines[-1])["dry_run"]


def test_make_run_without_input_and_output_says_to_give_them(tmp_path):
    """`make run SCRIPT=...` alone said `OUTPUT '' is the current folder`: make passes the unset INPUT and OUTPUT as
    empty words, which the recipe read as paths. Nothing is built or run for a command that names no pages."""
    clone = clone_of_this_checkout(tmp_path)
    result = subprocess.run(
        ["bash", "tools/run.sh", SCRIPT, "", ""], cwd=clone, env=user_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"give INPUT and OUTPUT: make run SCRIPT={SCRIPT} INPUT=" in result.stderr, result.stderr[-2000:]
    assert "ARGS=--help" in result.stderr and "''" not in result.stderr
    assert not (clone / "dist").exists()


def test_a_mistyped_flag_through_make_run_rebuilds_and_reinstalls_nothing(tmp_path):
    """Every `make run` built the core's wheel and reinstalled it before the recipe read its flags, so each typo
    cost a build and an install; now they happen when src/ changed, or when the script's environment holds another
    build. `ARGS=--help` works without INPUT and OUTPUT, as the README says."""
    clone = clone_of_this_checkout(tmp_path)

    def make_run(*words: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["make", "-s", "run", f"SCRIPT={SCRIPT}", *words], cwd=clone, env=user_env(), capture_output=True,
            text=True, timeout=600,
        )  # fmt: skip

    usage = make_run("ARGS=--help")
    assert usage.returncode == 0 and "--max-samples" in usage.stdout, usage.stderr[-3000:]
    make_run(f"INPUT={SAMPLES}", f"OUTPUT={tmp_path / 'out'}", "ARGS=--max-sampels 3")
    wheel = clone / "dist" / "ocr_vllm_core-0.2.0-py3-none-any.whl"
    found = subprocess.run(
        ["uv", "python", "find", "--script", str(clone / SCRIPT)], env={**user_env(), "UV_NO_SOURCES": "1"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    record = next(Path(found.stdout.strip()).parent.parent.glob("lib/python*/site-packages/ocr_vllm_core-*/RECORD"))
    built, installed = wheel.stat().st_mtime_ns, record.stat().st_mtime_ns
    typo = make_run(f"INPUT={SAMPLES}", f"OUTPUT={tmp_path / 'out'}", "ARGS=--max-sampels 3")
    assert "unrecognized arguments" in typo.stderr or "--max-samples" in typo.stderr, typo.stderr[-3000:]
    assert wheel.stat().st_mtime_ns == built, "the wheel was built again from an unchanged src/"
    assert record.stat().st_mtime_ns == installed, "the core was reinstalled although the environment held this build"


def test_make_run_echoes_no_api_key_and_names_a_mistyped_script(tmp_path):
    """make printed each recipe line before running it, so `ARGS="--api-key ..."` showed the key on the terminal;
    and `make run SCRIPT=<typo>` listed the recipes without naming what was typed. Neither costs a build: the
    recipe named is not in the clone."""
    clone = clone_of_this_checkout(tmp_path)
    secret = "sk-never-shown-1234"
    for target in ("run", "submit", "demo"):
        result = subprocess.run(
            ["make", target, "SCRIPT=lighton-ocr3-saturat.py", "INPUT=in", "OUTPUT=out", f"ARGS=--api-key {secret}"],
            cwd=clone, env=user_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode != 0, result.stdout
        assert secret not in result.stdout + result.stderr, (target, result.stdout, result.stderr)
        assert "lighton-ocr3-saturat.py" in result.stderr, (target, result.stderr)
    assert not (clone / "dist").exists()
