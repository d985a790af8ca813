"""The GPU bench on the device's image: bench.py itself runs on the machine's own python, which lacks what the
wheels carry (`datasets`, vLLM) until they are installed beside it, and a detached run that dies is reported.

A lease on an H100 lost its bench to `ModuleNotFoundError: datasets` (bench.py read the model card through the core,
which imports `datasets`), and `--wait` kept waiting on the dead process until the call ran out. These tests run the
bench where `datasets` cannot be imported, as on the device, and wait on a run that dies.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tests.testbed.env import REPO_ROOT, VENV_PYTHON

# Runs bench.py with `datasets` (and vLLM) unimportable in the bench's own process, as on the device's image; the
# recipes it starts get their own environment, as there.
RUN_BENCH = """
import runpy, sys
sys.argv = ["bench/gpu/bench.py", *sys.argv[1:]]
sys.path.insert(0, "bench/gpu")
runpy.run_path("bench/gpu/bench.py", run_name="__main__")
"""
ON_THE_IMAGE = (
    """
import sys
class Lacks:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("datasets", "vllm"):
            raise ModuleNotFoundError(f"No module named {name!r} (not on the device's image)")
sys.meta_path.insert(0, Lacks())
"""
    + RUN_BENCH
)


def bench_in(prelude: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VENV_PYTHON), "-c", prelude, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("arms", ["profile.toml", "hand-replicas.toml"])
def test_the_dry_run_of_every_replicas_arm_runs_without_datasets(arms):
    """A replicas arm starts its replicas with the model card's flags: a planned arm through the recipe's own
    `--plan` (run by the core's environment, carried to the device), a hand-started one read from the card's source.
    Neither may import the core's dependencies into the bench's own process, which the device's image lacks."""
    done = bench_in(ON_THE_IMAGE, f"bench/gpu/arms/{arms}", "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    if arms == "profile.toml":
        assert "the argv of each replica the recipe plans" in done.stdout and " --plan" in done.stdout
    else:
        assert "--gdn-prefill-backend triton" in done.stdout, "the LightOnOCR-3 card's flags reach the replicas"


def test_the_dry_run_names_a_module_the_device_lacks_that_the_bench_imported():
    """Here the test venv has `datasets`, so an import of it by the bench would pass unseen: the dry run itself
    checks that its process holds no module of the wheels the device lacks."""
    sys.path.insert(0, str(REPO_ROOT / "bench" / "gpu"))
    try:
        image = importlib.import_module("image")
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "gpu"))
    assert image.off_image(["json", "datasets.arrow_dataset", "vllm", "PIL.Image", "httpx"]) == ["datasets", "vllm"]
    done = bench_in("import datasets\n" + RUN_BENCH, "bench/gpu/arms/mps.toml", "--dry-run")
    assert done.returncode != 0 and "datasets" in done.stderr, done.stderr[-3000:]


def test_wait_reports_a_detached_run_that_died_with_its_status_and_log(tmp_path):
    """A detached run that exits early (here: no vLLM installed in --site) is reported at once, with its exit status
    and the end of its log, instead of being waited for until the call's time runs out."""
    arms = tmp_path / "one.toml"
    arms.write_text('[bench]\nname = "one"\npages = 4\n\n[[arm]]\nname = "s"\nrecipe = "lighton-ocr3-saturate.py"\n')
    out = tmp_path / "out"
    bench = [str(VENV_PYTHON), "bench/gpu/bench.py"]
    site = ["--site", str(tmp_path / "no-site"), "--work", str(tmp_path / "work")]
    detached = subprocess.run(
        [*bench, str(arms), "--out", str(out), "--detach", *site], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert detached.returncode == 0, detached.stderr
    waited = subprocess.run(
        [*bench, "--wait", str(out), "--seconds", "60"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert waited.returncode == 5, waited.stdout
    assert "exit status 3" in waited.stdout and "no vllm in" in waited.stdout, waited.stdout
