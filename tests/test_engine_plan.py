"""The engine plan decides each replica's exact command once; the cache key, the results' fingerprint, the window and
the summary read it, so a change of the command changes the key, and nothing else does.

Scenarios over fake machines (no GPU needed): every engine flag the recipe, the plan or the user may give is varied
in turn, in every spelling vLLM's parser takes.
"""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.errors import CommandError
from ocr_core.planning.engine_plan import EngineRequest, plan_engine
from ocr_core.planning.machine import Gpu, Machine
from ocr_core.planning.plan_records import engine_request
from ocr_core.planning.serve_flags import canonical, flag_value, merged, user_flags
from ocr_core.serving.engine_cache import make_key
from ocr_core.store.manifest import SPEED_ONLY_FLAGS
from ocr_models import model_module
from tests.testbed.handles import fingerprint_of

H200 = Gpu("0", "NVIDIA H200", 143771)
MACHINE = Machine((H200,), 23)
VERSIONS = {"vllm": "0.26.0", "torch": "2.11.0", "triton": "3.5.0"}
SCRIPT = "lighton-ocr3-saturate.py"
FACTS = model_module("lighton_ocr3").FACTS
# One flag of each kind: speed or memory only (the results stay valid), text-changing, a switch, and the plan's own.
VARIED = (
    ("--max-num-seqs", "64"),
    ("--gpu-memory-utilization", "0.5"),
    ("--max-num-batched-tokens", "16384"),
    ("--api-server-count", "1"),
    ("--renderer-num-workers", "3"),
    ("--kv-cache-memory-bytes", "1000000000"),
    ("--enforce-eager",),
    ("--chat-template-content-format", "openai"),
    ("--mm-processor-kwargs", '{"max_pixels": 1000000}'),
    ("--dtype", "float16"),
    ("--max-model-len", "4096"),
)


def settings_for(*extra: str):
    argv = ["in", "./out", *extra]
    return parse_arguments(build_parser(SCRIPT, FACTS, "saturate"), argv)


def run_plan(*user: str, machine: Machine = MACHINE):
    settings = settings_for(f"--extra-serve-args={shlex.join(user)}") if user else settings_for()
    plan = plan_engine(engine_request(FACTS, settings), machine, "0.26.0")
    key = make_key(VERSIONS, [gpu.name for gpu in machine.gpus], settings.model, plan.spelled)
    manifest = fingerprint_of(settings, FACTS, SCRIPT, None, 10)
    return plan, key.name, json.dumps(manifest.get("serve_args"))


@pytest.mark.parametrize("flag", VARIED, ids=lambda flag: flag[0])
def test_the_cache_key_changes_exactly_when_the_engine_command_changes(flag):
    base_plan, base_key, base_print = run_plan()
    plan, key, printed = run_plan(*flag)
    assert plan.flags != base_plan.flags, f"{flag} changed nothing in the command"
    assert key != base_key, f"{flag} changed the command but not the cache key"
    again_plan, again_key, _ = run_plan(*flag)
    assert (again_plan.flags, again_key) == (plan.flags, key), "the same command must find the same archive"
    speed_only = flag[0] in SPEED_ONLY_FLAGS
    assert (printed == base_print) == speed_only, f"{flag}: the fingerprint must change only for text flags"


@pytest.mark.parametrize(
    "spelling",
    [["--max_num_seqs", "64"], ["--max-num-seqs=64"], ["--max_num_seqs=64"]],
    ids=["underscores", "equals", "both"],
)
def test_every_spelling_vllm_takes_is_one_command_one_key_and_one_fingerprint(spelling):
    """vLLM gets the user's words as typed; the key, the fingerprint and every reading of the flags are one."""
    plan, key, printed = run_plan("--max-num-seqs", "64")
    spelt_plan, spelt_key, spelt_print = run_plan(*spelling)
    assert (spelt_plan.spelled, spelt_key, spelt_print) == (plan.spelled, key, printed)
    assert spelt_plan.max_num_seqs() == plan.max_num_seqs() == 64
    assert spelt_plan.flags[-len(spelling) :] == tuple(spelling)
    assert [flag for flag in spelt_plan.flags if "num-seqs" in flag or "num_seqs" in flag] == spelling[:1]


def test_a_machine_that_plans_another_front_end_gets_another_key_and_the_same_fingerprint():
    _, key, printed = run_plan()
    smaller = dataclasses.replace(MACHINE, cpus=8)
    small_plan, small_key, small_print = run_plan(machine=smaller)
    assert small_key != key and small_print == printed
    assert small_plan.scale.front_end != run_plan()[0].scale.front_end


def test_the_recipes_flags_pass_through_its_hook_before_the_key_and_the_command_read_them(tmp_path):
    """The key read the recipe's flags before HPD's prepare_serve hook, the spawned argv after it: a silent miss or
    a wrong hit. The plan holds the hooked flags, and every replica's launch is exactly them."""
    hpd = model_module("hpd_parsing").FACTS
    settings = parse_arguments(build_parser("hpd.py", hpd, "saturate"), ["in", "./out"])
    (tmp_path / "P-MTP").mkdir()
    hooked = tuple(hpd.prepare_serve(list(hpd.serve_args), str(tmp_path)))
    plan = plan_engine(engine_request(hpd, settings), MACHINE, "0.26.0", hooked)
    spec = json.loads(flag_value(plan.flags, "--speculative-config") or "{}")
    assert spec["model"] == str(tmp_path / "P-MTP")
    assert all(launch.flags == plan.flags for launch in plan.replicas())
    key = make_key(VERSIONS, ["NVIDIA H200"], settings.model, plan.spelled)
    assert key is not None and str(tmp_path / "P-MTP") in " ".join(key.flags)


def test_the_offline_engine_reads_the_same_layering():
    settings = settings_for("--max-model-len", "16384", "--extra-serve-args=--max_model_len 4096 --max-num-seqs=4")
    flags = engine_request(FACTS, settings).offline_flags()
    assert flag_value(flags, "--max-model-len") == "4096" and flags.count("--max-model-len") == 1
    assert flags[-4:] == ["--max-model-len", "4096", "--max-num-seqs", "4"]


def test_an_unclosed_quote_in_extra_serve_args_is_the_users_to_fix():
    with pytest.raises(CommandError, match="close the quote"):
        user_flags("--chat-template '{{ x }}")


def test_the_flag_reader_reads_as_vllm_does():
    words = ["--a_b", "1", "--no-enable-x", '--c={"k": 1}', "--d", "-5", "--e"]
    assert flag_value(words, "--a-b") == "1" and flag_value(words, "--d") == "-5"
    assert flag_value(words, "--enable-x") is None and flag_value(words, "--c") == '{"k": 1}'
    assert merged(["--enable-x", "--a-b", "2"], ["--no-enable-x"]) == ["--a-b", "2", "--no-enable-x"]
    assert canonical(["--a_b=1", "--d=-5"]) == ["--a-b", "1", "--d=-5"]
    assert EngineRequest("m", 10, ("--a", "1"), ("--a=2",)).engine_flags() == ["--a", "2"]


def test_a_command_line_whose_extra_serve_args_cannot_be_split_is_refused_at_once(capsys):
    with pytest.raises(SystemExit) as refused:
        settings_for("--extra-serve-args=--chat-template '{{ x }}")
    assert refused.value.code == 2 and "close the quote" in capsys.readouterr().err
