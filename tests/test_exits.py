"""Every way a run ends prints the one JSON summary line with the documented exit code (issue 12, item 8).

A fake vLLM server answers; the Hub is the folder double, made to fail in the ways a real Hub, disk or network can.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from ocr_core.publishing import outcome as outcome_module
from ocr_core.shapes import served as run_server
from ocr_core.store import hub as hub_module
from ocr_core.store.hub import HubRefused, with_retries
from tests.test_resume_publish import REPO, SAMPLES, repeated, run_main, served
from tests.testbed.env import script_command
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub


@pytest.fixture(autouse=True)
def quick_hub_retries(monkeypatch):
    monkeypatch.setattr(hub_module, "UPLOAD_BACKOFF_S", 0.01)


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


class BrokenHub(FolderHub):
    """A Hub double whose listing fails with `error` (after `fail_after` good listings)."""

    def __init__(self, root: Path, error: Exception, fail_after: int = 0) -> None:
        super().__init__(root)
        self.error = error
        self.fail_after = fail_after
        self.calls = 0

    def list_files(self, repo_id: str) -> list[str]:
        self.calls += 1
        if self.calls > self.fail_after:
            raise self.error
        return super().list_files(repo_id)


def http_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://huggingface.co/api/datasets/someone/ocr-out")
    return httpx.HTTPStatusError(f"{status}", request=request, response=httpx.Response(status, request=request))


@pytest.mark.parametrize(
    ("error", "code"),
    [(OSError(28, "No space left on device"), 1), (http_error(401), 2), (http_error(403), 2)],
    ids=["disk-full", "hub-401", "hub-403"],
)
def test_hub_and_os_errors_end_with_a_summary(server, tmp_path, capsys, monkeypatch, error, code):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = BrokenHub(tmp_path / "hub", error)
    exit_code, summary, err = run_main("ovis-ocr2-server.py", [str(SAMPLES), REPO, *served(server)], capsys, hub=hub)
    assert exit_code == code
    assert summary["exit_code"] == code and summary["failure"]
    assert "Traceback" not in err


def test_a_hub_refusal_is_not_retried():
    calls = []

    def refused() -> None:
        calls.append(1)
        raise http_error(401)

    with pytest.raises(HubRefused, match="HF_TOKEN"):
        with_retries(refused, "listing")
    assert len(calls) == 1


def test_a_command_error_ends_with_a_summary(server, tmp_path, capsys):
    argv = [str(SAMPLES), str(tmp_path / "out"), "--image-column", "scan", *served(server)]
    code, summary, _ = run_main("ovis-ocr2-server.py", argv, capsys)
    assert code == 2 and summary["exit_code"] == 2 and "--image-column" in summary["failure"]


def test_an_arrow_error_while_publishing_keeps_the_results_and_says_so(server, tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise pa.ArrowInvalid("simulated: cannot cast")

    monkeypatch.setattr(outcome_module, "assemble", broken)
    out = tmp_path / "out"
    code, summary, err = run_main("ovis-ocr2-server.py", [str(SAMPLES), str(out), *served(server)], capsys)
    assert code == 1 and summary["exit_code"] == 1 and summary["missing"] == 0
    assert "publishing failed" in err and "rerun the same command to publish" in err
    monkeypatch.undo()
    code, summary, _ = run_main("ovis-ocr2-server.py", [str(SAMPLES), str(out), *served(server)], capsys)
    assert code == 0 and summary["done_this_run"] == 0


def test_a_cancellation_from_inside_is_a_failure_not_a_crash(server, tmp_path, capsys, monkeypatch):
    async def cancelled(*args, **kwargs):
        raise asyncio.CancelledError

    monkeypatch.setattr(run_server, "pump_pages", cancelled)
    code, summary, _ = run_main("ovis-ocr2-server.py", [str(SAMPLES), str(tmp_path / "out"), *served(server)], capsys)
    assert code == 1 and "cancelled" in summary["failure"]


def test_a_second_sigterm_during_clean_up_still_prints_the_summary(tmp_path):
    source = repeated(tmp_path / "in", copies=4)
    out = tmp_path / "out"
    with fake_server(delay_s=0.2) as server:
        argv = [str(source), str(out), *served(server, "--max-inflight", "2")]
        process = subprocess.Popen(
            script_command("ovis-ocr2-server.py", *argv),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bed_env(),
        )  # fmt: skip
        deadline = time.monotonic() + 120
        progress = out / ".ocr-progress" / "default" / "train"
        while not list(progress.glob("*.parquet")) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["exit_code"] == 143 and summary["interrupted"] and summary["done_this_run"] > 0
