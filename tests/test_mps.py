"""CUDA MPS around a run: started only where it exists and none runs, joined where one runs, stopped only when
this run started it; a fake control program records what the run asked of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ocr_core.serving import mps
from ocr_core.serving.mps import JOIN, START, WITHOUT, cuda_mps, mps_decision


def test_the_decision_needs_a_shared_gpu_and_the_control_program():
    assert mps_decision(sharing=True, control="/bin/mps", running=False) == START
    assert mps_decision(sharing=True, control="/bin/mps", running=True) == JOIN
    assert mps_decision(sharing=True, control=None, running=False) == WITHOUT
    assert mps_decision(sharing=False, control="/bin/mps", running=False) == WITHOUT


@pytest.fixture
def control(tmp_path, monkeypatch) -> Path:
    """A control program that logs its arguments, stdin and pipe directory, and fails when FAIL_MPS is set."""
    calls = tmp_path / "calls"
    program = tmp_path / "nvidia-cuda-mps-control"
    program.write_text(
        '#!/bin/sh\n[ -n "$FAIL_MPS" ] && exit 1\n'
        f'echo "args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY stdin=$(cat)" >> {calls}\n'
    )
    program.chmod(0o755)
    monkeypatch.setattr(mps, "find_control", lambda: str(program))
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.setattr(mps, "DEFAULT_PIPE_DIRECTORY", str(tmp_path / "no-daemon"))
    return calls


def test_a_started_daemon_is_seen_by_the_replicas_and_stopped_at_the_end(control):
    with cuda_mps(sharing=True) as decision:
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
        started = control.read_text()
    assert decision == START
    assert started == f"args=-d pipe={pipe} stdin=\n"
    assert control.read_text().splitlines()[1] == f"args= pipe={pipe} stdin=quit"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ


def test_a_daemon_already_running_is_joined_and_left_running(control, tmp_path, monkeypatch):
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "control").touch()
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "theirs"))
    with cuda_mps(sharing=True) as decision:
        assert os.environ["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "theirs")
    assert decision == JOIN
    assert not control.exists()


def test_a_daemon_that_does_not_start_leaves_the_run_without_it(control, monkeypatch):
    monkeypatch.setenv("FAIL_MPS", "1")
    with cuda_mps(sharing=True) as decision:
        assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert decision == WITHOUT
