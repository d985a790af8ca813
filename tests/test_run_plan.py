"""The run's plan, made once: the world (the machine, the installed vLLM, a server already answering, the model's
serve hook) is read once per run, through the probes the maker is given, and every stage reads the plan."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.planning import installed, machine
from ocr_core.planning.machine import Gpu, Machine
from ocr_core.planning.make_plan import World, make_run_plan
from ocr_core.planning.server_policy import ServerPolicy
from tests.testbed.env import REPO_ROOT
from tests.testbed.fake_server import fake_server
from tests.testbed.recipes import model_facts, run_entry

H100 = Machine((Gpu("0", "NVIDIA H100 80GB HBM3", 81559),), 16)
VERSIONS = {"vllm": "0.22.1", "torch": "2.9.0", "triton": "3.5.0"}
SAMPLES = REPO_ROOT / "samples" / "dataset"


class CountingWorld:
    """A world whose every probe is counted: the machine, the versions, a server answering, a `vllm` on PATH."""

    def __init__(self, found: Machine = H100, answering: bool = False) -> None:
        self.calls: Counter[str] = Counter()
        self.found, self.answers = found, answering

    def world(self) -> World:
        return World(answering=self.answering, machine=self.machine, versions=self.versions, vllm_found=self.vllm)

    def machine(self) -> Machine:
        self.calls["machine"] += 1
        return self.found

    def versions(self, mode: str) -> dict[str, str | None]:
        self.calls["versions"] += 1
        return dict(VERSIONS)

    def answering(self, policy: ServerPolicy) -> bool:
        self.calls["answering"] += 1
        return self.answers

    def vllm(self) -> bool:
        self.calls["vllm"] += 1
        return True


def settings_of(facts, mode: str, *argv: str):
    return parse_arguments(build_parser("x.py", facts, mode), ["IN", "./OUT", *argv])


@pytest.mark.parametrize("mode", ["offline", "server", "saturate"])
def test_a_plan_reads_the_machine_and_the_installed_vllm_once(mode):
    """Before, a served run with an --engine-cache on a GPU read the installed vLLM twice (a subprocess each: once
    for the plan's release-bound flags, once for the cache's key) and the machine in two shapes."""
    facts = model_facts("ovis_ocr2")
    probes = CountingWorld()
    plan = make_run_plan(settings_of(facts, mode, "--engine-cache", "/tmp/cache"), facts, mode, probes.world())
    assert probes.calls["machine"] == 1 and probes.calls["versions"] == 1
    assert plan.cache.key is not None and plan.cache.key.vllm == "0.22.1"
    assert plan.machine == H100


def test_the_served_key_names_the_exact_flags_the_replicas_get():
    facts = model_facts("ovis_ocr2")
    plan = make_run_plan(settings_of(facts, "server", "--engine-cache", "/c"), facts, "server", CountingWorld().world())
    assert plan.engine is not None and plan.cache.key is not None
    assert plan.cache.key.flags == plan.engine.spelled


def test_the_models_serve_hook_runs_once_for_the_whole_fleet_and_not_for_a_server_it_will_not_start():
    """The hook (HPD's fetches its P-MTP folder) runs once, in the plan, before any replica or key, and never where
    the run starts no server: one already answers, --server names another machine, or `--plan` only shows it."""
    calls: list[str] = []

    def hook(serve_args: list[str], model: str) -> list[str]:
        calls.append(model)
        return [*serve_args, "--hooked"]

    facts = dataclasses.replace(model_facts("ovis_ocr2"), prepare_serve=hook)
    settings = settings_of(facts, "server", "--replicas", "3")
    plan = make_run_plan(settings, facts, "server", CountingWorld().world())
    assert len(calls) == 1 and plan.engine is not None and len(plan.engine.replicas()) == 3
    assert all("--hooked" in launch.flags for launch in plan.engine.replicas())
    answered = CountingWorld(answering=True)
    assert not make_run_plan(settings, facts, "server", answered.world()).starts_servers
    make_run_plan(settings, facts, "server", CountingWorld().world(), probe_servers=False)
    remote = settings_of(facts, "server", "--server", "http://10.0.0.9:8000")
    remote_probes = CountingWorld()
    make_run_plan(remote, facts, "server", remote_probes.world())
    assert len(calls) == 1 and answered.calls["answering"] == 1 and remote_probes.calls["answering"] == 0


def test_a_served_run_reads_the_world_once(tmp_path, capsys, monkeypatch):
    """A whole served run (the entry, the job, the shape, publishing) reads the machine and the installed vLLM
    through the plan alone: once each."""
    calls: Counter[str] = Counter()
    detect, versions = machine.detect_machine, installed.served_versions

    def counted(name, probe):
        def call(*args):
            calls[name] += 1
            return probe(*args)

        return call

    monkeypatch.setattr(machine, "detect_machine", counted("machine", detect))
    monkeypatch.setattr(installed, "served_versions", counted("versions", versions))
    with fake_server() as server:
        argv = [str(SAMPLES), str(tmp_path / "out"), "--server", server.url, "--model", server.state.model]
        argv += ["--max-model-len", "1024", "--max-tokens", "16", "--max-samples", "3"]
        assert run_entry("ovis-ocr2-server.py", argv) == 0
    assert calls == {"machine": 1, "versions": 1}


def summary_of(out: str) -> dict:
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def test_two_spellings_of_one_engine_flag_resume_one_run(tmp_path, capsys):
    """`--flag=value` one day and `--flag value` the next are one engine command: the fingerprint reads the plan's
    flags in one spelling, so the rerun resumes instead of asking for --overwrite."""
    out = tmp_path / "out"
    with fake_server() as server:
        base = [str(SAMPLES), str(out), "--server", server.url, "--model", server.state.model]
        base += ["--max-model-len", "1024", "--max-tokens", "16", "--max-samples", "3"]
        first = [*base, "--extra-serve-args=--chat-template-content-format=openai"]
        assert run_entry("ovis-ocr2-server.py", first) == 0
        capsys.readouterr()
        again = [*base, "--extra-serve-args=--chat-template-content-format openai"]
        assert run_entry("ovis-ocr2-server.py", again) == 0
        summary = summary_of(capsys.readouterr().out)
    assert summary["resumed"] == 3 and summary["done_this_run"] == 0
