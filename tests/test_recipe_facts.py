"""The generated scripts and the model hooks, checked without a server."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ocr_core.cli import job_command, job_timeout, without_secrets
from ocr_core.facts import ModelFacts
from ocr_core.server import parse_metrics
from ocr_models import RECIPES, hpd_parsing, lighton_ocr3, nanonets_ocr2, ovis_ocr2, recipe
from tools import build_scripts

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {entry.script: importlib.import_module(f"ocr_models.{entry.model}") for entry in RECIPES}
SERVER_ONLY = ("class Pump:", "def post_chat(", "class Window:", "class MemoryGuard:", "def watch_for_stalls(")
OFFLINE_ONLY = ("class OfflineRunner:", "def open_llm(")


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_generated_scripts_match_the_core():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_scripts.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_script_carries_only_the_code_its_shape_runs(script):
    text = (ROOT / script).read_text()
    offline = recipe(script).shape == "offline"
    assert [marker for marker in SERVER_ONLY if marker in text] == ([] if offline else list(SERVER_ONLY))
    assert [marker for marker in OFFLINE_ONLY if marker in text] == (list(OFFLINE_ONLY) if offline else [])


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_contents_map_points_at_each_section_and_at_main(script):
    lines = (ROOT / script).read_text().splitlines()
    rows = [re.match(r"#   line +(\d+)  (ocr_core/\w+\.py): ", line) for line in lines]
    sections = [(int(row[1]), row[2]) for row in rows if row]
    assert len(sections) >= 20
    assert all(lines[number - 1] == f"# ---- {module} ----" for number, module in sections)
    main_at = int(re.search(r"`main` at line (\d+)", " ".join((ROOT / script).read_text().split()))[1])
    assert lines[main_at - 1].startswith("def main(")
    assert lines[int(re.search(r"`build_parser`\): line (\d+)", "\n".join(lines))[1]) - 1].startswith(
        "def build_parser("
    )


def test_a_misspelt_fact_in_a_model_module_is_refused(tmp_path):
    path = tmp_path / "lighton_ocr3.py"
    path.write_text(
        (ROOT / "src" / "ocr_models" / "lighton_ocr3.py").read_text().replace("MAX_SIDE = ", "MAX_SIDES = ")
    )
    with pytest.raises(SystemExit, match="'MAX_SIDES', which is neither a model fact nor a hook"):
        build_scripts.check_model_names(recipe("lighton-ocr3.py"), build_scripts.split_module(path))


def test_the_hooks_a_model_overrides_are_named():
    module = build_scripts.split_module(ROOT / "src" / "ocr_models" / "hpd_parsing.py")
    overridden = build_scripts.check_model_names(recipe("hpd-parsing-saturate.py"), module)
    assert sorted(overridden) == ["build_content", "parse", "prepare_serve", "summary_metrics"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_no_arguments_prints_usage_and_the_job_command(script):
    result = run_script(script)
    assert result.returncode == 0, result.stderr
    facts = ModelFacts.from_namespace(vars(SCRIPTS[script]))
    assert facts.image in result.stdout
    assert script in result.stdout
    assert ("--server" in result.stdout) == (script.endswith(("-server.py", "-saturate.py")))


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_max_tokens_must_leave_room_for_the_prompt(script):
    result = run_script(script, "in", "./out", "--max-model-len", "1024", "--max-tokens", "1024")
    assert result.returncode == 2
    assert "--max-tokens 1024 must be below --max-model-len 1024" in result.stderr


def test_job_command_never_carries_the_token():
    facts = ModelFacts.from_namespace(vars(lighton_ocr3))
    command = job_command("lighton-ocr3-saturate.py", facts, ["a/b", "c/d", "--hf-token", "hf_secret", "--shuffle"])
    assert "hf_secret" not in command
    assert command.startswith("hf jobs uv run --flavor l4x1 --timeout 4h --image vllm/vllm-openai:v0.30.0 -s HF_TOKEN ")
    assert command.endswith("a/b c/d --shuffle")
    assert without_secrets(["--hf-token=hf_x", "x"]) == ["x"]


def test_hpd_job_command_installs_uv_on_the_vendor_image():
    facts = ModelFacts.from_namespace(vars(hpd_parsing))
    command = job_command("hpd-parsing-saturate.py", facts, ["a/b", "c/d"])
    assert command.startswith(f"hf jobs run --flavor l4x1 --timeout 4h -s HF_TOKEN {hpd_parsing.IMAGE} bash -lc")
    assert "pip install -q uv && uv run" in command


@pytest.mark.parametrize("script", ["hpd-parsing-saturate.py", "lighton-ocr3-saturate.py"])
def test_the_job_command_gives_each_argument_to_the_script_as_it_was_given(script, tmp_path):
    """The printed command goes through a shell (and HPD's through a second one, `bash -lc`): an argument with a
    space stays one argument and shell characters in one are never run."""
    recipe = next(recipe for recipe in RECIPES if recipe.script == script)
    facts = ModelFacts.from_namespace(vars(importlib.import_module(f"ocr_models.{recipe.model}")))
    marker = tmp_path / "ran"
    arguments = ["my scans", "c/d", "--config", f"$(touch {marker})", "--columns", "it's;`touch " + str(marker) + "`"]
    command = job_command(script, facts, arguments)
    shells = [command]
    words = shlex.split(command)
    if "-lc" in words:
        assert words.index("-lc") == len(words) - 2, "the inner command must be one word of the outer shell"
        shells.append(words[-1])
        words = shlex.split(words[-1])
    assert words[-len(arguments) :] == arguments
    for line in shells:  # each shell runs its line, with the programs it names stubbed out
        subprocess.run(["bash", "-c", f"hf() {{ :; }}; pip() {{ :; }}; uv() {{ :; }}; {line}"], check=True)
    assert not marker.exists(), "a shell ran part of an argument"


def test_hpd_keeps_prefix_caching_on():
    assert "--enable-prefix-caching" in hpd_parsing.SERVE_ARGS
    assert "--no-enable-prefix-caching" not in hpd_parsing.SERVE_ARGS
    assert hpd_parsing.SERVE_ENV == {"MAX_PATCHES_WITH_RESIZE": "true"}


def test_hpd_parse_gives_structured_blocks():
    raw = (
        "<BLOCK>title [102, 40, 898, 88]<CHILD>Annual Report"
        "<BLOCK>image [100, 120, 500, 400]"
        "<BLOCK>text [100, 420, 900, 600]<CHILD>The river rose twice.\n"
    )
    parsed = hpd_parsing.parse(raw, {})
    assert parsed.text == "Annual Report\n\nThe river rose twice."
    assert parsed.extra["hpd_blocks"] == [
        {"type": "title", "bbox": [102, 40, 898, 88], "text": "Annual Report"},
        {"type": "image", "bbox": [100, 120, 500, 400], "text": None},
        {"type": "text", "bbox": [100, 420, 900, 600], "text": "The river rose twice."},
    ]
    assert hpd_parsing.parse("plain words", {}).text == "plain words"


def test_hpd_prefix_cache_hit_rate():
    before = {"vllm:prefix_cache_queries_total": 100.0, "vllm:prefix_cache_hits_total": 10.0}
    after = {"vllm:prefix_cache_queries_total": 300.0, "vllm:prefix_cache_hits_total": 110.0}
    assert hpd_parsing.summary_metrics(before, after) == {"prefix_cache_hit_rate": 0.5}
    assert hpd_parsing.summary_metrics({}, {}) == {"prefix_cache_hit_rate": None}


def test_hpd_points_the_speculative_head_at_a_local_folder(tmp_path):
    (tmp_path / "P-MTP").mkdir()
    serve_args = hpd_parsing.prepare_serve(list(hpd_parsing.SERVE_ARGS), str(tmp_path))
    config = serve_args[serve_args.index("--speculative-config") + 1]
    assert f'"model": "{tmp_path / "P-MTP"}"' in config
    assert '"num_speculative_tokens": 6' in config


def test_ovis_drops_figure_tags_unless_kept():
    raw = 'Title\n\n<img src="images/bbox_10_20_300_400.jpg" />\n\nBody text.'
    assert ovis_ocr2.parse(raw, {"keep_image_tags": False}).text == "Title\n\nBody text."
    assert "<img" in ovis_ocr2.parse(raw, {"keep_image_tags": True}).text


def test_ovis_trims_a_long_truncated_repeat():
    raw = "Intro line.\n" + "| 1 | 2 |\n" * 1000
    parsed = ovis_ocr2.parse(raw, {"keep_image_tags": False}).text
    assert parsed.count("| 1 | 2 |") == 1


def test_ovis_prompt_follows_the_image():
    content = ovis_ocr2.build_content({"type": "image_url"})
    assert content[0] == {"type": "image_url"}
    assert content[1]["text"].startswith("\nExtract all readable content")


def test_lighton_sends_the_image_alone():
    facts = ModelFacts.from_namespace(vars(lighton_ocr3))
    assert facts.build_content({"type": "image_url"}) == [{"type": "image_url"}]
    assert facts.max_side == 2048
    assert facts.sampling["temperature"] == 0.1


@pytest.mark.parametrize("module", [lighton_ocr3, ovis_ocr2], ids=["lighton", "ovis"])
def test_qwen35_models_prefill_their_linear_attention_with_triton(module):
    """On Hopper vLLM's `auto` picks FlashInfer's GDN prefill kernel, which is JIT-compiled at start and, where
    flashinfer is missing, kills the engine at its first prefill (shared/notes/gpu-vllm.md, vLLM 0.26 on an H200);
    on every other GPU `auto` already resolves to Triton, so pinning it changes nothing there."""
    args = list(module.SERVE_ARGS)
    assert args[args.index("--gdn-prefill-backend") + 1] == "triton"


@pytest.mark.parametrize("script", ["ovis-ocr2.py", "lighton-ocr3.py", "nanonets-ocr2.py"])
def test_offline_header_pins_the_twin_image_version(script):
    module = SCRIPTS[script]
    text = (ROOT / script).read_text()
    assert f'"vllm=={module.VLLM_PIN}",' in text
    assert f"vllm/vllm-openai:v{module.VLLM_PIN}" == module.IMAGE


def test_offline_engine_flags_mean_what_the_serve_flags_mean():
    from ocr_core.offline import engine_flags

    args = ["--limit-mm-per-prompt", "{}", "--default-chat-template-kwargs", "{}", "--served-model-name=x", "--a"]
    assert engine_flags(args) == ["--limit-mm-per-prompt", "{}", "--a"]


def test_nanonets_is_pinned_to_the_last_good_vllm():
    assert nanonets_ocr2.IMAGE == "vllm/vllm-openai:v0.10.2"
    assert nanonets_ocr2.MAX_MODEL_LEN == 32768


def test_parse_metrics_sums_label_sets():
    text = (
        "# HELP vllm:num_requests_waiting x\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 3.0\n'
        'vllm:num_requests_running{model_name="m"} 7.0\n'
    )
    assert parse_metrics(text, ["vllm:num_requests_waiting"]) == {"vllm:num_requests_waiting": 5.0}
    assert parse_metrics(text)["vllm:num_requests_running"] == 7.0


@pytest.mark.parametrize(
    ("rows", "pages_per_s", "timeout"),
    [(None, None, "4h"), (12, 0.0, "4h"), (100, 10.0, "1h"), (100_000, 5.0, "9h"), (1_000_000, 5.0, "84h")],
)
def test_job_timeout_is_sized_for_the_run(rows, pages_per_s, timeout):
    assert job_timeout(rows, pages_per_s) == timeout
