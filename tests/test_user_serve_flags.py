"""A user's `--extra-serve-args` read as the pinned vLLM's own parser reads them: what each replica is started with,
what the plan records, what is masked, and what the fingerprint keeps.

Each scenario is one that went wrong while the plan imitated vLLM's parser by hand: a dotted key respelled, a short
alias not seen, a memory share split and then given whole, the second key of `--api-key K1 K2` in clear, and a
fingerprint that read the spelling. vLLM's merge of dotted keys is checked with the test bed's own
FlexibleArgumentParser.
"""

from __future__ import annotations

import json
import shlex

import pytest

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.planning.engine_plan import plan_engine
from ocr_core.planning.machine import Gpu, Machine
from ocr_core.planning.plan_records import engine_request
from ocr_core.planning.serve_flags import flag_value, user_flags
from ocr_core.redaction import SECRET_VALUES, redact, register_run_secrets
from ocr_models import model_module
from tests.testbed.handles import fingerprint_of

H200 = Gpu("0", "NVIDIA H200", 143771)
MACHINE = Machine((H200,), 23)
LIGHTON = model_module("lighton_ocr3").FACTS
OVIS = model_module("ovis_ocr2").FACTS
NANONETS = model_module("nanonets_ocr2").FACTS
HPD = model_module("hpd_parsing").FACTS


def settings_for(facts, *argv: str, serve: str | None = None):
    extra = [f"--extra-serve-args={serve}"] if serve is not None else []
    return parse_arguments(build_parser("recipe.py", facts, "saturate"), ["in", "./out", *argv, *extra])


def plan_for(facts, serve: str, *argv: str, version: str | None = None):
    settings = settings_for(facts, *argv, serve=serve)
    return plan_engine(engine_request(facts, settings), MACHINE, version or facts.vllm_pin)


def vllm_reads(flags, option: str):
    """The value `flags` give the JSON option `option` (each of its flags, whole or dotted, with its one value), as
    the test bed's vLLM parser (FlexibleArgumentParser) merges them."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm serve")
    parser.add_argument(option, type=json.loads)
    words = [word for at, word in enumerate(flags) if any(name.startswith(option) for name in (word, flags[at - 1]))]
    return getattr(parser.parse_args(words), option.removeprefix("--").replace("-", "_"))


def test_a_dotted_key_reaches_vllm_as_typed():
    plan = plan_for(LIGHTON, "--compilation-config.compile_mm_encoder true")
    assert "--compilation-config.compile_mm_encoder" in plan.flags
    assert not any("compile-mm-encoder" in flag for flag in plan.flags)
    assert all(launch.flags[-2:] == ("--compilation-config.compile_mm_encoder", "true") for launch in plan.replicas())


def test_a_dotted_key_of_the_recipes_json_flag_is_merged_into_it_as_vllm_merges():
    """The user narrows one key of the recipe's pixel band; vLLM keeps the recipe's other key."""
    plan = plan_for(OVIS, "--mm-processor-kwargs.images_kwargs.max_pixels 1000000")
    read = vllm_reads(plan.flags, "--mm-processor-kwargs")
    assert read == {"images_kwargs": {"min_pixels": 200704, "max_pixels": 1000000}}
    assert plan.flags[-2:] == ("--mm-processor-kwargs.images_kwargs.max_pixels", "1000000")


def test_a_whole_json_value_still_replaces_the_recipes():
    plan = plan_for(OVIS, '--mm-processor-kwargs \'{"images_kwargs": {"max_pixels": 5}}\'')
    assert vllm_reads(plan.flags, "--mm-processor-kwargs") == {"images_kwargs": {"max_pixels": 5}}


@pytest.mark.parametrize(
    ("alias", "option"),
    [("-asc", "--api-server-count"), ("-tp", "--tensor-parallel-size")],
)
def test_a_short_alias_replaces_the_plans_flag_and_the_record_says_so(alias, option):
    facts = OVIS if alias == "-tp" else LIGHTON
    plan = plan_for(facts, f"{alias} 1")
    assert option not in plan.flags, f"{alias} left {option} beside it"
    assert plan.flags[-2:] == (alias, "1")
    if alias == "-asc":
        assert plan.api_servers == 1 and plan.record()["api_servers"] == 1
        assert plan.replaced == ("--api-server-count",)
        assert "replaces --api-server-count" in plan.describe()


def test_O3_is_the_optimization_level_of_the_releases_that_read_it_so():
    plan = plan_for(LIGHTON, "-O3 --optimization-level 2")
    assert flag_value(plan.spelled, "--optimization-level") == "2"
    assert plan.flags[-3:] == ("-O3", "--optimization-level", "2")


def test_a_memory_share_the_user_gives_is_the_budget_the_replicas_on_a_gpu_split():
    plan = plan_for(LIGHTON, "--gpu-memory-utilization 0.95", "--replicas", "3")
    share = plan.scale.memory_share
    assert share is not None and share < 0.95 / 2
    for launch in plan.replicas():
        assert float(flag_value(launch.flags, "--gpu-memory-utilization")) == share
    assert "0.95" not in plan.flags
    assert plan.record()["gpu_memory_utilization"] == share
    assert "--gpu-memory-utilization 0.95 is the GPU's budget" in plan.describe()
    assert f"{share:.2f} to each of the 3 replicas" in plan.describe()


def test_one_replica_on_a_gpu_takes_the_share_the_user_gives_whole():
    plan = plan_for(LIGHTON, "--gpu-memory-utilization 0.95", "--replicas", "1")
    assert all(float(flag_value(launch.flags, "--gpu-memory-utilization")) == 0.95 for launch in plan.replicas())


def test_every_key_of_api_key_is_a_secret():
    SECRET_VALUES.clear()
    try:
        words = user_flags("--api-key first-key-111 second-key-222 --max-num-seqs 4")
        register_run_secrets((), None, words, environ={})
        plan = plan_for(LIGHTON, shlex.join(words))
        printed = redact(json.dumps(plan.record()) + " " + " ".join(plan.flags))
        assert "first-key-111" not in printed and "second-key-222" not in printed
        assert "--max-num-seqs 4" in printed
    finally:
        SECRET_VALUES.clear()


def test_a_secret_flag_is_known_by_the_option_vllm_reads_not_by_its_spelling():
    """vLLM reads `--api-k` as `--api-key` (an abbreviation): both its keys are secrets from the moment it is parsed."""
    SECRET_VALUES.clear()
    try:
        settings_for(LIGHTON, serve="--api-k third-key-333 fourth-key-444")
        assert redact("third-key-333 fourth-key-444") == "*** ***"
    finally:
        SECRET_VALUES.clear()


@pytest.mark.parametrize(
    "spellings",
    [
        ("--dtype=float16", "--dtype float16"),
        ("--chat-template-content-format=openai", "--chat_template_content_format openai"),
        ("--mm-processor-kwargs.images_kwargs.max_pixels=5", "--mm-processor-kwargs.images_kwargs.max_pixels 5"),
    ],
    ids=["equals", "underscores", "dotted"],
)
def test_two_spellings_of_one_command_are_one_fingerprint(spellings):
    prints = [fingerprint_of(settings_for(OVIS, serve=words), OVIS, "ovis.py", None, 10) for words in spellings]
    assert prints[0] == prints[1]
    assert prints[0]["serve_args"] != fingerprint_of(settings_for(OVIS), OVIS, "ovis.py", None, 10).get("serve_args")


@pytest.mark.parametrize(
    ("facts", "serve", "said"),
    [
        (LIGHTON, "--max-num-sequences 8", ["--max-num-sequences", "vLLM 0.30.0", "--max-num-seqs"]),
        (NANONETS, "--renderer-num-workers 2", ["--renderer-num-workers", "vLLM 0.10.2"]),
        (LIGHTON, "--max-num-seqs.x 8", ["--max-num-seqs.x", "no dotted keys"]),
        (LIGHTON, "--max-num-seqs 8 9", ["word 3", "no flag's value"]),
    ],
    ids=["unknown", "newer-release", "dotted-on-a-number", "stray-word"],
)
def test_a_flag_the_pinned_vllm_would_refuse_is_exit_2_at_parse_time(facts, serve, said, capsys):
    with pytest.raises(SystemExit) as refused:
        settings_for(facts, serve=serve)
    err = capsys.readouterr().err
    assert refused.value.code == 2
    assert all(words in err for words in said), err


def test_a_recipe_whose_vllm_has_no_table_passes_the_flags_with_a_note(capsys):
    settings = settings_for(HPD, serve="--some-fork-flag 3")
    assert settings.extra_serve_args == "--some-fork-flag 3"
    assert capsys.readouterr().err.count("no flag table") == 1


def test_an_unclosed_quote_names_the_problem_and_never_the_words(capsys):
    """Neither stderr nor the summary line's failure (the parser's message) holds the words."""
    parser = build_parser("recipe.py", LIGHTON, "saturate")
    with pytest.raises(SystemExit) as refused:
        parse_arguments(parser, ["in", "./out", "--extra-serve-args=--api-key sk-secret-123 --chat-template '{{ x"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "close the quote" in err and "--extra-serve-args" in err
    for said in (err, parser.failure):
        assert "sk-secret-123" not in said and "{{ x" not in said
