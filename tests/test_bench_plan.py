"""The bench starts the replicas the recipe would start: a replicas arm takes each replica's argv from the plan the
recipe's own `--plan` prints, so "3 replicas as shipped" measures the front end the recipe really runs.

Both sides run as processes with the test bed's python on a machine injected through a `sitecustomize` (one H200,
16 CPU cores, vLLM 0.26.0), so the comparison is the one a GPU box would make.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_bench import gpu_module
from tests.testbed.env import REPO_ROOT

H200_MIB = 143771
SITE = """
from ocr_core.planning import installed, machine

H200 = machine.Machine((machine.Gpu("0", "NVIDIA H200", {mib}),), 16)
VERSIONS = {{"vllm": "0.26.0", "torch": "2.9.0", "triton": "3.5.0"}}
machine.detect_machine = lambda: H200
installed.served_versions = lambda: dict(VERSIONS)
"""


def injected_env(tmp_path: Path) -> dict[str, str]:
    """The test bed's environment with the core from src/ and the H200 machine injected before any run reads it."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE.format(mib=H200_MIB))
    path = os.pathsep.join([str(site), str(REPO_ROOT / "src"), str(REPO_ROOT)])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


def test_a_replicas_arm_starts_the_argv_the_recipe_plans(tmp_path):
    """Failure 6: the bench planned without the model card's flags, so on vLLM 0.26 its replicas had one renderer
    thread where the recipe starts two. Now the arm's replicas are the recipe's `--plan`, run as the recipe."""
    arms, commands, fleet = gpu_module("arms"), gpu_module("commands"), gpu_module("fleet")
    paths = commands.Paths(sys.executable, REPO_ROOT, tmp_path / "pages", tmp_path / "models", tmp_path / "out",
                           tmp_path / "logs")  # fmt: skip
    bench = arms.Bench("t")
    arm = arms.ReplicasArm("r3", 3, (arms.Run("a", 8, 3),), serve_flags=("--max-num-seqs", "64"))
    env = injected_env(tmp_path)
    benched = fleet.planned_launches(commands.plan_command(paths, bench, arm), env).launches

    recipe_argv = [str(paths.pages), str(paths.outputs / "r3"), *commands.sampling(paths, bench, arm.shape, None),
                   "--replicas", "3", "--extra-serve-args=--load-format dummy --max-num-seqs 64", "--plan"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / arm.recipe), *recipe_argv],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    planned = json.loads(done.stdout)["replicas"]
    assert [list(launch.argv) for launch in benched] == [replica["argv"][:-4] for replica in planned]
    assert [dict(launch.env) for launch in benched] == [replica["env"] for replica in planned]
    argv = benched[0].argv
    assert argv[:3] == ("vllm", "serve", str(paths.model(arm.shape)))
    assert argv[argv.index("--renderer-num-workers") + 1] == "2", "the card turns the processor cache off"
    assert argv[argv.index("--max-num-seqs") + 1] == "64" and "--load-format" in argv
    assert len(benched) == 3


def test_a_planned_arm_of_replicas_sharing_a_gpu_runs_under_mps_as_the_recipe_does(tmp_path):
    """The recipe starts NVIDIA's MPS daemon when its replicas share a GPU (shapes/served.py); a planned replicas arm
    left MPS off, so its "shipped plan" baseline ran three replicas taking turns on the SMs. The plan now says
    whether the run uses MPS, and a planned arm without an `mps` key follows it; `mps = false` still turns it off."""
    commands, fleet, bench = gpu_module("commands"), gpu_module("fleet"), gpu_module("bench")
    arms = gpu_module("arms")
    paths = commands.Paths(sys.executable, REPO_ROOT, tmp_path / "pages", tmp_path / "models", tmp_path / "out",
                           tmp_path / "logs")  # fmt: skip
    env = injected_env(tmp_path)
    three = arms.ReplicasArm("r3", 3, (arms.Run("a", 8, 3),))
    planned = fleet.planned_launches(commands.plan_command(paths, arms.Bench("t"), three), env)
    assert planned.mps is True and len(planned.launches) == 3
    assert bench.under_mps(three, planned) is True
    assert bench.under_mps(arms.ReplicasArm("off", 3, (arms.Run("a", 8, 3),), mps=False), planned) is False
    one = arms.ReplicasArm("r1", 1, (arms.Run("a", 8, 1),))
    alone = fleet.planned_launches(commands.plan_command(paths, arms.Bench("t"), one), env)
    assert alone.mps is False and bench.under_mps(one, alone) is False
