"""A new user's first hour (issue 24): bad input answered at once, a card that tells the truth, a plain ending.

No test reaches the Hub: Hub failures are the exceptions huggingface_hub and datasets raise, built here and thrown
by the folder double; runs use the fake vLLM server where the engine does not matter.
"""

from __future__ import annotations

import time
from pathlib import Path

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

from ocr_core import hub as hub_module
from ocr_core.inputs import input_problem
from tests.test_resume_publish import SAMPLES, run_main, served
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub


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
