"""A recipe or replicas arm's `env`: the variables an arm adds to the recipe's environment, which the engines it spawns
inherit (VLLM_WORKER_MULTIPROC_METHOD=fork is how vLLM's engine core starts without importing vLLM again). The
arm reads them as written, puts them over the bench's own, says them in the dry run and in the result, and an arm
with an env is not the recipe's defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_bench import dry_run, gpu_module
from tests.testbed.env import VENV_PYTHON

FORK_ARM = """
[[arm]]
name = "fork"
recipe = "lighton-ocr3-saturate.py"
shape = "qwen3_5"
serve_flags = ["--mm-tensor-ipc", "direct_rpc"]
env = { VLLM_WORKER_MULTIPROC_METHOD = "fork", TMPDIR = "/elsewhere" }

[[arm]]
name = "plain"
recipe = "lighton-ocr3-saturate.py"
shape = "qwen3_5"

[[arm]]
kind = "replicas"
name = "r3fork"
replicas = 3
serve_flags = ["--mm-tensor-ipc", "direct_rpc"]
env = { VLLM_WORKER_MULTIPROC_METHOD = "fork" }
runs = [{ name = "a", pages = 8, use = 3 }]
"""


def arms_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "env.toml"
    path.write_text(text)
    return path


def test_an_arms_env_goes_over_the_bench_environment_and_its_tmpdir(tmp_path):
    arms, commands = gpu_module("arms"), gpu_module("commands")
    fork, plain, _ = arms.load(arms_file(tmp_path, FORK_ARM)).arms
    base = {"PATH": "/bin", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    env = commands.recipe_env(base, tmp_path / "tmp", fork)
    assert env == {"PATH": "/bin", "VLLM_WORKER_MULTIPROC_METHOD": "fork", "TMPDIR": "/elsewhere"}
    assert commands.recipe_env(base, tmp_path / "tmp", plain) == {**base, "TMPDIR": str(tmp_path / "tmp")}
    assert not fork.defaults and plain.defaults


@pytest.mark.parametrize("env", ['["VLLM_WORKER_MULTIPROC_METHOD=fork"]', "{ OMP_NUM_THREADS = 4 }"])
def test_an_env_that_is_not_a_table_of_strings_is_refused(tmp_path, env):
    arms = gpu_module("arms")
    text = f'[[arm]]\nname = "x"\nrecipe = "lighton-ocr3-saturate.py"\nenv = {env}\n'
    with pytest.raises(arms.ArmsError, match=re.escape("arm 1 (x): env is a table of strings")):
        arms.load(arms_file(tmp_path, text))


def test_the_dry_run_prints_an_arms_env_before_its_command(tmp_path):
    done = dry_run(arms_file(tmp_path, FORK_ARM))
    assert done.returncode == 0, done.stderr
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines() if not line.startswith(" ")}
    assert lines["fork"].startswith("fork: VLLM_WORKER_MULTIPROC_METHOD=fork TMPDIR=/elsewhere ")
    assert "--mm-tensor-ipc direct_rpc" in lines["fork"]
    assert lines["plain"].startswith(f"plain: {VENV_PYTHON} ")


def test_a_replicas_arms_env_reaches_each_replica_and_its_profiling_env(tmp_path):
    arms, profiling = gpu_module("arms"), gpu_module("profiling")
    replicas = arms.load(arms_file(tmp_path, FORK_ARM)).arms[2]
    env = profiling.prepare(replicas, {"PATH": "/bin"}, tmp_path / "traces", tmp_path / "imports")
    assert env == {"PATH": "/bin", "VLLM_WORKER_MULTIPROC_METHOD": "fork"}


def test_the_dry_run_prints_a_replicas_arms_env_before_the_planned_argv(tmp_path):
    done = dry_run(arms_file(tmp_path, FORK_ARM))
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("r3fork:")]
    assert line.startswith("r3fork: 3 x (VLLM_WORKER_MULTIPROC_METHOD=fork the argv of each replica the recipe plans")
    assert "--load-format dummy --mm-tensor-ipc direct_rpc" in line


def test_the_results_file_keeps_an_arms_env_with_its_meaning():
    results = gpu_module("results")
    fork = {"env": {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}, "summary": {}}
    assert results.arm_of(fork)["env"] == {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}
    assert "env" in results.DEFINITIONS
