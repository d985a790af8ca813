"""What a replicas arm (arms.py) can profile beyond py-spy: vLLM's torch profiler over a few seconds of one run
(where the engine's step time goes on the GPU and on its host thread, which py-spy alone cannot split), and each
server process's imports during the replicas' start.

A replicas arm with `torch_profile` (arms.py) starts its replicas with `--profiler-config` (a torch trace per engine,
written to a folder on the machine) and VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 (without it vLLM leaves the model
runner's phases unannotated and the trace cannot split the encoder from the forward). During the named run a
`Window` POSTs /start_profile to replica 1 `at_s` seconds after the run starts and /stop_profile `seconds` later;
after the arm `summarize` reads each trace with trace_summary.py into a small JSON and a markdown table of kernels.

With `spy_start_s` (and bench.py's --py-spy), a `StartSpy` records replica 1's start from the moment its `vllm
serve` exists, its spawned processes too, waiting threads included, and startup_spy.py says where each process's
main thread spent it. With `importtime`, every Python process of the replicas runs with PYTHONPROFILEIMPORTTIME=1 and
importtime_site/sitecustomize.py gives each its own file; `summarize_imports` reads them with importtime_summary.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from arms import ReplicasArm

ENV = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}
STOP_TIMEOUT_S = 300  # /stop_profile answers once the trace is written: tens of seconds for a busy engine
START_RATE = 50  # samples a second of a start's py-spy: a start holds a dozen processes


def prepare(arm: ReplicasArm, env: dict[str, str], traces: Path, imports: Path) -> dict[str, str]:
    """The replicas' environment with the arm's `env` and what the arm profiles added, and the folders its traces
    and import-time files land in, emptied."""
    env = dict(env) | dict(arm.env)
    for folder in (traces, imports):
        shutil.rmtree(folder, ignore_errors=True)
    if arm.torch_profile:
        traces.mkdir(parents=True)
        env |= ENV
    if arm.importtime:
        imports.mkdir(parents=True)
        env |= importtime_env(imports, env)
    return env


def serve_flags(folder: Path) -> list[str]:
    """The serve flags that let a server profile itself into `folder` (the front end left out)."""
    config = {"profiler": "torch", "torch_profiler_dir": str(folder), "torch_profiler_with_stack": False}
    return ["--profiler-config", json.dumps(config | {"ignore_frontend": True}, separators=(",", ":"))]


def post(url: str, timeout: float) -> int | str:
    """The HTTP status of an empty POST, or the error that stopped it."""
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status
    except OSError as exc:
        return str(exc)


class Window(threading.Thread):
    """/start_profile at `at_s` seconds, /stop_profile `seconds` later, on the server at `url`; `record` says what
    each answered and when (unix seconds), so the window can be laid over the run's sustained interval."""

    def __init__(self, url: str, at_s: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.url, self.at_s, self.seconds = url, at_s, seconds
        self.cancelled = threading.Event()
        self.record: dict = {"server": url, "at_s": at_s, "seconds": seconds}

    def run(self) -> None:
        if self.cancelled.wait(self.at_s):
            self.record["skipped"] = "the run ended first"
            return
        self.record["start_unix"] = round(time.time(), 2)
        self.record["start_profile"] = post(f"{self.url}/start_profile", 60)
        self.cancelled.wait(self.seconds)  # a run that ends early still stops the profiler
        self.record["stop_unix"] = round(time.time(), 2)
        self.record["stop_profile"] = post(f"{self.url}/stop_profile", STOP_TIMEOUT_S)

    def finish(self) -> dict:
        """Ends the window (at once if it has not begun), waits for /stop_profile, and returns its record."""
        self.cancelled.set()
        self.join(STOP_TIMEOUT_S + 60)
        return self.record


class StartSpy:
    """`py-spy record --subprocesses --idle` of a starting server for `seconds`, into `stacks`."""

    def __init__(self, binary: str, seconds: int, stacks: Path) -> None:
        self.binary, self.seconds, self.stacks = binary, seconds, stacks
        self.process: subprocess.Popen | None = None

    def start(self, pid: int) -> None:
        command = [self.binary, "record", "--pid", str(pid), "--subprocesses", "--idle", "--threads", "--nonblocking"]
        command += ["--rate", str(START_RATE), "--duration", str(self.seconds), "--format", "raw"]
        with open(self.stacks.with_suffix(".log"), "w") as log:
            self.process = subprocess.Popen([*command, "-o", str(self.stacks)], stdout=log, stderr=subprocess.STDOUT)

    def finish(self, python: str) -> dict:
        """Waits for py-spy to end, then startup_spy.py's reading of the stacks (or why there is none)."""
        if self.process is None:
            return {"error": "the replica never started"}
        try:
            self.process.wait(timeout=self.seconds + 30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        if not self.stacks.exists():
            return {"error": f"py-spy wrote no stacks; see {self.stacks.with_suffix('.log').name} in the logs"}
        script = str(Path(__file__).with_name("startup_spy.py"))
        done = subprocess.run([python, script, str(self.stacks), "--rate", str(START_RATE)], capture_output=True)
        return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.decode()[-2000:]}


def importtime_env(folder: Path, env: dict[str, str]) -> dict[str, str]:
    """What the replicas run in for each process to write its own import-time file into `folder`."""
    site = str(Path(__file__).with_name("importtime_site"))
    path = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
    return {"PYTHONPROFILEIMPORTTIME": "1", "IMPORTTIME_DIR": str(folder), "PYTHONPATH": path}


def summarize_imports(folder: Path, python: str) -> dict:
    """importtime_summary.py over each process's file in `folder`, keyed by file; the error when it failed."""
    files = sorted(str(path) for path in folder.glob("*.txt"))
    if not files:
        return {}
    script = str(Path(__file__).with_name("importtime_summary.py"))
    done = subprocess.run([python, script, *files], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip()[-2000:]}


def summarize_traces(folder: Path, logs: Path, name: str, python: str) -> list[dict]:
    """trace_summary.py over each trace in `folder`: its summary (also NAME-trace-N.json beside the top-kernels
    table NAME-trace-N.md in `logs`), or the error it printed."""
    found = []
    for index, trace in enumerate(sorted(folder.glob("*.json*")), 1):
        table = logs / f"{name}-trace-{index}.md"
        script = str(Path(__file__).with_name("trace_summary.py"))
        done = subprocess.run([python, script, str(trace), "--table", str(table)], capture_output=True, text=True)
        summary = {"trace": trace.name, "mb": round(trace.stat().st_size / 2**20, 1)}
        if done.returncode == 0:
            summary |= json.loads(done.stdout)
            (logs / f"{name}-trace-{index}.json").write_text(done.stdout)
        else:
            summary["error"] = done.stderr.strip()[-2000:]
        found.append(summary)
    for averages in folder.glob("profiler_out_*.txt"):  # the profiler's own key averages, small
        (logs / f"{name}-{averages.name}").write_bytes(averages.read_bytes())
    return found
