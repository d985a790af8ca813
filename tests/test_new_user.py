"""What a new user meets first, tried from a fresh clone with the README alone (issue 44's frictions): a --server
address without its scheme, a --server where nothing listens, a resumed run with nothing left to do, and an output
made from a folder of images that must name each row's file. A fake vLLM server answers; nothing reaches the Hub.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_resume_publish import SAMPLES, load, run_main, served
from tests.testbed.env import REPO_ROOT
from tests.testbed.fake_server import fake_server

SCRIPT = "lighton-ocr3-saturate.py"


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def no_vllm(tmp_path, monkeypatch) -> None:
    """A machine without the `vllm` command: PATH holds only a folder without it."""
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    assert shutil.which("vllm") is None


@pytest.mark.parametrize("address", ["gpu-box", "gpu-box:8000"])
def test_a_server_address_without_its_scheme_is_refused_with_the_address_to_pass(tmp_path, capsys, address):
    """`--server gpu-box` said "the host name '' does not resolve": urlsplit reads no host in it at all."""
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(tmp_path / "out"), "--server", address], capsys)
    assert (code, summary["exit_code"]) == (2, 2), err[-2000:]
    assert f"--server http://{address}" in summary["failure"], summary["failure"]
    assert "''" not in summary["failure"]


def test_a_given_server_where_nothing_listens_is_said_so_not_install_vllm(tmp_path, capsys, no_vllm):
    """`--server http://127.0.0.1:9` with nothing listening gave the advice for a run without --server: install vLLM
    or point it at a server that runs. The user named a server; that nothing answers there comes first."""
    url = f"http://127.0.0.1:{closed_port()}"
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(tmp_path / "out"), "--server", url], capsys)
    assert (code, summary["exit_code"]) == (2, 2), err[-2000:]
    failure = summary["failure"]
    assert failure.startswith(f"Nothing answers at --server {url}: check that your vLLM server runs"), failure


def test_a_resumed_run_with_nothing_to_do_claims_no_server(server, tmp_path, capsys):
    """It reported `"serving": "1 server this run did not start"` and a replica "starting": no server was even
    looked at, since every row already had its outcome."""
    argv = [str(SAMPLES), str(tmp_path / "out"), *served(server, "--max-samples", "3")]
    assert run_main(SCRIPT, argv, capsys)[0] == 0
    code, summary, err = run_main(SCRIPT, argv, capsys)
    assert code == 0, err[-2000:]
    assert summary["done_this_run"] == 0 and summary["resumed"] == 3, summary
    assert "serving" not in summary and summary.get("replicas", []) == [], summary


def test_an_output_made_from_a_folder_of_images_names_each_rows_file(server, tmp_path, capsys):
    """A folder of images gave rows with the image and the text and nothing naming the file they came from; the
    output now has `source_file`, each image's path under the input folder, as a mixed folder's rows have."""
    pages = tmp_path / "scans"
    images = samples_as_images(pages)
    code, _, err = run_main(SCRIPT, [str(pages), str(tmp_path / "out"), *served(server)], capsys)
    assert code == 0, err[-2000:]
    rows = load(tmp_path / "out")
    assert sorted(rows["source_file"]) == sorted(str(path.relative_to(pages)) for path in images)


def samples_as_images(folder: Path) -> list[Path]:
    """The sample dataset's first three pages as files, one of them in a subfolder."""
    import datasets

    samples = datasets.load_dataset(str(SAMPLES), split="train").select(range(3))
    names = [folder / "page-a.png", folder / "page-b.png", folder / "box-2" / "page-c.png"]
    names[-1].parent.mkdir(parents=True)
    for row, name in zip(samples, names):
        row["image"].save(name)
    return names


FAKE_START = """
import sys, time
print("INFO 12-02 16:40:01 [loader.py:1] Loading weights took 0.52 seconds", flush=True)
print("INFO 12-02 16:40:03 [backends.py:2] Dynamo bytecode transform time: 3.1 s", flush=True)
time.sleep(120)
"""


def test_a_server_that_takes_long_to_start_says_where_its_start_stands(tmp_path, capsys, monkeypatch):
    """Between `server log: ...` and `server is ready` a start of 125-170 s printed nothing. A stand-in for `vllm
    serve` logs as vLLM does and never answers /health; the wait says every few seconds (here) what the log said
    last, until the deadline."""
    from ocr_core.serving import spawn

    monkeypatch.setattr(spawn, "STARTING_NOTE_EVERY_S", 0.5)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text("#!/bin/sh\n")
    (bin_dir / "vllm").chmod(0o755)
    server = spawn.SpawnedServer(
        [sys.executable, "-c", FAKE_START], f"http://127.0.0.1:{closed_port()}", env={"PATH": str(bin_dir)},
        log_path=tmp_path / "serve.log",
    )  # fmt: skip
    server.start()
    try:
        with pytest.raises(spawn.ServerError, match="was not ready after"):
            server.wait_ready(8)
    finally:
        server.close()
    notes = [line for line in capsys.readouterr().err.splitlines() if "still starting after" in line]
    assert notes, "the wait said nothing while the server started"
    assert "compiling the model (torch.compile)" in notes[-1], notes


def test_from_a_clone_a_server_recipe_without_vllm_offers_the_clones_make_commands(tmp_path, capsys, monkeypatch):
    """`make run` on a machine without vLLM offered `uv run SCRIPT ...` and `uv run URL ... --server`, neither of
    which works from a clone before a release. The default address is a closed port here, so no server that runs on
    this machine answers for it."""
    from ocr_core.command import parser
    from ocr_core.planning import plan_records

    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.setenv("OCR_VLLM_CLONE", str(tmp_path))
    default = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr(parser, "DEFAULT_SERVER", default)
    monkeypatch.setattr(plan_records, "DEFAULT_SERVER", default)
    out = tmp_path / "out"
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(out), "--max-samples", "3"], capsys)
    assert (code, summary["exit_code"]) == (2, 2), err[-2000:]
    failure = summary["failure"]
    rerun = f"make run SCRIPT={SCRIPT} INPUT={SAMPLES} OUTPUT={out} ARGS='--max-samples 3'"
    assert f"then rerun:\n  {rerun}\n" in failure, failure
    assert rerun.replace("3'", "3 --server http://HOST:8000'") in failure, failure
    assert f"make demo SCRIPT={SCRIPT} INPUT={SAMPLES}" in failure
    assert "uv run" not in failure and "hf jobs" not in failure, failure
    words = shlex.split(rerun)
    # As a user's shell types it: `make test` (CI's entry) exports its own level and flags, under which a make inside
    # it prints "Entering directory" around the recipe line.
    outer_make = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")
    env = {**{name: value for name, value in os.environ.items() if name not in outer_make}, "PATH": os.defpath}
    recipe = subprocess.run(["make", "-n", *words[1:]], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert recipe.stdout.strip() == f'bash tools/run.sh "{SCRIPT}" "{SAMPLES}" "{out}" --max-samples 3', recipe.stdout


def test_a_recipe_that_must_start_vllm_where_none_is_installed_names_the_image_before_any_fetch(
    tmp_path, capsys, no_vllm, monkeypatch
):
    """`hpd-parsing-saturate.py IN OUT --server http://127.0.0.1:PORT` with nothing there and no `vllm` ran the
    model's serve hook first, which fetches its P-MTP folder from the Hub: offline, exit 1 with a connection error
    and "rerun to resume". Without `vllm` nothing is started, so nothing is fetched for it: exit 2 and the image."""
    import huggingface_hub

    fetched: list[str] = []

    def offline(repo_id: str, **_: object) -> str:
        fetched.append(repo_id)
        raise ConnectionError("no network here")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    url = f"http://127.0.0.1:{closed_port()}"
    script = "hpd-parsing-saturate.py"
    code, summary, err = run_main(script, [str(SAMPLES), str(tmp_path / "out"), "--server", url], capsys)
    assert fetched == [], "the serve hook ran though no server can start here"
    assert (code, summary["exit_code"]) == (2, 2), err[-2000:]
    assert f"Nothing answers at --server {url}" in summary["failure"], summary["failure"]
    assert "hpd-parsing-vllm" in summary["failure"], summary["failure"]


def test_under_the_demo_every_command_a_refusal_offers_leaves_the_demos_own_flags_out(tmp_path, capsys, monkeypatch):
    """The demo puts a stand-in model folder and a server address of its own after INPUT and OUTPUT (it names them
    in OCR_VLLM_DEMO); a command offered under it is one to type at the clone, with the user's flags alone."""
    import json

    from ocr_core.command import parser
    from ocr_core.planning import plan_records

    bare = tmp_path / "bin"
    bare.mkdir()
    default = f"http://127.0.0.1:{closed_port()}"
    added = ["--model", str(tmp_path / "stand-in"), "--ignore-eos", "--server", default]
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.setenv("OCR_VLLM_CLONE", str(tmp_path))
    monkeypatch.setenv("OCR_VLLM_DEMO", json.dumps(added))
    monkeypatch.setattr(parser, "DEFAULT_SERVER", default)
    monkeypatch.setattr(plan_records, "DEFAULT_SERVER", default)
    out = tmp_path / "out"
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(out), *added, "--max-samples", "3"], capsys)
    assert code == 2, err[-2000:]
    offered = [line.strip() for line in summary["failure"].splitlines() if line.startswith("  make ")]
    assert f"make demo SCRIPT={SCRIPT} INPUT={SAMPLES} OUTPUT={out} ARGS='--max-samples 3'" in offered, offered
    assert all("stand-in" not in line and "--ignore-eos" not in line for line in offered), offered
