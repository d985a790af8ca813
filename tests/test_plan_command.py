"""`--plan` on every recipe: the plan as JSON on stdout, exit 0, and nothing loaded, written or fetched.

The seven scripts run as processes with the test bed's python (no GPU here: one server, or the in-process engine),
each on an OUTPUT that must still not exist afterwards; one recipe runs in-process on an injected machine (one H200,
16 CPU cores, vLLM 0.26.0), where the plan is the one a GPU box would print.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ocr_core.planning import installed, machine
from ocr_models import RECIPES, model_module
from tests.testbed.env import REPO_ROOT, VENV_PYTHON
from tests.testbed.recipes import run_entry

PAGE_FILES = "each image, each TIFF frame and each PDF page"

H200 = machine.Machine((machine.Gpu("0", "NVIDIA H200", 143771),), 16)
VERSIONS = {"vllm": "0.26.0", "torch": "2.9.0", "triton": "3.5.0"}
PDF = REPO_ROOT / "samples" / "pdf" / "sample-pages.pdf"
INPUTS = {"offline": "./samples/pages", "server": str(PDF), "saturate": "someone/scans"}


def plain_env() -> dict[str, str]:
    """A shell's environment with the core from src/ and no `vllm` command: the Hub offline, so a call would fail."""
    path = os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])
    bare = os.pathsep.join(part for part in os.environ["PATH"].split(os.pathsep) if not (part and os.path.isfile(
        os.path.join(part, "vllm"))))  # fmt: skip
    return {**os.environ, "PYTHONPATH": path, "PATH": bare, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.mark.heavy
def test_every_recipe_prints_its_plan_and_touches_nothing(tmp_path):
    """All seven scripts at once (each is a Python start-up and, offline, vLLM's import for its parser: minutes on
    a busy 2-core machine)."""
    started = {}
    for entry in RECIPES:
        output = tmp_path / entry.script
        command = [str(VENV_PYTHON), entry.script, INPUTS[entry.shape], str(output), "--plan", "--max-samples", "3"]
        started[entry] = subprocess.Popen(
            command, cwd=REPO_ROOT, env=plain_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for entry, process in started.items():
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
        plan = json.loads(out)
        assert plan["script"] == entry.script and plan["mode"] == entry.shape
        assert not (tmp_path / entry.script).exists(), "--plan touched OUTPUT"
        if entry.shape == "offline":
            assert plan["engine"]["llm_kwargs"]["max_model_len"] == int(
                plan["engine"]["flags"][plan["engine"]["flags"].index("--max-model-len") + 1]
            )
            assert plan["window"] == {"kind": "batches", "batch_size": 16}
            assert plan["input"] == {"rows": 12, "this_run": 3, "counted": PAGE_FILES}
        else:
            (replica,) = plan["replicas"]
            assert replica["argv"][:3] == ["vllm", "serve", plan["model"]]
            assert replica["argv"][-4:] == ["--host", "127.0.0.1", "--port", "8000"]
            assert plan["cache_key"]["name"] is None, "no vllm on PATH: nothing to key by"
        if entry.shape == "saturate":
            assert plan["input"]["rows"] is None and "no Hub call" in plan["input"]["why"]
            assert plan["window"]["kind"] == "adaptive" and plan["window"]["cap"] == 512
        if entry.shape == "server":
            assert plan["input"] == {"rows": 4, "this_run": 3, "counted": PAGE_FILES}
            assert plan["window"]["kind"] == "fixed"
        counted = plan["input"]["rows"] is not None
        assert ("no rate measured" if counted else "not counted") in plan["projection"]["why"]
        if entry.script.startswith("hpd"):
            assert "serve hook" in plan["serve_hook"]


@pytest.fixture
def on_an_h200(monkeypatch):
    """The plan's machine and installed vLLM, injected where the plan reads them."""
    monkeypatch.setattr(machine, "detect_machine", lambda: H200)
    monkeypatch.setattr(installed, "served_versions", lambda: dict(VERSIONS))
    monkeypatch.setattr(installed, "versions_of", lambda *interpreter: dict(VERSIONS))


def plan_of(script: str, argv: list[str], capsys) -> dict:
    assert run_entry(script, [*argv, "--plan"]) == 0
    return json.loads(capsys.readouterr().out)


def test_on_an_h200_the_plan_shows_each_replicas_command_key_window_and_projection(on_an_h200, tmp_path, capsys):
    pages = tmp_path / "scans"
    pages.mkdir()
    for index in range(4540):  # 0.1 h at the 12.61 pages/s models.json records for this recipe on an H200
        (pages / f"p{index:05d}.png").touch()
    cache = tmp_path / "cache"
    plan = plan_of(
        "lighton-ocr3-saturate.py", [str(pages), str(tmp_path / "out"), "--engine-cache", str(cache)], capsys
    )
    assert [replica["env"] for replica in plan["replicas"]] == [{"CUDA_VISIBLE_DEVICES": "0"}] * 3
    ports = [replica["argv"][-1] for replica in plan["replicas"]]
    assert ports == ["8000", "8001", "8002"]
    argv = plan["replicas"][0]["argv"]
    assert argv[argv.index("--renderer-num-workers") + 1] == "2"
    assert argv[3:-4] == plan["engine_plan"]["serve_args"]
    assert plan["started_together"] is True
    assert plan["cuda_mps"] is True, "three replicas share the one GPU"
    assert plan["cache_key"]["name"].startswith("vllm0.26.0-nvidia-h200-lightonocr-3-0.8b-")
    assert "VLLM_CACHE_ROOT" in plan["cache_key"]["env_added"] and not cache.exists()
    assert plan["window"]["engines"] == 3 and plan["window"]["max_num_seqs"] == 1024
    assert plan["input"] == {"rows": 4540, "this_run": 4540, "counted": PAGE_FILES}
    projection = plan["projection"]
    assert projection["pages_per_s"] == 12.61 and projection["hours"] == 0.1
    assert projection["usd"] == 0.5 and "HF Jobs price of h200" in projection["price_basis"]
    assert not (tmp_path / "out").exists()


def test_the_plan_masks_every_secret(on_an_h200, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_" + "a" * 30)
    secret = "sk-plan-secret-1234"
    extra = f"--extra-serve-args=--api-key {secret} --max-num-seqs 64"
    plan = plan_of("ovis-ocr2-server.py", ["someone/scans", str(tmp_path / "out"), extra], capsys)
    text = json.dumps(plan)
    assert secret not in text and "hf_aaaa" not in text
    argv = plan["replicas"][0]["argv"]
    assert argv[argv.index("--api-key") + 1] == "***"
    assert plan["window"]["max_num_seqs"] == 64


def test_a_run_on_servers_it_is_given_plans_to_start_nothing(on_an_h200, tmp_path, capsys):
    servers = "http://gpu-box:8000,http://gpu-box:8001"
    plan = plan_of("nanonets-ocr2-server.py", ["someone/scans", str(tmp_path / "out"), "--server", servers], capsys)
    assert plan["starts"].startswith("nothing") and "replicas" not in plan
    assert plan["servers"] == servers.split(",")
    assert plan["window"]["engines"] == 2 and plan["window"]["max_num_seqs"] == 256


def test_plan_with_jobs_is_refused_with_the_dry_run_offered(tmp_path, capsys):
    code = run_entry("lighton-ocr3-saturate.py", ["a/b", "c/d", "--jobs", "2", "--plan"])
    assert code == 2
    assert "--dry-run prints each job's command" in capsys.readouterr().err


def test_replicas_that_do_not_fit_exit_2_with_the_fix(on_an_h200, tmp_path, capsys):
    code = run_entry("nanonets-ocr2-server.py", ["a/b", str(tmp_path / "out"), "--replicas", "40", "--plan"])
    assert code == 2
    assert "--replicas 40 does not fit" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("entry", [entry for entry in RECIPES if entry.shape != "offline"], ids=lambda e: e.script)
def test_models_json_shows_the_plan_the_recipes_plan_prints(entry, monkeypatch, tmp_path, capsys):
    """models.json's replica_plan per machine (tools/docs.py) is the machine plan the recipe's --plan prints there,
    under the recipe's pinned vLLM: both read the model card's flags (Ovis's processor cache off lets 0.22.1 run
    renderer threads)."""
    from tools.docs import MODELS_JSON, PLAN_MACHINES

    shown = json.loads(MODELS_JSON.read_text())[entry.script]["replica_plan"]
    facts = model_module(entry.model).FACTS
    monkeypatch.setattr(installed, "served_versions", lambda: {"vllm": facts.vllm_pin})
    for name, planned_on in PLAN_MACHINES.items():
        monkeypatch.setattr(machine, "detect_machine", lambda planned_on=planned_on: planned_on)
        assert shown[name] == plan_of(entry.script, ["a/b", str(tmp_path / "out")], capsys)["plan"], name
