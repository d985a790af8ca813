"""The shipped scripts, their facts and the model hooks, checked without a server; the scripts run through `uv run`
against the session's core wheel (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from ocr_core.command.script_header import read_header
from ocr_core.facts import ModelFacts
from ocr_core.planning.job_commands import job_command, job_timeout, without_secrets
from ocr_core.serving.prometheus import parse_metrics
from ocr_models import MODELS, RECIPES, hpd_parsing, model_module, ovis_ocr2
from tests.testbed.env import ran_the_installed_wheel, script_command
from tests.testbed.env import testbed_env as bed_env
from tools import release, render
from tools.recipes import facts_of, load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = [entry.script for entry in RECIPES]
TWINS = [(entry.script, entry.twin) for entry in RECIPES if entry.twin and entry.shape == "offline"]
HPD = facts_of("hpd-parsing-saturate.py")
LIGHTON = facts_of("lighton-ocr3.py")


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        script_command(script, *args), capture_output=True, text=True, timeout=300, cwd=ROOT, env=bed_env()
    )


@pytest.mark.parametrize("entry", RECIPES, ids=lambda entry: entry.script)
def test_a_script_is_its_model_s_rendering(entry):
    """Each script states its model's facts where a user edits them, as its model's module states them once."""
    assert (ROOT / entry.script).read_text() == release.rendered(release.core_version())[entry.script]
    assert facts_of(entry.script) == model_module(entry.model).FACTS


@pytest.mark.parametrize(("offline", "server"), TWINS)
def test_twins_state_the_same_facts(offline, server):
    """Twins must never disagree about the model."""
    assert facts_of(offline) == facts_of(server)


def scripts_checkout(tmp_path: Path) -> Path:
    """A checkout's scripts and version, for the release tool to check and render."""
    root = tmp_path / "checkout"
    root.mkdir()
    for name in [*SCRIPTS, "pyproject.toml"]:
        shutil.copyfile(ROOT / name, root / name)
    return root


def test_a_script_edited_by_hand_is_named_with_the_fix_and_rendered_back(tmp_path):
    root = scripts_checkout(tmp_path)
    edited = root / "lighton-ocr3-saturate.py"
    edited.write_text(edited.read_text().replace('"top_p": 1.0', '"top_p": 0.9'))
    assert release.check(root) == [
        "lighton-ocr3-saturate.py: differs from what src/ocr_models/lighton_ocr3.py renders; state the change there "
        "and run python tools/release.py render"
    ]
    assert release.write_scripts(root) == ["wrote lighton-ocr3-saturate.py"]
    assert edited.read_bytes() == (ROOT / "lighton-ocr3-saturate.py").read_bytes()
    assert release.check(root) == [] and release.write_scripts(root) == []


def test_a_release_renders_every_pin_of_its_version(tmp_path):
    root = scripts_checkout(tmp_path)
    project = root / "pyproject.toml"
    project.write_text(project.read_text().replace('version = "0.2.0"', 'version = "0.3.0"'))
    assert len(release.write_scripts(root)) == len(SCRIPTS)
    assert release.check(root) == []
    assert all("ocr-vllm-core==0.3.0" in (root / script).read_text() for script in SCRIPTS)


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.module)
def test_a_model_id_is_stated_in_one_file_under_src(model):
    literal = f'"{model_module(model.module).FACTS.model}"'
    stating = [
        path for path in (ROOT / "src").rglob("*") if path.is_file() and literal in path.read_text(errors="replace")
    ]
    assert stating == [ROOT / "src" / "ocr_models" / f"{model.module}.py"]


def made_up_model(tmp_path: Path, facts: str, hooks: str = "") -> ModuleType:
    path = tmp_path / "made_up_model.py"
    preamble = '"""A model.\n\nWhy its facts.\n"""\n\nfrom ocr_core.facts import ModelFacts\n\n'
    path.write_text(f"{preamble}{hooks}FACTS = {facts}\n")
    spec = importlib.util.spec_from_file_location("ocr_models.made_up_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_facts_the_renderer_cannot_copy_are_refused_with_the_fix(tmp_path):
    stated = 'model="m", image="i", serve_args=(), sampling={}, max_model_len=4096'
    borrowed = made_up_model(tmp_path, f"ModelFacts({stated}, parse=print)")
    with pytest.raises(render.RenderRefused, match="FACTS names print, which the module does not define: define"):
        render.facts_source(borrowed)
    with pytest.raises(render.RenderRefused, match=r"as one FACTS = ModelFacts\(\.\.\.\)"):
        render.facts_source(made_up_model(tmp_path, f"dict({stated})"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_script_is_short_with_its_prompt_and_sampling_on_the_first_screen(script):
    lines = (ROOT / script).read_text().splitlines()
    assert len(lines) < 200
    first_screen = "\n".join(lines[:60])
    assert "FACTS = ModelFacts(" in first_screen
    assert "prompt=" in first_screen and "sampling=" in first_screen


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_offline_script_pins_the_vllm_its_facts_name(script):
    pins = re.findall(r'^#\s+"vllm==([^";]+)(?:;[^"]*)?",$', (ROOT / script).read_text(), re.M)
    offline = next(entry for entry in RECIPES if entry.script == script).shape == "offline"
    assert pins == ([facts_of(script).vllm_pin] if offline else [])


@pytest.mark.parametrize("script", [entry.script for entry in RECIPES if entry.shape == "offline"])
def test_an_offline_header_installs_vllm_on_linux_only(script):
    """vLLM builds for Linux alone: elsewhere the pin would make uv build it from source (and fail) before the
    script could print its usage or launch --jobs."""
    from packaging.requirements import Requirement

    dependencies = read_header((ROOT / script).read_text())["dependencies"]
    vllm = next(Requirement(item) for item in dependencies if item.startswith("vllm"))
    assert str(vllm.specifier) == f"=={facts_of(script).vllm_pin}"
    platforms = {name: vllm.marker.evaluate({"sys_platform": name}) for name in ("linux", "darwin", "win32")}
    assert platforms == {"linux": True, "darwin": False, "win32": False}


def test_a_misspelt_fact_is_refused_when_the_script_starts(capsys):
    fields = {field.name: getattr(LIGHTON, field.name) for field in dataclasses.fields(ModelFacts)}
    with pytest.raises(SystemExit) as stopped:
        ModelFacts(**{**fields, "max_sides": 1024})
    assert stopped.value.code == 2 and "'max_sides' (did you mean 'max_side'?)" in capsys.readouterr().err
    with pytest.raises(TypeError):
        ModelFacts("lightonai/LightOnOCR-3-0.8B", "image", 1024, {}, [])  # keyword-only: no fact by position


def test_the_hooks_hpd_names_are_its_module_s():
    assert (HPD.parse, HPD.prepare_serve, HPD.summary_metrics) == (
        hpd_parsing.parse,
        hpd_parsing.prepare_serve,
        hpd_parsing.summary_metrics,
    )
    assert load_script("ovis-ocr2.py").FACTS.add_arguments is ovis_ocr2.add_arguments


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_arguments_prints_usage_and_the_job_command(script):
    result = run_script(script)
    assert result.returncode == 0, result.stderr
    facts = facts_of(script)
    assert facts.image in result.stdout
    assert script in result.stdout
    assert ("--server" in result.stdout) == (script.endswith(("-server.py", "-saturate.py")))


@pytest.mark.parametrize("script", SCRIPTS)
def test_max_tokens_must_leave_room_for_the_prompt(script):
    result = run_script(script, "in", "./out", "--max-model-len", "1024", "--max-tokens", "1024")
    assert result.returncode == 2
    assert "--max-tokens 1024 must be below --max-model-len 1024" in result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["core"]["version"] == release.core_version()
    assert ran_the_installed_wheel(script, summary), summary["core"]


def test_job_command_never_carries_the_token():
    facts = facts_of("lighton-ocr3-saturate.py")
    command = job_command("lighton-ocr3-saturate.py", facts, ["a/b", "c/d", "--hf-token", "hf_secret", "--shuffle"])
    assert "hf_secret" not in command
    assert command.startswith("hf jobs uv run --flavor l4x1 --timeout 4h --image vllm/vllm-openai:v0.30.0 -s HF_TOKEN ")
    assert command.endswith("a/b c/d --shuffle")
    assert without_secrets(["--hf-token=hf_x", "x"]) == ["x"]


def test_hpd_job_command_installs_uv_on_the_vendor_image(monkeypatch):
    """Given to hf's own CLI (huggingface_hub 2.4) over a recording HfApi, the printed command asks for the job it
    says: the CLI takes `-lc` after the image for options of its own and dropped it, so the job ran
    `bash 'pip install ...'`, a file of that name, until `--` ended hf's options (issue 43)."""
    from huggingface_hub import HfApi, JobInfo
    from huggingface_hub.cli.hf import app

    command = job_command("hpd-parsing-saturate.py", HPD, ["a/b", "c/d"])
    assert command.startswith(f"hf jobs run --flavor l4x1 --timeout 4h -s HF_TOKEN {HPD.image} -- bash -lc")
    jobs = []

    def run_job(self, **job):
        jobs.append(job)
        owner = {"id": "1", "name": "someone", "type": "user"}
        return JobInfo(id="j1", createdAt="2026-12-01T10:00:00.000Z", status={"stage": "RUNNING"}, owner=owner)

    monkeypatch.setattr(HfApi, "run_job", run_job)
    monkeypatch.setenv("HF_TOKEN", "token-for-the-job")
    words = shlex.split(command)
    app(["jobs", "run", "--detach", *words[3:]], standalone_mode=False, windows_expand_args=False)  # no log follow
    url = "https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main/hpd-parsing-saturate.py"
    assert jobs[0]["image"] == HPD.image
    assert jobs[0]["command"] == ["bash", "-lc", f"pip install -q uv && uv run {url} a/b c/d"]


@pytest.mark.parametrize("script", ["hpd-parsing-saturate.py", "lighton-ocr3-saturate.py"])
def test_the_job_command_gives_each_argument_to_the_script_as_it_was_given(script, tmp_path):
    """The printed command goes through a shell (and HPD's through a second one, `bash -lc`): an argument with a
    space stays one argument and shell characters in one are never run."""
    facts = facts_of(script)
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
    assert "--enable-prefix-caching" in HPD.serve_args
    assert "--no-enable-prefix-caching" not in HPD.serve_args
    assert HPD.serve_env == {"MAX_PATCHES_WITH_RESIZE": "true"}


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
    serve_args = hpd_parsing.prepare_serve(list(HPD.serve_args), str(tmp_path))
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
    content = facts_of("ovis-ocr2.py").build_content({"type": "image_url"})
    assert content[0] == {"type": "image_url"}
    assert content[1]["text"].startswith("\nExtract all readable content")


def test_lighton_sends_the_image_alone():
    facts = LIGHTON
    assert facts.build_content({"type": "image_url"}) == [{"type": "image_url"}]
    assert facts.max_side == 2048
    assert facts.sampling["temperature"] == 0.1


@pytest.mark.parametrize("script", ["lighton-ocr3.py", "ovis-ocr2.py"])
def test_qwen35_models_prefill_their_linear_attention_with_triton(script):
    """On Hopper vLLM's `auto` picks FlashInfer's GDN prefill kernel, which is JIT-compiled at start and, where
    flashinfer is missing, kills the engine at its first prefill (shared/notes/gpu-vllm.md, vLLM 0.26 on an H200);
    on every other GPU `auto` already resolves to Triton, so pinning it changes nothing there."""
    args = list(facts_of(script).serve_args)
    assert args[args.index("--gdn-prefill-backend") + 1] == "triton"


@pytest.mark.parametrize("script", ["ovis-ocr2.py", "lighton-ocr3.py", "nanonets-ocr2.py"])
def test_offline_header_pins_the_twin_image_version(script):
    facts = facts_of(script)
    text = (ROOT / script).read_text()
    assert f"\"vllm=={facts.vllm_pin}; sys_platform == 'linux'\"," in text
    assert f"vllm/vllm-openai:v{facts.vllm_pin}" == facts.image


def test_offline_engine_flags_mean_what_the_serve_flags_mean():
    from ocr_core.shapes.llm_batches import engine_flags

    args = ["--limit-mm-per-prompt", "{}", "--default-chat-template-kwargs", "{}", "--served-model-name=x", "--a"]
    assert engine_flags(args) == ["--limit-mm-per-prompt", "{}", "--a"]


def test_nanonets_is_pinned_to_the_last_good_vllm():
    facts = facts_of("nanonets-ocr2.py")
    assert facts.image == "vllm/vllm-openai:v0.10.2"
    assert facts.max_model_len == 32768


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


def test_a_hook_named_after_non_ascii_text_on_its_line_is_prefixed_where_it_stands(tmp_path):
    """ast gives a name's column in UTF-8 bytes: a prompt with an accent before `parse=parse` on the same line
    moved the module's prefix into the prompt and left a script that does not compile (issue 43)."""
    stated = 'model="m", image="i", serve_args=(), sampling={}, max_model_len=4096'
    facts = f'ModelFacts({stated}, prompt="Lis la page – en entier, à la lettre.", parse=parse)'
    module = made_up_model(tmp_path, facts, hooks="def parse(text):\n    return text\n\n\n")
    rendered, names_hooks = render.facts_source(module)
    assert names_hooks
    assert 'prompt="Lis la page – en entier, à la lettre.", parse=made_up_model.parse)' in rendered
    compile(rendered, "rendered", "exec")
