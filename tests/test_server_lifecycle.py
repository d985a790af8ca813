"""A spawned server's life is tied to its run, on the real CPU engine: a killed driver, SIGHUP, a hung engine.

Each test runs a recipe that spawns its own `vllm serve` of the tiny model on a free port (about a minute of both
cores each), so there are only a few. The times they print are the figures SERVING.md quotes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import datasets
import httpx
import pytest

from ocr_core.serving.stall import PROGRESS_COUNTERS
from tests.testbed.env import REPO_ROOT, script_command
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.server import free_port

SAMPLES = REPO_ROOT / "samples" / "dataset"
GONE_WITHIN_S = 15.0
# Runs long enough to be interrupted on a loaded machine: 96 pages of 300 tokens, about 25 s at 4 pages/s, where each
# test signals or hangs the run within a second or two of the engine's first running request (Recipe.wait_for_work).
PAGE_COPIES = 8
# Hang detection on seconds, not the default minutes: the rule is the same at any bound, and with 4 pages in flight the
# CPU engine moves its counters several times a second even with both cores busy.
STALL_TIMEOUT_S = 10


def pages(folder: Path, copies: int) -> Path:
    """The sample pages several times over, so that a run lasts long enough to be interrupted."""
    samples = datasets.load_dataset(str(SAMPLES), split="train")
    datasets.concatenate_datasets([samples] * copies).save_to_disk(str(folder))
    return folder


class Recipe:
    """lighton-ocr3-saturate.py spawning its own server on a free port; its stderr is kept line by line, timed."""

    def __init__(self, tmp_path: Path, model: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out = tmp_path / "out"
        args = [
            str(pages(tmp_path / "in", copies=PAGE_COPIES)), str(self.out), "--server", self.url, "--model", str(model),
            "--max-model-len", "1024", "--max-tokens", "300", "--temperature", "0", "--max-inflight", "4",
            "--ignore-eos", "--extra-serve-args=--enforce-eager", *extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            script_command("lighton-ocr3-saturate.py", *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=bed_env(),
        )
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self.read_stderr, daemon=True)
        self.reader.start()

    def read_stderr(self) -> None:
        for line in self.process.stderr:
            self.lines.append((time.monotonic(), line.rstrip()))

    def stderr(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def first_line_with(self, text: str) -> float | None:
        return next((when for when, line in self.lines if text in line), None)

    def wait_for_work(self) -> None:
        """Waits until the engine has pages in hand: decoding some now, or done with a first part's worth.

        On a loaded machine a poll can miss the moments when pages run, so a progress part on disk counts too;
        either way pages remain to do, since the run has hundreds.
        """
        progress = self.out / ".ocr-progress" / "default" / "train"
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                metrics = httpx.get(f"{self.url}/metrics", timeout=5).text
            except httpx.HTTPError:
                metrics = ""
            running = [line for line in metrics.splitlines() if line.startswith("vllm:num_requests_running")]
            if any(not line.endswith(" 0.0") for line in running) or list(progress.glob("*.parquet")):
                return
            time.sleep(0.3)
        raise AssertionError(f"the engine never got to work:\n{self.stderr()[-3000:]}")

    def finish(self, timeout: float = 600) -> tuple[int, str]:
        """Waits for the run; stdout is read here (not with communicate, which would race the stderr reader)."""
        timer = threading.Timer(timeout, self.kill)
        timer.start()
        stdout = self.process.stdout.read()
        self.process.wait()
        timer.cancel()
        self.reader.join(timeout=10)
        return self.process.returncode, stdout

    def driver(self, wait_s: float = 30) -> int:
        """The recipe's own python. `uv run` starts it as a child and waits for it (it does not exec), so the
        signals a terminal, a job runner's stop or the OOM killer give the driver go to this pid; uv then exits with
        the driver's status."""
        deadline = time.monotonic() + wait_s
        while True:
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == self.process.pid:
                    return int(stat.parent.name)
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        raise AssertionError(f"no driver process under uv ({self.process.pid})")

    def kill_driver(self) -> None:
        """kill -9 of the driver itself (uv cannot pass SIGKILL on, so killing uv would only orphan it)."""
        os.kill(self.driver(), signal.SIGKILL)
        self.process.wait(timeout=60)

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, AssertionError):
                os.kill(self.driver(wait_s=0), signal.SIGKILL)
            self.process.kill()
            self.process.wait()


def server_group(port: int) -> int:
    """The process group of the `vllm serve` listening on `port`."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and b"--port" in argv and str(port).encode() in argv:
            return os.getpgid(int(proc.name))
    raise AssertionError(f"no vllm serve on port {port}")


def group_members(pgid: int) -> list[int]:
    """Running (not zombie) processes of one process group."""
    members = []
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
        except (OSError, ValueError):
            continue
        if proc.name.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(proc.name))
    return members


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def seconds_until_gone(group: int, port: int, limit: float = GONE_WITHIN_S) -> float:
    """How long the server's processes and port took to disappear (polled; `limit` when they did not)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if not group_members(group) and not port_open(port):
            return time.monotonic() - started
        time.sleep(0.1)
    return limit


def leftover(group: int) -> None:
    if group_members(group):
        os.killpg(group, signal.SIGKILL)


def test_killing_the_driver_takes_its_server_along(tiny_model, tmp_path):
    recipe = Recipe(tmp_path, tiny_model)
    group = None
    try:
        recipe.wait_for_work()
        group = server_group(recipe.port)
        recipe.kill_driver()
        gone = seconds_until_gone(group, recipe.port)
        print(f"spawned server gone {gone:.1f} s after kill -9 of its driver")
        assert gone < GONE_WITHIN_S, f"still there {GONE_WITHIN_S:.0f} s after the driver died: {group_members(group)}"
    finally:
        recipe.kill()
        if group is not None:
            leftover(group)


@pytest.mark.heavy
def test_sighup_stops_the_run_like_sigterm(tiny_model, tmp_path):
    recipe = Recipe(tmp_path, tiny_model)
    group = None
    try:
        recipe.wait_for_work()
        group = server_group(recipe.port)
        os.kill(recipe.driver(), signal.SIGHUP)
        sent = time.monotonic()
        code, stdout = recipe.finish(timeout=120)
        print(f"run stopped {time.monotonic() - sent:.1f} s after SIGHUP, its server with it")
        assert code == 129, recipe.stderr()[-3000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["interrupted"] is True and summary["rows"] == 12 * PAGE_COPIES
        assert "stopped by SIGHUP" in recipe.stderr()
        assert group_members(group) == [] and not port_open(recipe.port)
    finally:
        recipe.kill()
        if group is not None:
            leftover(group)


def engine_core(group: int) -> int:
    for pid in group_members(group):
        if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    raise AssertionError(f"no engine core process in group {group}")


@pytest.mark.heavy
def test_hung_engine_is_restarted_and_the_run_completes(tiny_model, tmp_path):
    recipe = Recipe(tmp_path, tiny_model, "--stall-timeout", str(STALL_TIMEOUT_S))
    group = None
    try:
        recipe.wait_for_work()
        metrics = httpx.get(f"{recipe.url}/metrics", timeout=30).text
        assert all(name in metrics for name in PROGRESS_COUNTERS), "vLLM renamed its progress counters"
        group = server_group(recipe.port)
        core = engine_core(group)
        os.kill(core, signal.SIGSTOP)
        hung = time.monotonic()
        assert httpx.get(f"{recipe.url}/health", timeout=10).status_code == 200, "a hung engine answers /health"
        code, stdout = recipe.finish()
        assert code == 0, recipe.stderr()[-3000:]
        noticed = recipe.first_line_with("made no progress")
        assert noticed is not None and "restarting it (1/3)" in recipe.stderr()
        ready = recipe.first_line_with("server is ready again")
        print(
            f"hung engine noticed after {noticed - hung:.1f} s (--stall-timeout {STALL_TIMEOUT_S}), "
            f"ready in {ready - hung:.1f} s"
        )
        assert core not in group_members(group)
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert (summary["rows"], summary["missing"]) == (12 * PAGE_COPIES, 0)
    finally:
        recipe.kill()
        if group is not None:
            leftover(group)
