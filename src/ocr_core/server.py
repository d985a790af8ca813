"""Finds or starts the vLLM server a run talks to, and stops what it started on every way out.

A recipe reuses any server whose /health answers; otherwise, for a local address, it spawns `vllm serve` with the
model card's flags in its own process group, so that one kill takes the API servers and engine cores with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from .redact import redact

LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"}
HEALTH_POLL_S = 2.0
STOP_GRACE_S = 30.0
LOG_TAIL_LINES = 40


class ServerError(RuntimeError):
    """The server could not be found, started or kept alive; the message says what to do."""


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOCAL_HOSTS


def url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def healthy(url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0) -> bool:
    try:
        return httpx.get(f"{url}/health", headers=headers, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def served_model(url: str, wanted: str, headers: Mapping[str, str] | None = None) -> str:
    """The name to put in requests: the wanted model if the server lists it, else the only one it serves."""
    response = httpx.get(f"{url}/v1/models", headers=headers, timeout=30.0)
    if response.status_code in (401, 403):
        raise ServerError(
            f"{url} refused the API key ({response.status_code}); set VLLM_API_KEY (or HF_TOKEN for an HF Jobs "
            "endpoint) to a key it accepts"
        )
    response.raise_for_status()
    ids = [entry["id"] for entry in response.json().get("data", [])]
    if wanted in ids or not ids:
        return wanted
    if len(ids) == 1:
        return ids[0]
    raise ServerError(f"{url} serves {ids}; pass --model with the one to use")


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def serve_command(model: str, serve_args: Sequence[str], port: int, extra: Sequence[str] = ()) -> list[str]:
    """`vllm serve` exactly as the model card gives it, bound to loopback on our port."""
    return ["vllm", "serve", model, *serve_args, *extra, "--host", "127.0.0.1", "--port", str(port)]


@dataclass
class SpawnedServer:
    """One `vllm serve` process group that this run owns."""

    argv: list[str]
    url: str
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "vllm-serve.log")
    process: subprocess.Popen | None = None

    def start(self) -> None:
        if shutil.which("vllm", path=self.env.get("PATH")) is None:
            raise ServerError("the `vllm` command is not on PATH")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== {redact(' '.join(self.argv))}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, deadline_s: float) -> None:
        """Polls /health until it answers, the process exits, or the deadline passes."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.process.returncode if self.process else None
                raise ServerError(
                    f"vllm serve exited with code {code} before it was ready. Last lines of {self.log_path}:\n"
                    f"{log_tail(self.log_path)}"
                )
            if healthy(self.url, timeout=HEALTH_POLL_S):
                return
            time.sleep(HEALTH_POLL_S)
        raise ServerError(
            f"vllm serve was not ready after {deadline_s:.0f} s (raise --startup-timeout if the model is large). "
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def stop(self) -> None:
        """SIGTERM to the whole group, then SIGKILL for whatever is still there after the grace period."""
        if self.process is None:
            return
        process, self.process = self.process, None
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def parse_metrics(text: str, names: Sequence[str] | None = None) -> dict[str, float]:
    """Sums each named (or every) Prometheus sample over its label sets (one per model, API server or engine)."""
    totals: dict[str, float] = {}
    wanted = set(names) if names is not None else None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        if wanted is None or name in wanted:
            try:
                totals[name] = totals.get(name, 0.0) + float(value)
            except ValueError:
                continue
    return totals


def kv_capacity(text: str, max_model_len: int) -> int | None:
    """How many full-length sequences the engines' KV cache holds, from vllm:cache_config_info's labels.

    One engine line per data-parallel rank; None when the server does not publish its cache size.
    """
    tokens = 0
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            with contextlib.suppress(KeyError, ValueError):
                tokens += int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    return tokens // max_model_len if tokens else None
