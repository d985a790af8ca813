"""The server-mode recipes, run as users run them, against a real vLLM CPU engine and the tiny model.

Scripts run as subprocesses with the test venv's python (their PEP 723 dependencies are installed there);
`--model` and `--max-model-len` point them at the tiny model.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import datasets
import httpx
import pytest
from PIL import Image

from ocr_core import run_saturate
from ocr_core.planning.defaults import SERVER_WINDOW
from ocr_core.planning.scale import max_num_seqs
from ocr_core.serving.prometheus import kv_capacity
from ocr_core.shapes.window import engine_window
from tests.testbed.env import REPO_ROOT, ran_the_installed_wheel, script_command
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.hub_double import FolderHub
from tests.testbed.server import running_server
from tools.recipes import facts_of

SAMPLES = REPO_ROOT / "samples" / "dataset"
HPD = facts_of("hpd-parsing-saturate.py")
# The tiny model never emits </s>, so every page runs to max_tokens: --ignore-eos says that is intended (else every
# page would be flagged truncated and the circuit breaker would stop the run).
FAST = ["--max-model-len", "1024", "--max-tokens", "16", "--temperature", "0", "--ignore-eos"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def recipe_command(script: str, *args: str) -> list[str]:
    return script_command(script, *args)


def run_recipe(script: str, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        recipe_command(script, *args), capture_output=True, text=True, timeout=timeout, env=env or bed_env()
    )


def summary_of(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def load_output(folder: Path, config: str | None = None, cache: str = "") -> datasets.Dataset:
    """Loads a written dataset with a private cache: datasets would reuse a cached folder of the same name."""
    return datasets.load_dataset(str(folder), config, split="train", cache_dir=f"{folder}.cache{cache}")


def repeated_dataset(folder: Path, copies: int) -> Path:
    """The sample pages several times over, as a `save_to_disk` folder."""
    samples = datasets.load_dataset(str(SAMPLES), split="train")
    datasets.concatenate_datasets([samples] * copies).save_to_disk(str(folder))
    return folder


def encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def broken_dataset(folder: Path) -> tuple[Path, dict[str, str | None]]:
    """Good pages mixed with every kind of bad cell; returns the folder and each row's expected error."""
    page = (REPO_ROOT / "samples" / "pages").glob("*.jpg").__next__().read_bytes()
    truncated = encoded(Image.effect_noise((300, 300), 50).convert("RGB"), "JPEG")[:700]
    palette = Image.new("P", (60, 40), 1)
    palette.info["transparency"] = 1
    rows = [
        ("good-1", {"bytes": page, "path": None}, None),
        ("none", None, "image cell is empty"),
        ("empty", {"bytes": b"", "path": "empty.png"}, "image bytes are empty"),
        ("corrupt", {"bytes": b"\x89PNG\r\n\x1a\n garbage", "path": None}, "not a readable image"),
        ("truncated", {"bytes": truncated, "path": None}, "400"),
        ("cmyk", {"bytes": encoded(Image.new("CMYK", (90, 120), (0, 0, 0, 30)), "JPEG"), "path": None}, None),
        ("gray16", {"bytes": encoded(Image.new("I;16", (90, 120), 30000), "PNG"), "path": None}, None),
        ("palette", {"bytes": encoded(palette, "PNG"), "path": None}, None),
        ("one-pixel", {"bytes": encoded(Image.new("RGB", (1, 1), "white"), "PNG"), "path": None}, None),
        ("sliver", {"bytes": encoded(Image.new("L", (12000, 30), 255), "PNG"), "path": None}, None),
        ("good-2", {"bytes": page, "path": None}, None),
    ]
    features = datasets.Features({"name": datasets.Value("string"), "image": datasets.Image(decode=False)})
    data = {"name": [name for name, _, _ in rows], "image": [cell for _, cell, _ in rows]}
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(folder))
    return folder, {name: error for name, _, error in rows}


def test_server_path_keeps_order_and_resumes(vllm_server, tmp_path):
    out = tmp_path / "out"
    args = [str(SAMPLES), str(out), "--server", vllm_server.url, "--model", vllm_server.model, *FAST]
    first = run_recipe("ovis-ocr2-server.py", *args)
    assert first.returncode == 0, first.stderr
    summary = summary_of(first.stdout)
    assert (summary["rows"], summary["done_this_run"], summary["errors"], summary["missing"]) == (12, 12, 0, 0)
    assert summary["pages_per_s"] > 0 and summary["output_tokens_per_s"] > 0
    assert ran_the_installed_wheel("ovis-ocr2-server.py", summary), summary["core"]
    output = load_output(out)
    inputs = datasets.load_dataset(str(SAMPLES), split="train")
    assert output["page_id"] == inputs["page_id"]
    assert all(text for text in output["markdown"])
    assert output["ocr_error"] == [None] * 12
    info = json.loads(output[0]["inference_info"])
    assert info[0]["mode"] == "server" and info[0]["column_name"] == "markdown"
    window = info[0]["window"]
    engine = engine_window(
        kv_capacity(httpx.get(f"{vllm_server.url}/metrics", timeout=30).text, 1024),
        max_num_seqs(facts_of("ovis-ocr2-server.py").serve_args, None),
        SERVER_WINDOW,
    )
    assert window["final"] == (min(engine, window["cap"]) if window["cap"] else engine), (window, engine)
    assert "configs:" in (out / "README.md").read_text()

    again = run_recipe("ovis-ocr2-server.py", *args)
    assert again.returncode == 0, again.stderr
    assert summary_of(again.stdout)["resumed"] == 12
    assert summary_of(again.stdout)["done_this_run"] == 0
    assert load_output(out)["markdown"] == output["markdown"]


def test_broken_rows_get_one_error_each(vllm_server, tmp_path):
    source, expected = broken_dataset(tmp_path / "in")
    out = tmp_path / "out"
    result = run_recipe(
        "nanonets-ocr2-server.py", str(source), str(out), "--server", vllm_server.url, "--model", vllm_server.model,
        *FAST,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    output = load_output(out)
    assert output["name"] == list(expected)
    for name, text, error in zip(output["name"], output["markdown"], output["ocr_error"]):
        if expected[name] is None:
            assert error is None and text, (name, error)
        else:
            assert text == "[OCR ERROR]" and expected[name] in error, (name, error)
    assert summary_of(result.stdout)["errors"] == sum(value is not None for value in expected.values())
    health = subprocess.run(
        ["curl", "-s", f"{vllm_server.url}/health", "-o", "/dev/null", "-w", "%{http_code}"],
        capture_output=True,
        text=True,
    )
    assert health.stdout == "200"


def test_output_column_collision_needs_overwrite(vllm_server, tmp_path):
    first = tmp_path / "first"
    args = ["--server", vllm_server.url, "--model", vllm_server.model, "--max-samples", "2", *FAST]
    assert run_recipe("ovis-ocr2-server.py", str(SAMPLES), str(first), *args).returncode == 0
    refused = run_recipe("ovis-ocr2-server.py", str(first), str(tmp_path / "second"), *args)
    assert refused.returncode == 2
    assert "--overwrite" in refused.stderr
    replaced = run_recipe("ovis-ocr2-server.py", str(first), str(tmp_path / "second"), *args, "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    history = json.loads(load_output(tmp_path / "second")[0]["inference_info"])
    assert len(history) == 2


def stop_after_first_part(script: str, args: list[str], out: Path) -> dict:
    """Runs a recipe, sends SIGTERM once its first progress part is on disk, and returns its summary."""
    process = subprocess.Popen(
        recipe_command(script, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bed_env()
    )
    progress = out / ".ocr-progress" / "default" / "train"
    deadline = time.monotonic() + 300
    while not list(progress.glob("part-*.parquet")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    if process.poll() is not None:
        _, stderr = process.communicate()
        raise AssertionError(
            f"the run ended (exit {process.returncode}) before it could be interrupted: {stderr[-3000:]}"
        )
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    return summary_of(stdout)


def test_sigterm_then_rerun_loses_nothing(vllm_server, tmp_path):
    source = repeated_dataset(tmp_path / "in", copies=4)
    out = tmp_path / "out"
    args = [
        str(source), str(out), "--server", vllm_server.url, "--model", vllm_server.model, "--max-model-len", "1024",
        "--max-tokens", "300", "--temperature", "0", "--max-inflight", "4", "--ignore-eos",
    ]  # fmt: skip
    stopped = stop_after_first_part("ovis-ocr2-server.py", args, out)
    assert stopped["interrupted"] and 0 < stopped["done_this_run"] < 48
    assert not (out / "data").exists()

    rerun = run_recipe("ovis-ocr2-server.py", *args)
    assert rerun.returncode == 0, rerun.stderr
    finished = summary_of(rerun.stdout)
    assert finished["resumed"] == stopped["done_this_run"]
    assert finished["done_this_run"] == 48 - stopped["done_this_run"]
    output = load_output(out)
    assert len(output) == 48
    assert all(text is not None for text in output["markdown"])


def test_hub_output_through_a_client_double(vllm_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    argv = [
        str(SAMPLES), "someone/ocr-out", "--server", vllm_server.url, "--model", vllm_server.model, "--config",
        "hpd", "--max-samples", "5", "--private", *FAST,
    ]  # fmt: skip
    assert run_saturate(HPD, "hpd-parsing-saturate.py", argv=argv, hub=hub) == 0
    assert hub.private == {"someone/ocr-out": True}
    files = hub.list_files("someone/ocr-out")
    assert "README.md" in files
    assert "hpd/train-00000-of-00001-00000.parquet" in files
    assert any(name.startswith(".ocr-progress/hpd/train/part-") for name in files)
    output = load_output(hub.repo("someone/ocr-out"), "hpd")
    assert len(output) == 5
    assert "hpd_blocks" in output.column_names
    assert any(commit.message.startswith("OCR with") for commit in hub.commits)

    resumed_from_hub = FolderHub(tmp_path / "hub")
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "fresh-machine"))
    assert run_saturate(HPD, "hpd-parsing-saturate.py", argv=argv, hub=resumed_from_hub) == 0
    assert (tmp_path / "fresh-machine").exists()
    published = [commit for commit in resumed_from_hub.commits if commit.message.startswith("OCR with")]
    assert published[-1].added == [
        ".ocr-progress/hpd/train/slice-00000-of-00001.json",
        "README.md",
        "hpd/train-00000-of-00001-00000.parquet",
    ]
    assert resumed_from_hub.commits[-1].message == "OCR progress: lease released"


def test_missing_vllm_names_the_image_and_a_command_that_works_here(tmp_path):
    """A local run: a job could read neither its input nor its output folder, so no `hf jobs` command is offered
    (issue 32); the vLLM version to install is named by the recipe's image."""
    env = {**bed_env(), "PATH": "/usr/bin:/bin"}
    port = free_port()
    result = run_recipe(
        "lighton-ocr3-saturate.py", str(SAMPLES), str(tmp_path / "out"), "--server",
        f"http://127.0.0.1:{port}", env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert "hf jobs" not in result.stderr
    assert "Install vLLM at the version of the recipe's image, vllm/vllm-openai:v0.30.0" in result.stderr
    assert f"uv run lighton-ocr3-saturate.py {SAMPLES} {tmp_path / 'out'}" in result.stderr
    assert f"Nothing answers at --server http://127.0.0.1:{port}" in result.stderr
    assert not (tmp_path / "out" / "data").exists()


def server_group(port: int) -> int:
    """The process group of the `vllm serve` listening on `port` (its leader's pid)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and str(port).encode() in argv and b"--port" in argv:
            return os.getpgid(int(proc.name))
    raise AssertionError(f"no vllm serve on port {port}")


def server_log(port: int) -> Path:
    """Where a recipe writes the log of the server it spawns on `port` (serving/handle.py)."""
    return Path(tempfile.gettempdir()) / f"vllm-serve-{port}.log"


def pages_answered(port: int) -> int:
    """The pages the spawned server on `port` has answered so far, from its access log."""
    log = server_log(port)
    return log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200') if log.exists() else 0


@pytest.mark.heavy
def test_spawned_engine_is_restarted_when_killed(tiny_model, tmp_path):
    source = repeated_dataset(tmp_path / "in", copies=8)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        str(source), str(tmp_path / "out"), "--server", url, "--model", str(tiny_model), "--max-model-len", "1024",
        "--max-tokens", "300", "--temperature", "0", "--max-inflight", "8", "--extra-serve-args=--enforce-eager",
        "--ignore-eos",
    ]  # fmt: skip
    server_log(port).unlink(missing_ok=True)  # an earlier run's on the same port would count its pages
    log = tmp_path / "recipe.stderr"
    with log.open("w") as sink:
        process = subprocess.Popen(
            recipe_command("lighton-ocr3-saturate.py", *args), stdout=subprocess.PIPE, stderr=sink, text=True,
            env=bed_env(),
        )  # fmt: skip
    try:
        # The engine dies mid-run: once it has answered a first page of 96 (its metrics gauge of running requests,
        # read before, missed a 48-page run that took 7 s on a loaded machine).
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and process.poll() is None and not pages_answered(port):
            time.sleep(0.1)
        assert process.poll() is None, log.read_text()[-3000:]
        os.killpg(server_group(port), signal.SIGKILL)
        stdout, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = log.read_text()
    assert process.returncode == 0, stderr
    assert "restarting it (1/3)" in stderr
    summary = summary_of(stdout)
    assert summary["rows"] == 96 and summary["missing"] == 0
    output = load_output(tmp_path / "out")
    assert not [error for error in output["ocr_error"] if error and "gave up" in error]
    assert all(text is not None for text in output["markdown"])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_two_shards_publish_their_own_slices_equal_to_an_unsharded_run(vllm_server, tmp_path):
    """Each shard publishes its own range as it finishes (shard 1 first: nothing waits for shard 0); the two
    slices, loaded together, are the unsharded run's rows in the unsharded run's order, text included."""
    out, whole = tmp_path / "out", tmp_path / "whole"
    # One page in flight at a time: the tiny random model's greedy tokens are near ties, and a page batched with
    # others on the CPU engine can end on another token than the same page alone (seen under load, 2026-12-02).
    common = ["--model", vllm_server.model, "--server", vllm_server.url, *FAST, "--max-inflight", "1"]
    second = run_recipe("lighton-ocr3-saturate.py", str(SAMPLES), str(out), *common, "--shard", "1/2")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "published 6 row(s) (shard 1/2)" in second.stderr
    assert "**1 of 2 shards are in.**" in (out / "README.md").read_text()
    page_ids = datasets.load_dataset(str(SAMPLES), split="train")["page_id"]
    assert load_output(out)["page_id"] == page_ids[6:]
    first = run_recipe("lighton-ocr3-saturate.py", str(SAMPLES), str(out), *common, "--shard", "0/2")
    assert first.returncode == 0, first.stderr[-3000:]
    assert [summary_of(run.stdout)["done_this_run"] for run in (first, second)] == [6, 6]
    assert "**2 of 2 shards are in.**" in (out / "README.md").read_text()
    unsharded = run_recipe("lighton-ocr3-saturate.py", str(SAMPLES), str(whole), *common)
    assert unsharded.returncode == 0, unsharded.stderr[-3000:]
    sharded, expected = load_output(out, cache="again"), load_output(whole)
    assert sharded["page_id"] == page_ids and all(sharded["markdown"])
    compared = [name for name in expected.column_names if name != "inference_info"]
    assert sharded.select_columns(compared).to_list() == expected.select_columns(compared).to_list()


def test_several_servers_given_are_one_fleet_that_keeps_order_and_resumes(vllm_server, tmp_path):
    """Two --server URLs (the shared engine under two names) are fed as one fleet: both get pages, the output keeps
    input order, a rerun resumes; a URL that never answers does not hold the others back: they do every page."""
    alias = vllm_server.url.replace("127.0.0.1", "localhost")
    out = tmp_path / "out"
    args = [str(SAMPLES), str(out), "--server", f"{vllm_server.url},{alias}", "--model", vllm_server.model, *FAST]
    first = run_recipe("lighton-ocr3-saturate.py", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = summary_of(first.stdout)
    assert (summary["rows"], summary["errors"], summary["missing"]) == (12, 0, 0)
    assert [replica["url"] for replica in summary["replicas"]] == [vllm_server.url, alias]
    assert all(replica["pages"] > 0 for replica in summary["replicas"]), summary["replicas"]
    assert summary["serving"].startswith("2 server(s) given with --server")
    output = load_output(out)
    assert output["page_id"] == datasets.load_dataset(str(SAMPLES), split="train")["page_id"]
    again = run_recipe("lighton-ocr3-saturate.py", *args)
    assert again.returncode == 0 and summary_of(again.stdout)["resumed"] == 12

    silent = f"http://127.0.0.1:{free_port()}"
    alone = run_recipe(
        "lighton-ocr3-saturate.py", str(SAMPLES), str(tmp_path / "other"), "--server", f"{vllm_server.url},{silent}",
        "--model", vllm_server.model, "--startup-timeout", "3", *FAST,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert f"waiting up to 3 s for {silent} to answer /health" in alone.stderr
    summary = summary_of(alone.stdout)
    assert [replica["pages"] for replica in summary["replicas"]] == [12, 0]


def test_a_replica_that_dies_hands_its_pages_to_the_other_and_leaves(vllm_server, tiny_model, tmp_path):
    """Two servers given with --server, one killed while it works: its pages go to the other, it leaves the fleet
    once it has not come back within --startup-timeout, and every row gets its text. The pages left at the kill take
    the other server about 20 s on a 2-core machine and less on a faster one, so the timeout is 2 s: the leave comes
    well before the run's end, which would otherwise report the dead server as still recovering (with half as many
    pages, an unloaded fresh-clone run once ended first)."""
    with running_server(tiny_model, tmp_path / "second.log") as second:
        args = [
            str(repeated_dataset(tmp_path / "in", copies=16)), str(tmp_path / "out"),
            "--server", f"{vllm_server.url},{second.url}", "--model", vllm_server.model, "--max-model-len", "1024",
            "--max-tokens", "200", "--temperature", "0", "--ignore-eos", "--max-inflight", "4",
            "--startup-timeout", "2", "--no-canary",
        ]  # fmt: skip
        process = subprocess.Popen(
            recipe_command("lighton-ocr3-saturate.py", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=bed_env(),
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and process.poll() is None and answered(second.url) < 2:
                time.sleep(0.3)
            assert process.poll() is None, process.stderr.read()
            os.killpg(second.process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, stderr[-3000:]
    assert f"{second.url} leaves the fleet" in stderr
    summary = summary_of(stdout)
    assert (summary["rows"], summary["missing"], summary["errors"]) == (192, 0, 0)
    states = {replica["url"]: replica["state"] for replica in summary["replicas"]}
    assert states == {vllm_server.url: "serving", second.url: "gone"}
    assert all(text is not None for text in load_output(tmp_path / "out")["markdown"])


def answered(url: str) -> float:
    """Requests a server has finished, from its own counter."""
    try:
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("vllm:request_success_total")
    )


@pytest.mark.heavy
def test_a_spawned_server_reports_its_start_and_the_next_run_loads_its_engine_cache(tiny_model, tmp_path):
    """Issue 42 on the real CPU engine: each run's summary carries the spawned replica's start-up timeline, read
    from its serve log, and the engine cache's use; the first run writes the cache, the second loads it."""
    cache = tmp_path / "engine-cache"
    summaries = []
    for run in ("cold", "warm"):
        port = free_port()
        args = [
            str(SAMPLES), str(tmp_path / f"out-{run}"), "--server", f"http://127.0.0.1:{port}", "--model",
            str(tiny_model), "--max-samples", "1", "--extra-serve-args=--enforce-eager", "--engine-cache", str(cache),
            *FAST,
        ]  # fmt: skip
        result = run_recipe("lighton-ocr3-saturate.py", *args)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "its start: " in result.stderr and " setup " in result.stderr
        summaries.append(summary_of(result.stdout))
    for summary in summaries:
        (replica,) = summary["replicas"]
        phases = replica["startup"]["phases_s"]
        before_load = [phases[name] for name in ("imports", "processes", "setup") if phases[name] is not None]
        assert sum(before_load) > 0 and phases["load"] is not None and phases["kv_cache_and_graphs"] is not None
        assert phases["compile"] is None, "--enforce-eager compiles nothing"
        assert sum(value for value in phases.values() if value is not None) == pytest.approx(
            replica["startup"]["total_s"], abs=0.5
        )
    cold, warm = (summary["engine_cache"] for summary in summaries)
    assert cold["outcome"] == "miss" and cold["written_bytes"] > 0
    assert warm["outcome"] == "hit" and warm["key"] == cold["key"] and warm["loaded_bytes"] > 0
    assert [path.name for path in cache.iterdir()] == [f"{cold['key']}.tar"]
