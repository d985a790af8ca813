"""Races and leftovers around the progress store: several runs, several machines, failed uploads, old folders.

Each test is a scenario a review of the store found to lose, mix or strand results; a fake vLLM server answers and
the Hub is the folder double.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from ocr_core.preparation import job as job_module
from ocr_core.serving import handle as engine_module
from ocr_core.store import hub as hub_module
from ocr_core.store import lease as lease_module
from ocr_core.store import progress as progress_module
from ocr_core.store.lease import Lease
from ocr_core.store.progress import ResultLog, RowResult, part_files
from tests.test_resume_publish import (
    PROGRESS,
    REPO,
    SAMPLES,
    hub_parts,
    hub_process,
    load,
    repeated,
    run_main,
    served,
    wait_for_progress,
)
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub
from tests.testbed.recipes import run_entry

SCRIPT = "ovis-ocr2-server.py"


@pytest.fixture(autouse=True)
def quick_hub_retries(monkeypatch):
    monkeypatch.setattr(hub_module, "UPLOAD_BACKOFF_S", 0.01)


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


def machine(monkeypatch, tmp_path: Path, name: str) -> Path:
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / name))
    return tmp_path / name / "someone__ocr-out" / PROGRESS


def http_refusal(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://huggingface.co/api/datasets/someone/ocr-out/commit/main")
    return httpx.HTTPStatusError(str(status), request=request, response=httpx.Response(status, request=request))


def test_overwrite_by_one_shard_is_refused_while_another_shard_runs(tmp_path, capsys, monkeypatch):
    source = repeated(tmp_path / "in", copies=4)
    hub_folder = tmp_path / "hub"
    with fake_server(delay_s=0.3) as server:
        first = hub_process(
            hub_folder, SCRIPT, [str(source), REPO, *served(server, "--shard", "0/2", "--max-inflight", "1")],
            tmp_path / "machine-1",
        )  # fmt: skip
        try:
            wait_for_progress(first, tmp_path / "machine-1" / "someone__ocr-out" / PROGRESS)
            machine(monkeypatch, tmp_path, "machine-2")
            other = [str(source), REPO, *served(server, "--shard", "1/2", "--temperature", "0.5", "--overwrite")]
            code, _, err = run_main(SCRIPT, other, capsys, hub=FolderHub(hub_folder))
        finally:
            first.terminate()
            first.wait(timeout=60)
    assert code == 1 and "another run is writing" in err


def test_a_run_whose_results_another_run_replaced_never_publishes_them(tmp_path, capsys, monkeypatch):
    source = repeated(tmp_path / "in", copies=4)
    hub_folder = tmp_path / "hub"
    with fake_server(delay_s=0.3) as server:
        argv = [str(source), REPO, *served(server, "--max-inflight", "1", "--upload-every", "1")]
        first = hub_process(hub_folder, SCRIPT, argv, tmp_path / "machine-1")
        try:
            wait_for_progress(first, tmp_path / "machine-1" / "someone__ocr-out" / PROGRESS)
            machine(monkeypatch, tmp_path, "machine-2")
            other = [str(source), REPO, *served(server, "--temperature", "0.5", "--overwrite", "--take-over")]
            code, _, err = run_main(SCRIPT, other, capsys, hub=FolderHub(hub_folder))
            assert code == 0, err
            published = set(load(hub_folder / REPO)["markdown"])
            _, stderr = first.communicate(timeout=120)
        finally:
            if first.poll() is None:
                first.kill()
    assert first.returncode == 1 and "another run replaced the results" in stderr
    assert set(load(hub_folder / REPO)["markdown"]) == published, "the replaced run published over the new one"


def test_a_machine_s_stale_copy_of_replaced_results_is_dropped(server, tmp_path, capsys, monkeypatch):
    hub = FolderHub(tmp_path / "hub")
    earlier = [str(tmp_path / "in"), REPO, *served(server, "--max-tokens", "16")]
    repeated(tmp_path / "in", copies=1)
    machine(monkeypatch, tmp_path, "machine-1")
    assert run_main(SCRIPT, earlier, capsys, hub=hub)[0] == 0
    earlier_text = set(load(hub.repo(REPO))["markdown"])
    machine(monkeypatch, tmp_path, "machine-2")
    later = [str(tmp_path / "in"), REPO, *served(server, "--temperature", "0.5", "--overwrite")]
    assert run_main(SCRIPT, [*later, "--max-samples", "3"], capsys, hub=hub)[0] == 0
    machine(monkeypatch, tmp_path, "machine-1")
    code, summary, err = run_main(SCRIPT, later, capsys, hub=hub)
    assert code == 0, err
    assert summary["resumed"] == 3 and summary["done_this_run"] == 9
    assert not earlier_text & set(load(hub.repo(REPO))["markdown"])


def test_results_that_never_reached_the_hub_are_uploaded_by_the_rerun(server, tmp_path, capsys, monkeypatch):
    hub = FolderHub(tmp_path / "hub", refuse=lambda message, pr: ConnectionError("down") if "in, " in message else None)
    machine(monkeypatch, tmp_path, "machine-1")
    argv = [str(tmp_path / "in"), REPO, *served(server, "--shard", "0/2")]
    repeated(tmp_path / "in", copies=1)
    code, _, err = run_main(SCRIPT, argv, capsys, hub=hub)
    assert code == 1 and "could not reach" in err and not hub_parts(hub)
    hub.refuse = None
    code, summary, err = run_main(SCRIPT, argv, capsys, hub=hub)
    assert code == 0 and summary["done_this_run"] == 0, err
    assert hub_parts(hub), "the rerun left the finished rows on this machine only"


def test_finalize_is_refused_and_points_to_per_shard_publishing(tmp_path, capsys):
    dead = ["--server", "http://127.0.0.1:9", "--model", "fake/model", "--max-model-len", "1024", "--max-tokens", "16"]
    code, summary, err = run_main(
        SCRIPT, [str(tmp_path / "in"), REPO, *dead, "--finalize"], capsys, hub=FolderHub(tmp_path / "hub")
    )
    assert (code, summary["exit_code"]) == (2, 2)
    assert "each --shard I/N publishes its own rows" in err
    assert not (tmp_path / "hub").exists()


def test_the_hub_lease_stays_alive_while_the_engine_starts(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lease_module, "MIN_LEASE_S", 2.0)
    slow_open = engine_module.ServerHandle.open

    async def open_slowly(self):
        await __import__("asyncio").sleep(5)
        return await slow_open(self)

    monkeypatch.setattr(engine_module.ServerHandle, "open", open_slowly)
    machine(monkeypatch, tmp_path, "machine-1")
    repeated(tmp_path / "in", copies=1)
    hub = FolderHub(tmp_path / "hub")
    lapses = []

    def watch() -> None:
        deadline = time.monotonic() + 4.5
        while time.monotonic() < deadline:
            for path in hub.repo(REPO).glob(".ocr-progress/default/train/lease-*.json"):
                try:
                    if Lease.from_json(path.read_text()).expires < time.time():
                        lapses.append(path.name)
                except (OSError, ValueError):
                    continue
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    code, _, err = run_main(
        SCRIPT, [str(tmp_path / "in"), REPO, *served(server, "--upload-every", "1")], capsys, hub=hub
    )
    watcher.join()
    assert code == 0, err
    assert lapses == [], "the lease expired while the engine was starting"


def test_create_pr_without_write_access_to_main_keeps_progress_here(server, tmp_path, capsys, monkeypatch):
    machine(monkeypatch, tmp_path, "machine-1")
    repeated(tmp_path / "in", copies=1)
    hub = FolderHub(tmp_path / "hub", refuse=lambda message, pr: None if pr else http_refusal(403))
    code, _, err = run_main(SCRIPT, [str(tmp_path / "in"), REPO, "--create-pr", *served(server)], capsys, hub=hub)
    assert code == 0, err
    assert "progress stays on this machine" in err
    assert [commit.create_pr for commit in hub.commits] == [True]


def test_results_of_an_earlier_version_are_adopted(server, tmp_path, capsys):
    out = tmp_path / "out"
    folder = out / PROGRESS
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        json.dumps(
            {"input": str(tmp_path / "in"), "split": "train", "model": "fake/model", "output_column": "markdown"}
        )
    )
    repeated(tmp_path / "in", copies=1)
    log = ResultLog(folder, "20261101T000000Z-legacy", flush_rows=100)
    for index in range(5):
        log.add(RowResult(index, f"train-{index}", text=f"old text {index}"))
    log.flush()
    part = part_files(folder)[0]
    pq.write_table(pq.read_table(part).drop_columns(["recorded_at"]), part)
    code, summary, err = run_main(SCRIPT, [str(tmp_path / "in"), str(out), *served(server)], capsys)
    assert code == 0, err
    assert summary["resumed"] == 5 and summary["done_this_run"] == 7
    assert "earlier version" in err


def test_an_unreadable_manifest_asks_for_overwrite(server, tmp_path, capsys):
    out = tmp_path / "out"
    repeated(tmp_path / "in", copies=1)
    argv = [str(tmp_path / "in"), str(out), *served(server)]
    assert run_main(SCRIPT, argv, capsys)[0] == 0
    (out / PROGRESS / "manifest.json").write_bytes(b"")
    code, _, err = run_main(SCRIPT, argv, capsys)
    assert code == 2 and "--overwrite" in err
    code, summary, err = run_main(SCRIPT, [*argv, "--overwrite"], capsys)
    assert code == 0 and summary["done_this_run"] == 12, err


def test_a_lease_that_vanishes_while_it_is_read_is_passed_over(server, tmp_path, capsys, monkeypatch):
    class VanishingLeases(FolderHub):
        def download(self, repo_id: str, path_in_repo: str, local_dir: Path) -> Path:
            if "/lease-" in path_in_repo:
                raise FileNotFoundError(path_in_repo)
            return super().download(repo_id, path_in_repo, local_dir)

    machine(monkeypatch, tmp_path, "machine-1")
    repeated(tmp_path / "in", copies=1)
    hub = VanishingLeases(tmp_path / "hub")
    gone = hub.repo(REPO) / ".ocr-progress" / "default" / "train"
    gone.mkdir(parents=True)
    (gone / "lease-all-20260101T000000Z-ended.json").write_text("{}")
    started = time.monotonic()
    code, _, err = run_main(SCRIPT, [str(tmp_path / "in"), REPO, *served(server)], capsys, hub=hub)
    assert code == 0, err
    assert time.monotonic() - started < 30
    assert "passing over lease" in err


def test_a_failed_part_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    class FullDisk:
        def __init__(self, *args, **kwargs):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(progress_module.pq, "ParquetWriter", FullDisk)
    log = ResultLog(tmp_path, "run", flush_rows=1)
    with pytest.raises(OSError):
        log.add(RowResult(0, "train-0", text="x"))
    assert list(tmp_path.iterdir()) == []


# ---- issue 23 items 1 and 2: what happens while a run loads its input ----


def during_input_load(monkeypatch, action) -> dict:
    """Runs `action()` once, inside the first input load of the run under test (a large dataset takes minutes)."""
    seen: dict = {}
    real_load = job_module.load_source

    def load_slowly(*args, **kwargs):
        if not seen:
            seen["result"] = action()
        return real_load(*args, **kwargs)

    monkeypatch.setattr(job_module, "load_source", load_slowly)
    return seen


def other_machine(tmp_path: Path, hub_folder: Path, argv: list[str]) -> int:
    """A whole run of `argv` on another machine (its own work folder), start to end."""
    before = os.environ["OCR_WORK_DIR"]
    os.environ["OCR_WORK_DIR"] = str(tmp_path / "machine-2")
    try:
        return run_entry(SCRIPT, argv, FolderHub(hub_folder))
    finally:
        os.environ["OCR_WORK_DIR"] = before


def live_leases(hub: FolderHub) -> list[Lease]:
    now = time.time()
    found = [Lease.from_json(path.read_text()) for path in hub.repo(REPO).glob(".ocr-progress/*/*/lease-*.json")]
    return [lease for lease in found if lease.expires > now]


def test_a_run_of_other_settings_that_wrote_during_this_ones_input_load_stops_this_one(
    server, tmp_path, capsys, monkeypatch
):
    """Shard 1/2 with another --temperature starts and finishes while shard 0/2 loads: shard 0/2 must not then
    write its manifest over the other's and publish its text beside the other's under one card."""
    machine(monkeypatch, tmp_path, "machine-1")
    hub = FolderHub(tmp_path / "hub")
    other = [str(SAMPLES), REPO, *served(server, "--shard", "1/2", "--temperature", "0.5")]
    seen = during_input_load(monkeypatch, lambda: other_machine(tmp_path, hub.root, other))
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), REPO, *served(server, "--shard", "0/2")], capsys, hub=hub)
    assert summary["exit_code"] == code
    assert seen["result"] == 0, "the other shard, alone on the output, should have finished"
    assert code == 2, err[-3000:]
    assert "made another way" in err and "sampling" in err
    manifest = json.loads((hub.repo(REPO) / ".ocr-progress/default/train/manifest.json").read_text())
    assert manifest["sampling"]["temperature"] == 0.5, "the other run's manifest was replaced"
    assert not [name for name in hub.list_files(REPO) if "-00000-of-00002-" in name], "shard 0/2 published"


def test_the_lease_is_on_the_hub_and_renewed_through_a_long_input_load(server, tmp_path, capsys, monkeypatch):
    """A load longer than the lease: the same command on another machine meanwhile finds the lease alive."""
    monkeypatch.setattr(lease_module, "MIN_LEASE_S", 2.0)
    machine(monkeypatch, tmp_path, "machine-1")
    hub = FolderHub(tmp_path / "hub")
    argv = [str(SAMPLES), REPO, *served(server, "--upload-every", "1")]

    def meanwhile() -> tuple[list[Lease], int]:
        time.sleep(4.5)  # past the 3 s lease: only a renewal keeps it alive
        return live_leases(hub), other_machine(tmp_path, hub.root, argv)

    seen = during_input_load(monkeypatch, meanwhile)
    code, summary, err = run_main(SCRIPT, argv, capsys, hub=hub)
    leases, second = seen["result"]
    assert len(leases) == 1 and leases[0].key == "all", "no live lease on the Hub during the input load"
    assert second == 1, "the same command on another machine ran beside the first"
    assert code == 0, err[-3000:]
    assert summary["done_this_run"] == 12
    assert live_leases(hub) == [], "the lease outlived its run"
