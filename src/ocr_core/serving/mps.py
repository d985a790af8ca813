"""CUDA MPS for replicas that share a GPU: their kernels then run side by side on the SMs instead of taking turns.

Replicas of a small model on one GPU each leave most SMs idle in their own time slice; under the MPS control daemon
the engines' kernels share the SMs. The run starts the daemon only where its control program exists and no daemon
already runs (one that runs belongs to someone else: the replicas join it, and it is left running), and stops only
the one it started. Where MPS is missing, or its start fails, the run goes on without it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..console import say

CONTROL = "nvidia-cuda-mps-control"
# Where the NVIDIA container toolkit mounts the driver's programs when they are not on PATH.
DRIVER_BIN = "/usr/local/nvidia/bin"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
START, JOIN, WITHOUT = "start", "join", "without"
CONTROL_TIMEOUT_S = 30.0


def mps_decision(sharing: bool, control: str | None, running: bool) -> str:
    """START the daemon, JOIN one that already runs, or go on WITHOUT: only replicas sharing a GPU gain from it,
    and only where its control program exists."""
    if not sharing or control is None:
        return WITHOUT
    return JOIN if running else START


def find_control() -> str | None:
    return shutil.which(CONTROL) or shutil.which(CONTROL, path=DRIVER_BIN)


def daemon_running(environ: dict[str, str]) -> bool:
    """A control daemon listens on the `control` pipe in its pipe directory (CUDA_MPS_PIPE_DIRECTORY, or the
    default one)."""
    return (Path(environ.get("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_PIPE_DIRECTORY)) / "control").exists()


@contextlib.contextmanager
def cuda_mps(sharing: bool) -> Iterator[str]:
    """Around the run: the daemon for the replicas it starts, which find it through the environment they inherit
    (CUDA_MPS_PIPE_DIRECTORY, set in this process for the run, since restarts spawn replicas too). Yields the
    decision taken, for the log."""
    control = find_control()
    decision = mps_decision(sharing, control, daemon_running(dict(os.environ)))
    if decision != START or control is None:
        yield decision
        return
    folder = Path(tempfile.mkdtemp(prefix="ocr-mps-"))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    for path in env.values():
        Path(path).mkdir()
    if not control_command(control, ["-d"], env):
        say(f"CUDA MPS did not start (see {folder / 'log'}); the replicas share the GPU without it")
        yield WITHOUT
        return
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    say(f"CUDA MPS control daemon started ({env['CUDA_MPS_PIPE_DIRECTORY']}): the replicas share the GPU's SMs")
    try:
        yield decision
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if not control_command(control, [], env, "quit\n"):
            say(
                "CUDA MPS did not stop; stop it with: echo quit | "
                f"CUDA_MPS_PIPE_DIRECTORY={env['CUDA_MPS_PIPE_DIRECTORY']} {control}"
            )


def control_command(control: str, args: list[str], env: dict[str, str], stdin: str | None = None) -> bool:
    try:
        done = subprocess.run(
            [control, *args],
            input=stdin,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=CONTROL_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0
