"""A new user's first hour (issue 24): bad input answered at once, a card that tells the truth, a plain ending.

No test reaches the Hub: Hub failures are the exceptions huggingface_hub and datasets raise, built here and thrown
by the folder double; runs use the fake vLLM server where the engine does not matter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import subprocess
import time
from pathlib import Path

import datasets
import httpx2
import pytest
from datasets.exceptions import DatasetNotFoundError
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)
from PIL import Image

from ocr_core import entry as entry_module
from ocr_core.command.parser import build_parser
from ocr_core.inputs.addresses import input_problem
from ocr_core.planning.job_commands import job_command
from ocr_core.planning.provenance import ran_image, reproducible
from ocr_core.publishing import outcome as outcome_module
from ocr_core.publishing.cost import price_known
from ocr_core.store import hub as hub_module
from ocr_core.version import core_version
from ocr_models import RECIPES, recipe
from tests.test_resume_publish import SAMPLES, run_main, served
from tests.testbed.env import REPO_ROOT, VENV_PYTHON, script_command
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub
from tests.testbed.recipes import ENTRIES, load_script, run_entry
from tools.recipes import facts_of
from tools.release import release_table


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """Every backoff a Hub retry would wait, recorded instead of waited."""
    waited: list[float] = []
    monkeypatch.setattr(hub_module.time, "sleep", waited.append)
    return waited


def hub_answer(cls: type[HfHubHTTPError], status: int, message: str) -> HfHubHTTPError:
    request = httpx2.Request("GET", "https://huggingface.co/api/datasets/someone/scans")
    return cls(message, response=httpx2.Response(status, request=request))


class FailingInputHub(FolderHub):
    """A Hub double whose answer about the input dataset is `error`, as the real client raises it."""

    def __init__(self, root: Path, error: Exception) -> None:
        super().__init__(root)
        self.error = error
        self.asked: list[str] = []

    def input_revision(self, repo_id: str) -> str | None:
        self.asked.append(repo_id)
        raise self.error


def test_a_missing_local_input_is_exit_2_at_once_and_never_asks_the_hub(server, tmp_path, capsys, sleeps):
    hub = FailingInputHub(tmp_path / "hub", HFValidationError("Repo id must be in the form 'repo_name'"))
    started = time.monotonic()
    code, summary, err = run_main(
        "lighton-ocr3-saturate.py", ["./no/such/folder", str(tmp_path / "out"), *served(server)], capsys, hub=hub
    )
    assert (code, summary["exit_code"]) == (2, 2)
    assert time.monotonic() - started < 10
    assert hub.asked == [] and sleeps == []
    assert "'./no/such/folder' does not exist" in summary["failure"]
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (HFValidationError("Repo id must use alphanumeric chars"), "nor a valid Hub dataset id"),
        (hub_answer(RepositoryNotFoundError, 401, "401 Client Error: Repository Not Found"), "no such dataset"),
        (hub_answer(GatedRepoError, 403, "403 Client Error: gated"), "is gated"),
    ],
    ids=["invalid-id", "not-found-or-private", "gated"],
)
def test_a_hub_input_that_cannot_be_read_is_exit_2_without_retries(server, tmp_path, capsys, sleeps, error, says):
    hub = FailingInputHub(tmp_path / "hub", error)
    code, summary, _ = run_main(
        "lighton-ocr3-saturate.py", ["someone/scans", str(tmp_path / "out"), *served(server)], capsys, hub=hub
    )
    assert (code, summary["exit_code"]) == (2, 2)
    assert sleeps == []
    assert says in summary["failure"] and "'someone/scans'" in summary["failure"]
    assert "output repo" not in summary["failure"]


def test_a_config_the_local_input_does_not_have_is_exit_2(server, tmp_path, capsys):
    code, summary, _ = run_main(
        "lighton-ocr3-saturate.py",
        [str(SAMPLES), str(tmp_path / "out"), "--input-config", "nope", *served(server)],
        capsys,
    )
    assert (code, summary["exit_code"]) == (2, 2)
    assert "--input-config" in summary["failure"] and "internal error" not in summary["failure"]


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (DatasetNotFoundError("Dataset 'someone/scans' doesn't exist on the Hub or cannot be accessed."), "HF_TOKEN"),
        (ValueError("Unknown split \"tset\". Should be one of ['train']."), "--split"),
        (ValueError("Bad split: tset. Available splits: ['train']"), "--split"),
        (ValueError("BuilderConfig 'nope' not found. Available: ['default']"), "--input-config"),
        (OfflineModeIsEnabled("offline"), "HF_HUB_OFFLINE"),
    ],
    ids=["dataset-not-found", "unknown-split", "bad-split", "unknown-config", "offline"],
)
def test_input_failures_that_need_a_new_command_are_named(error, says):
    assert says in input_problem(error, "someone/scans")


@pytest.mark.parametrize(
    "error",
    [
        ConnectionError("connection reset"),
        TimeoutError("read timed out"),
        hub_answer(HfHubHTTPError, 503, "503 Server Error"),
        hub_answer(HfHubHTTPError, 429, "429 Too Many Requests"),
        ValueError("some other value problem"),
    ],
    ids=["reset", "timeout", "503", "429", "unrelated-value-error"],
)
def test_failures_that_can_heal_are_left_to_the_retries(error):
    assert input_problem(error, "someone/scans") is None


class InvalidIdHub(FolderHub):
    """A Hub double that refuses a repo id as huggingface_hub's validation does, before any request."""

    def create_repo(self, repo_id: str, private: bool) -> None:
        raise HFValidationError(f"Repo id must use alphanumeric chars, '-', '_' or '.': '{repo_id}'")


def test_an_invalid_output_id_is_exit_2_without_retries(server, tmp_path, capsys, sleeps):
    hub = InvalidIdHub(tmp_path / "hub")
    code, summary, _ = run_main(
        "lighton-ocr3-saturate.py", [str(SAMPLES), "someone/scans ocr", *served(server)], capsys, hub=hub
    )
    assert (code, summary["exit_code"]) == (2, 2)
    assert sleeps == []
    assert "OUTPUT 'someone/scans ocr'" in summary["failure"]


def recipe_parser(script: str = "lighton-ocr3-saturate.py") -> argparse.ArgumentParser:
    return build_parser(script, facts_of(script), recipe(script).shape)


@pytest.mark.parametrize("script", [recipe.script for recipe in RECIPES])
def test_help_shows_every_default(script):
    parser = recipe_parser(script)
    text = parser.format_help()
    for action in parser._actions:
        if action.default in (None, False, argparse.SUPPRESS, "") or not action.option_strings:
            continue
        flag = action.option_strings[-1]
        block = text.split(f"  {flag}", 1)[1].split("\n  -", 1)[0]
        assert "default" in block, f"{flag} shows no default"


@pytest.mark.parametrize("script", [recipe.script for recipe in RECIPES])
def test_help_prints_the_job_command_on_lines_that_copy_whole(script):
    parser = recipe_parser(script)
    facts = facts_of(script)
    shown = parser.format_help().split("Job command:", 1)[1].strip()
    assert shown.replace(" \\\n    ", " ") == job_command(script, facts)
    assert all(line.endswith(" \\") for line in shown.splitlines()[:-1])


def test_an_argument_error_is_one_line_and_a_summary(capsys):
    code, summary, err = run_main("lighton-ocr3-saturate.py", ["in", "./out", "--max-tokens", "many"], capsys)
    assert (code, summary["exit_code"]) == (2, 2)
    assert "--max-tokens" in summary["failure"] and "many" in summary["failure"]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--help" in lines[0] and "--max-tokens" in lines[0]


def test_no_arguments_still_print_the_usage_and_exit_0(capsys):
    assert run_entry("lighton-ocr3-saturate.py", []) == 0
    assert "hf jobs uv run" in capsys.readouterr().out


def test_the_end_of_a_run_says_what_happened_in_a_sentence(server, tmp_path, capsys):
    out = tmp_path / "out"
    code, summary, err = run_main("lighton-ocr3-saturate.py", [str(SAMPLES), str(out), *served(server)], capsys)
    assert code == 0
    sentence = err.strip().splitlines()[-1]
    assert f"{summary['rows']} row(s)" in sentence and f"{summary['errors']} with an error" in sentence
    assert str(out) in sentence
    loader = sentence[sentence.index("datasets.load_dataset(") :].removesuffix(')".')
    assert len(eval(loader, {"datasets": datasets})) == summary["rows"]


@pytest.fixture
def off_jobs(monkeypatch):
    """A run on this machine, not on HF Jobs: no job id, no flavor in the environment."""
    for name in ("JOB_ID", "ACCELERATOR", "JOB_FLAVOR"):
        monkeypatch.delenv(name, raising=False)


def last_run_info(folder: Path) -> dict:
    rows = datasets.load_dataset(str(folder), split="train", cache_dir=f"{folder}.cache")
    return json.loads(rows[0]["inference_info"])[-1]


def test_the_card_of_a_local_cpu_run_says_only_what_happened(tmp_path, capsys, off_jobs):
    model = tmp_path / "tiny-model"
    model.mkdir()
    out = tmp_path / "out"
    with fake_server(model=str(model)) as local:
        code, _, _ = run_main("lighton-ocr3-saturate.py", [str(SAMPLES), str(out), *served(local)], capsys)
    assert code == 0
    card = (out / "README.md").read_text()
    assert "huggingface.co//" not in card and f"huggingface.co/{model}" not in card and f"`{model}`" in card
    assert "vLLM fake" in card  # the version the server reported, not the recipe's image tag
    assert "vllm/vllm-openai" not in card
    reproduce = card.split("## Reproduce", 1)[1]
    assert "hf jobs" not in reproduce and "No job command reproduces this run" in reproduce
    assert f"lighton-ocr3-saturate.py {SAMPLES} {out}" in reproduce  # what ran, as what ran
    assert "| cost |" not in card and "l4x1" not in card
    info = last_run_info(out)
    assert (info["model_id"], info["vllm_version"], info["image"]) == (str(model), "fake", None)


def test_what_ran_on_hf_jobs_is_recorded_with_its_image_only_when_the_versions_agree(monkeypatch):
    monkeypatch.setenv("JOB_ID", "job-1")
    assert ran_image("vllm/vllm-openai:v0.30.0", "0.30.0") == "vllm/vllm-openai:v0.30.0"
    assert ran_image("vllm/vllm-openai:v0.30.0", "0.32.0+cpu") is None
    monkeypatch.delenv("JOB_ID")
    assert ran_image("vllm/vllm-openai:v0.30.0", "0.30.0") is None


def test_a_reproduce_command_only_exists_for_hub_input_output_and_model():
    assert reproducible("someone/scans", "someone/scans-ocr", "lightonai/LightOnOCR-3-0.8B")
    assert not reproducible("./scans", "someone/scans-ocr", "lightonai/LightOnOCR-3-0.8B")
    assert not reproducible("someone/scans", "./out", "lightonai/LightOnOCR-3-0.8B")
    assert not reproducible("someone/scans", "someone/scans-ocr", "/tmp/tiny-model")


def test_the_price_is_only_given_for_a_known_flavor(monkeypatch, off_jobs):
    assert not price_known(None, "l4x1")
    assert price_known(1.25, "l4x1")
    monkeypatch.setenv("ACCELERATOR", "l4x1")
    assert price_known(None, "l4x1")


def run_copy(script: Path, out: Path, server) -> str:
    env = {key: value for key, value in bed_env().items() if key not in ("JOB_ID", "ACCELERATOR", "JOB_FLAVOR")}
    result = subprocess.run(
        script_command(script, str(SAMPLES), str(out), "--max-samples", "2", *served(server)),
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return (out / "README.md").read_text()


URL = "https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main/lighton-ocr3-saturate.py"


def test_a_core_built_from_a_checkout_never_calls_a_script_the_release(server, tmp_path):
    """The test bed's wheel is built from this checkout, as a user's `uv build` is: it holds no release table, so
    it certifies neither the checkout's bytes nor an edit of them, and records the hash of what ran."""
    released = (REPO_ROOT / "lighton-ocr3-saturate.py").read_bytes()
    (tmp_path / "as-released").mkdir()
    same = tmp_path / "as-released" / "lighton-ocr3-saturate.py"
    same.write_bytes(released)
    edited = tmp_path / "lighton-ocr3-saturate.py"
    edited.write_bytes(released.replace(b'"top_p": 1.0', b'"top_p": 0.9'))
    for copy, out in [(same, tmp_path / "out-released"), (edited, tmp_path / "out-edited")]:
        card = run_copy(copy, out, server)
        digest = hashlib.sha256(copy.read_bytes()).hexdigest()
        assert URL not in card and "not a release build" in card and digest in card
        assert last_run_info(out)["script_sha256"] == digest and last_run_info(out)["script_url"] is None


def test_on_a_release_build_the_released_bytes_are_the_release(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(entry_module, "released_scripts", release_table)
    out = tmp_path / "out"
    argv = [str(SAMPLES), str(out), "--max-samples", "2", *served(server)]
    assert run_main("lighton-ocr3-saturate.py", argv, capsys)[0] == 0
    assert f"the released [`lighton-ocr3-saturate.py`]({URL})" in (out / "README.md").read_text()
    assert last_run_info(out)["script_url"] == URL


def test_a_modified_copys_card_never_gives_the_released_job_command(server, tmp_path, capsys, monkeypatch):
    """Even where a job command could redo the run (Hub input, output and model: stood in for here, the tests reach
    no Hub), the released URL runs the released bytes, which write other text than the edited copy did."""
    monkeypatch.setattr(outcome_module, "reproducible", lambda *names: True)
    monkeypatch.setattr(entry_module, "released_scripts", release_table)
    script = "lighton-ocr3-saturate.py"
    released = load_script(script)
    edited = tmp_path / script
    edited.write_bytes((REPO_ROOT / script).read_bytes().replace(b'"top_p": 1.0', b'"top_p": 0.9'))
    out = tmp_path / "out"
    argv = [str(SAMPLES), str(out), "--max-samples", "2", *served(server)]
    assert ENTRIES["saturate"](released.FACTS, edited, argv=argv) == 0
    reproduce = (out / "README.md").read_text().split("## Reproduce", 1)[1]
    assert "raw/main" not in reproduce and "hf jobs" not in reproduce
    assert "modified copy" in reproduce and hashlib.sha256(edited.read_bytes()).hexdigest() in reproduce
    assert "cannot be rerun from the Hub" in reproduce and f"{script} {SAMPLES} {out}" in reproduce
    capsys.readouterr()


def test_an_edited_copy_says_modified_and_records_its_prompt_and_its_core(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(entry_module, "released_scripts", release_table)
    script = "ovis-ocr2-server.py"
    edited = tmp_path / script
    edited.write_bytes((REPO_ROOT / script).read_bytes().replace(b"Preserve the original text", b"Keep the text"))
    facts = load_script(str(edited)).FACTS
    prompt = hashlib.sha256(facts.prompt.encode()).hexdigest()
    out = tmp_path / "out"
    capsys.readouterr()
    argv = [str(SAMPLES), str(out), "--max-samples", "2", *served(server)]
    assert ENTRIES["server"](facts, edited, argv=argv) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (summary["script_release"], summary["prompt_sha256"]) == ("modified", prompt)
    assert summary["script_sha256"] == hashlib.sha256(edited.read_bytes()).hexdigest()
    info = last_run_info(out)
    assert info["prompt_sha256"] == prompt
    assert info["core"] == {"version": core_version(), "build": "source tree"}, "the suite's core is src/"
    assert f"on ocr-vllm-core {core_version() or '(version unknown)'} (source tree)" in (out / "README.md").read_text()


def test_a_misspelt_facts_field_is_exit_2_naming_the_closest_field(tmp_path):
    script = tmp_path / "lighton-ocr3-saturate.py"
    script.write_bytes((REPO_ROOT / "lighton-ocr3-saturate.py").read_bytes().replace(b"max_side=", b"max_sides="))
    result = subprocess.run(
        [str(VENV_PYTHON), str(script), "in", "out"], capture_output=True, text=True, timeout=300,
        env={**bed_env(), "PYTHONPATH": str(REPO_ROOT / "src")},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "did you mean 'max_side'?" in result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["exit_code"] == 2 and "'max_sides' (did you mean 'max_side'?)" in summary["failure"]


def test_a_huge_page_that_is_then_fitted_raises_no_pillow_warning(server, tmp_path):
    """Pillow warns above 89 MP ("possible decompression bomb") although the page is only read to be fitted."""
    pages = tmp_path / "pages"
    pages.mkdir()
    Image.new("1", (9600, 9600), 1).save(pages / "huge-scan.png")
    result = subprocess.run(
        script_command("lighton-ocr3-saturate.py", str(pages), str(tmp_path / "out"), *served(server)),
        capture_output=True, text=True, timeout=300, env=bed_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["errors"] == 0
    assert "DecompressionBomb" not in result.stderr and "Warning" not in result.stderr


def test_the_resource_trackers_exit_warning_does_not_follow_the_summary():
    """vLLM's engine leaves shared memory for multiprocessing's resource tracker to clean up; the tracker, a process
    of its own, warned of it at exit, below the summary line (a busy CI run of 2026-12-02 ended the screen so)."""
    code = (
        "import sys\n"
        "if sys.argv[1] == 'quiet':\n"
        "    from ocr_core.console import silence_notices; silence_notices()\n"
        "from multiprocessing import shared_memory\n"
        "shared_memory.SharedMemory(create=True, size=64).close()\n"
        "print('{\"summary\": true}')\n"
    )
    lines = {}
    for mode in ("loud", "quiet"):
        done = subprocess.run(
            [str(VENV_PYTHON), "-c", code, mode], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=120, env=bed_env(), cwd=REPO_ROOT / "src",
        )  # fmt: skip
        lines[mode] = done.stdout.strip().splitlines()
    assert "leaked shared_memory" in "\n".join(lines["loud"]), "the double no longer leaks: the test proves nothing"
    assert lines["quiet"] == ['{"summary": true}']


def test_vllms_notice_about_tritons_cpu_backend_is_not_shown():
    """The CPU build logs it on import, in-process for an offline recipe; it says nothing a user can act on."""
    code = "from ocr_core.console import silence_notices; silence_notices(); import vllm.triton_utils"
    result = subprocess.run(
        [str(VENV_PYTHON), "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=bed_env(),
        cwd=REPO_ROOT / "src",
    )
    assert result.returncode == 0, result.stderr
    assert "Triton" not in result.stdout + result.stderr
    bare = subprocess.run(
        [str(VENV_PYTHON), "-c", "import vllm.triton_utils"], capture_output=True, text=True, timeout=300, env=bed_env()
    )
    assert "Triton is installed, but doesn't include CPU backend" in bare.stdout + bare.stderr  # what it silences


def test_help_never_shows_a_secret_taken_from_the_environment(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sk-from-the-environment")
    assert "sk-from-the-environment" not in recipe_parser().format_help()


def test_a_folder_with_nothing_to_read_is_exit_2(server, tmp_path, capsys):
    (tmp_path / "scans").mkdir()  # say, the pages were never copied in
    code, summary, _ = run_main(
        "lighton-ocr3-saturate.py", [str(tmp_path / "scans"), str(tmp_path / "out"), *served(server)], capsys
    )
    assert (code, summary["exit_code"]) == (2, 2)
    assert "internal error" not in summary["failure"] and "images" in summary["failure"]


def closed_port() -> int:
    """A local port nothing listens on: a Hub endpoint there refuses every connection, as a machine without a
    network does, and no request leaves the machine."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("hub_side", ["input", "output"])
def test_a_hub_id_with_no_network_is_named_at_once_with_exit_2(server, tmp_path, capsys, sleeps, monkeypatch, hub_side):
    """Nothing was reachable from the start: retrying for minutes and ending as an internal error helped nobody."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    places = ["someone/scans", str(tmp_path / "out")] if hub_side == "input" else [str(SAMPLES), "someone/scans-ocr"]
    code, summary, _ = run_main("lighton-ocr3-saturate.py", [*places, *served(server)], capsys)
    assert (code, summary["exit_code"]) == (2, 2), summary
    assert "cannot reach the Hub" in summary["failure"] and "network" in summary["failure"]
    assert sleeps == [], "a Hub that was never reached was retried"


class BlippingHub(FolderHub):
    """A Hub double whose first call to the output repo fails as a resolver blip does, then answers."""

    blips: int = 1

    def create_repo(self, repo_id: str, private: bool) -> None:
        if self.blips:
            self.blips -= 1
            raise socket.gaierror(-3, "Temporary failure in name resolution")
        super().create_repo(repo_id, private)


def test_a_network_blip_at_a_jobs_first_hub_call_is_retried_not_called_no_network(
    server, tmp_path, capsys, sleeps, monkeypatch
):
    """On HF Jobs the network is the platform's, not the user's to fix: a DNS blip at the job's first Hub call was
    "this machine cannot reach the Hub" (exit 2), and two such blips in a row gave the shard up as failing the same
    way twice (issue 43). In a job it is retried as any blip; on one's own machine it is still said at once."""
    monkeypatch.setenv("JOB_ID", "job-1")
    hub = BlippingHub(tmp_path / "hub")
    code, summary, err = run_main(
        "lighton-ocr3-saturate.py", [str(SAMPLES), "someone/scans-ocr", *served(server)], capsys, hub=hub
    )
    assert (code, summary["exit_code"]) == (0, 0), err[-2000:]
    backoffs = [waited for waited in sleeps if waited >= hub_module.UPLOAD_BACKOFF_S]  # the retry's, not a poll's
    assert backoffs == [hub_module.UPLOAD_BACKOFF_S] and summary["rows"] > 0

    monkeypatch.delenv("JOB_ID")
    code, summary, _ = run_main(
        "lighton-ocr3-saturate.py", [str(SAMPLES), "someone/other-ocr", *served(server)], capsys,
        hub=BlippingHub(tmp_path / "hub"),
    )  # fmt: skip
    assert (code, summary["exit_code"]) == (2, 2) and "cannot reach the Hub" in summary["failure"]


def test_a_server_host_that_does_not_resolve_is_said_at_once(tmp_path, capsys, monkeypatch):
    """A mistyped --server host waited the whole --startup-timeout (1,800 s) saying only that it waited for /health.
    The lookup is answered here as a resolver answers a name it does not know, so nothing leaves the machine."""
    import socket

    real_lookup = socket.getaddrinfo

    def lookup(host, *args, **kwargs):
        if host == "gpu-box.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    argv = [str(SAMPLES), str(tmp_path / "out"), "--server", "http://gpu-box.invalid:8000", "--startup-timeout", "60"]
    code, summary, err = run_main("lighton-ocr3-saturate.py", argv, capsys)
    assert (code, summary["exit_code"]) == (2, 2), err[-2000:]
    assert "gpu-box.invalid" in summary["failure"] and "does not resolve" in summary["failure"]
    assert "waiting up to" not in err
