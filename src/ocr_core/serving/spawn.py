"""Finds or starts the vLLM server a run talks to, and stops what it started on every way out.

A recipe reuses a server whose /health answers once /v1/models shows it serves the job's model; otherwise, for a
local address, it spawns `vllm serve` with the model card's flags. The server runs under a small watchdog that
leads its process group: one kill takes the API servers and engine cores with it, and the watchdog kills the group
itself when the driver dies in a way that runs no cleanup (kill -9, the OOM killer), so no orphan keeps the GPU.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from ..console import say
from ..errors import CommandError
from ..planning.serve_flags import flag_value
from ..redaction import redact

HEALTH_POLL_S = 2.0
STARTING_NOTE_EVERY_S = 20.0
START_LOG_TAIL_BYTES = 1 << 18
# What a `vllm serve` log says as its start goes on, in the words a run shows: the phase of the last line that has a
# marker wins, and on one line the first marker listed (a specific one before the one it contains).
START_PHASES = (
    ("Initializing a V1 LLM engine", "starting the engine"),
    ("Starting to load model", "loading the model"),
    ("Loading weights took", "model loaded"),
    ("Model loading took", "model loaded"),
    ("Loading weights", "loading the model's weights"),
    ("Loading safetensors", "loading the model's weights"),
    ("Dynamo bytecode transform", "compiling the model (torch.compile)"),
    ("Compiling a graph", "compiling the model (torch.compile)"),
    ("Memory profiling", "profiling memory for the KV cache"),
    ("Available KV cache memory", "sizing the KV cache"),
    ("KV cache size", "sizing the KV cache"),
    ("Capturing CUDA graph", "capturing CUDA graphs"),
    ("Graph capturing finished", "CUDA graphs captured"),
    ("init engine", "engine ready, starting the API server"),
    ("Starting vLLM", "starting the API server"),
)
# What uvicorn logs in each API server process once it accepts connections. The API servers of one `vllm serve`
# share its port, so /health answers as soon as the first is up, and the connections a run opens then stay with that
# process for the whole run (keep-alive). On the CPU test bed (tests/pinned/test_front_end_runs.py, 2026-12-02) the
# other two of three 0.22.1 API servers came up 7 s after the first in one start, and all 10 pages of the run went to
# the first; in another start all three came up within a second. A spawned server is ready once the log shows every
# one, or API_SERVERS_GRACE_S after /health first answered (a uvicorn log level above INFO hides the line).
API_SERVER_UP = "Application startup complete."
API_SERVERS_GRACE_S = 60.0
STOP_GRACE_S = 30.0
ORPHAN_GRACE_S = 5.0
STOPPING = "the run is stopping, so vllm serve is not started or waited for"
LOG_TAIL_LINES = 40


class ServerError(CommandError, RuntimeError):
    """The server could not be found, started or kept alive; the message says what to do."""


def url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def health_status(url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0) -> int | None:
    """What /health answers, or None when nothing does (refused, timed out)."""
    try:
        return httpx.get(f"{url}/health", headers=headers, timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def healthy(url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0) -> bool:
    return health_status(url, headers, timeout) == 200


def root_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class NotAVllmRoot(ServerError):
    """Something answers at the URL, but not as the root of a vLLM OpenAI server does: no wait can fix it."""

    def __init__(self, url: str, path: str) -> None:
        root = root_url(url)
        instead = (
            f"pass --server {root} (without {url[len(root) :]})"
            if root != url
            else "pass the address vLLM listens on, such as --server http://HOST:8000"
        )
        super().__init__(
            f"{url}{path} answered 404: {url} is not the root of a vLLM server (vLLM answers /health and /v1/models "
            f"at its root). {instead}"
        )


def list_models(url: str, headers: Mapping[str, str] | None = None) -> list[dict]:
    """The entries of /v1/models: `id` (the name requests use), `root` (what was loaded), `max_model_len`."""
    response = httpx.get(f"{url}/v1/models", headers=headers, timeout=30.0)
    if response.status_code == 404:
        raise NotAVllmRoot(url, "/v1/models")
    if response.status_code in (401, 403):
        raise ServerError(
            f"{url} refused the API key ({response.status_code}); set VLLM_API_KEY (or HF_TOKEN for an HF Jobs "
            "endpoint) to a key it accepts"
        )
    response.raise_for_status()
    return [entry for entry in response.json().get("data", []) if isinstance(entry, dict) and "id" in entry]


def served_names(argv: Sequence[str]) -> list[str]:
    """The names given to `--served-model-name` in a serve command (the last use wins, as in vLLM)."""
    names = flag_value(argv, "--served-model-name")
    return names.split() if names else []


def matching_model(entries: Sequence[dict], model: str, names: Sequence[str]) -> dict | None:
    """The entry that serves `model` (by name or by what it loaded), or one served under the recipe's own name."""
    for entry in entries:
        if model in (entry["id"], entry.get("root")):
            return entry
    return next((entry for entry in entries if entry["id"] in names), None)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_phase(path: Path) -> str:
    """Where the latest start in a serve log stands (the log keeps every start, each after its `====` line, and a
    restart's log follows the whole access log of the run before it, so only its tail is read)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - START_LOG_TAIL_BYTES))
            text = log.read().decode(errors="replace")
    except OSError:
        return "no log yet"
    phase = "starting vllm serve"
    for line in text.rpartition("\n==== ")[2].splitlines():
        phase = next((said for marker, said in START_PHASES if marker in line), phase)
    return phase


def serve_command(model: str, serve_args: Sequence[str], port: int, extra: Sequence[str] = ()) -> list[str]:
    """`vllm serve` exactly as the model card gives it, bound to loopback on our port."""
    return ["vllm", "serve", model, *serve_args, *extra, "--host", "127.0.0.1", "--port", str(port)]


WATCHDOG = """
import os, select, signal, subprocess, sys

grace = float(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: None)
server = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL)
while server.poll() is None:
    readable, _, _ = select.select([0], [], [], 1.0)
    if readable and not os.read(0, 4096):
        os.killpg(0, signal.SIGTERM)
        try:
            server.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        os.killpg(0, signal.SIGKILL)
code = server.returncode
sys.exit(code if code >= 0 else 128 - code)
"""


def watched_command(argv: Sequence[str]) -> list[str]:
    """Runs `argv` under the watchdog: it leads the process group and ends it when its stdin reaches EOF.

    Its stdin is the read end of a pipe whose write end only the driver holds, so EOF means the driver is gone,
    however it died; a SIGTERM to the group (a normal stop) leaves the watchdog waiting for the server, so the
    driver still sees the server's own exit. The code runs inline so that the generated scripts stay one file.
    """
    return [sys.executable, "-c", WATCHDOG, str(ORPHAN_GRACE_S), *argv]


@dataclass
class SpawnedServer:
    """One `vllm serve` process group that this run owns; safe to stop, start and close from several threads.

    A restart runs in a worker thread that cancellation cannot stop, so `close` may come while it is stopping the
    old server, starting the new one or waiting for it: once closed, nothing starts and a wait gives up.
    """

    argv: list[str]
    url: str
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "vllm-serve.log")
    api_servers: int = 1
    process: subprocess.Popen | None = None
    lifeline: int | None = None
    launched_at: float = 0.0
    log_start: int = 0
    closed: threading.Event = field(default_factory=threading.Event)
    state: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        if shutil.which("vllm", path=self.env.get("PATH")) is None:
            raise ServerError("the `vllm` command is not on PATH")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.state:
            if self.closed.is_set():
                raise ServerError(STOPPING)
            read_end, self.lifeline = os.pipe()
            with open(self.log_path, "ab") as log:
                self.log_start = log.tell()
                self.launched_at = time.time()
                log.write(f"\n==== {redact(' '.join(self.argv))}\n".encode())
                log.flush()
                self.process = subprocess.Popen(
                    watched_command(self.argv),
                    stdin=read_end,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **self.env},
                    start_new_session=True,
                )
            os.close(read_end)

    def log_of_this_start(self) -> str:
        """What the server logged since its latest start (the log file keeps earlier starts and runs above it)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        process = self.process
        return process is not None and process.poll() is None

    def wait_ready(self, deadline_s: float) -> None:
        """Polls /health until it answers, the process exits, the server is closed, or the deadline passes; says
        every STARTING_NOTE_EVERY_S where the start stands, since a large model takes minutes and a run that says
        nothing meanwhile looks hung."""
        started = time.monotonic()
        deadline, note_at = started + deadline_s, started + STARTING_NOTE_EVERY_S
        while time.monotonic() < deadline:
            if time.monotonic() >= note_at:
                note_at += STARTING_NOTE_EVERY_S
                say(f"{self.url} still starting after {time.monotonic() - started:.0f} s: {start_phase(self.log_path)}")
            self.raise_if_gone()
            if healthy(self.url, timeout=HEALTH_POLL_S):
                self.wait_api_servers(min(deadline, time.monotonic() + API_SERVERS_GRACE_S))
                return
            self.closed.wait(HEALTH_POLL_S)
        raise ServerError(
            f"vllm serve was not ready after {deadline_s:.0f} s (raise --startup-timeout if the model is large). "
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def raise_if_gone(self) -> None:
        """A closed server gives up its start; one whose process exited says so with the log's last lines."""
        if self.closed.is_set():
            raise ServerError(STOPPING)
        if not self.alive():
            code = self.process.returncode if self.process else None
            raise ServerError(
                f"vllm serve exited with code {code} before it was ready. Last lines of {self.log_path}:\n"
                f"{log_tail(self.log_path)}"
            )

    def wait_api_servers(self, until: float) -> None:
        """Waits, to the monotonic time `until`, for the log to show every API server of --api-server-count up;
        then the run goes on with those that are, and says so. A single API server is up once /health answers."""
        expected = self.api_servers
        while expected > 1 and (up := self.log_of_this_start().count(API_SERVER_UP)) < expected:
            self.raise_if_gone()
            if time.monotonic() >= until:
                say(
                    f"{self.url} answers /health, but {up} of its {expected} API servers logged their start "
                    f"({API_SERVER_UP!r} in {self.log_path}); sending pages now"
                )
                return
            self.closed.wait(HEALTH_POLL_S / 4)

    def stop(self) -> None:
        with self.state:
            self.end_group()

    def close(self) -> None:
        """Stops the server for good: a start or a wait for readiness in another thread gives up."""
        with self.state:
            self.closed.set()
            self.end_group()

    def end_group(self) -> None:
        """SIGTERM to the whole group, then SIGKILL for whatever is still there after the grace period."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None


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
