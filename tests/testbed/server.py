"""Runs a real `vllm serve` of a test model for the duration of a `with` block.

The server gets its own process group, so that stopping it also stops the engine and worker processes
it spawns; no stray engine outlives the tests. Start-up failures carry the log's tail, since the
cause is usually only visible there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.testbed.env import testbed_env

MAX_MODEL_LEN = 1024
LIMIT_MM_PER_PROMPT = {"image": 1}
START_DEADLINE_S = 300.0
STOP_GRACE_S = 20.0
LOG_TAIL_LINES = 60


@dataclass(frozen=True)
class VllmServer:
    """A running `vllm serve` process and how to reach it."""

    url: str
    model: str
    log_path: Path
    process: subprocess.Popen[bytes]


class ServerStartError(RuntimeError):
    """`vllm serve` exited or stayed unhealthy during start-up."""


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last lines of a log file, or a note when there is none."""
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def free_port() -> int:
    """Ask the kernel for a free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command(model: Path, port: int) -> list[str]:
    """`vllm serve` as the recipes spawn it, plus the CPU test bed's limits.

    --enforce-eager skips torch.compile: healthy in about 50 s instead of 65-75 s on two cores.
    """
    return [
        "vllm", "serve", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--no-enable-prefix-caching",
        "--limit-mm-per-prompt", '{"image": 1}',
        "--enforce-eager",
    ]  # fmt: skip


@contextmanager
def running_server(model: Path, log_path: Path, deadline_s: float = START_DEADLINE_S) -> Iterator[VllmServer]:
    """Start `vllm serve` on a free port, wait until healthy, yield it, and always stop it."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            serve_command(model, port),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=testbed_env(),
            start_new_session=True,
        )
    server = VllmServer(f"http://127.0.0.1:{port}", str(model), log_path, process)
    try:
        wait_healthy(server, deadline_s)
        yield server
    finally:
        stop(process)


def wait_healthy(server: VllmServer, deadline_s: float) -> None:
    """Poll /health until it answers 200; raise with the log tail if the server dies or is too slow."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ServerStartError(
                f"vllm serve exited with {server.process.returncode} before it was healthy:\n"
                f"{log_tail(server.log_path)}"
            )
        if _healthy(server.url):
            return
        time.sleep(1.0)
    raise ServerStartError(f"vllm serve not healthy after {deadline_s:.0f} s:\n{log_tail(server.log_path)}")


def _healthy(url: str) -> bool:
    """Whether /health answers 200 now."""
    try:
        return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


def stop(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the server's process group, give it grace_s to exit, then SIGKILL whatever is left of
    the group (engine and worker processes included)."""
    _signal_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send sig to a process group that may already be gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
