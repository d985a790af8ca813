"""`vllm serve` replicas started by hand for a bench arm: started together or one after another, each in its own
session (so one signal ends its whole group), waited for, read back from their logs, and ended.

A replicas arm starts them before its runs and hands their process groups to the monitor, so the runs' figures
count the servers' CPU and queues; the hand arm starts one the same way inside its driver (hand_driver.py --serve).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ports import FIRST_REPLICA_PORT

# What each engine's log says of its start: which phase a warm cache shortens.
START_FIGURES = {
    "profiling_warmup_s": r"Initial profiling/warmup run took ([\d.]+) s",
    "torch_compile_s": r"torch.compile took ([\d.]+) s",
    "model_loading_gib": r"Model loading took ([\d.]+) GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "init_engine_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)",
}
# The words a planned replica's argv ends with (the recipe's own address), which the bench replaces by its ports.
ADDRESS_WORDS = 4


@dataclass(frozen=True)
class Launch:
    """One replica as the bench starts it: `vllm serve` and its flags (no address), and its own variables."""

    argv: tuple[str, ...]
    env: Mapping[str, str]


@dataclass
class Fleet:
    """The replicas of one arm: their URLs, process groups, logs and how long each took to serve."""

    urls: list[str]
    groups: list[int]
    logs: list[Path]
    ready_s: dict[str, float]

    def servers(self, use: int) -> str:
        return ",".join(self.urls[:use])


@dataclass(frozen=True)
class Planned:
    """The replicas the recipe's `--plan` starts, and whether it runs them under CUDA MPS (they share a GPU)."""

    launches: list[Launch]
    mps: bool


def planned_launches(plan_command: Sequence[str], env: Mapping[str, str]) -> Planned:
    """Each replica's argv and environment from the recipe's own `--plan` (run with the core installed for the
    recipes), less the address the recipe would give it; a plan that starts nothing is a RuntimeError."""
    done = subprocess.run(list(plan_command), env=dict(env), capture_output=True, text=True, check=True)
    plan = json.loads(done.stdout)
    if not plan.get("replicas"):
        raise RuntimeError(f"the recipe's plan starts no replica: {plan.get('starts')}")
    launches = [Launch(tuple(each["argv"][:-ADDRESS_WORDS]), each["env"]) for each in plan["replicas"]]
    return Planned(launches, bool(plan.get("cuda_mps")))


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def wait_ready(urls: Sequence[str], groups: Sequence[int], seconds: float) -> dict[str, float]:
    """Seconds until each URL answered /health; a URL whose server exited or never answered is left out."""
    began = time.monotonic()
    ready: dict[str, float] = {}
    while len(ready) < len(urls) and time.monotonic() - began < seconds:
        for url in urls:
            if url not in ready and healthy(url):
                ready[url] = round(time.monotonic() - began, 1)
        if not any(alive(group) for url, group in zip(urls, groups, strict=True) if url not in ready):
            break
        time.sleep(1)
    return ready


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def start_one(command: Sequence[str], port: int, log: Path, env: Mapping[str, str]) -> int:
    with open(log, "w") as out:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process.pid


def stop(groups: Sequence[int], grace_s: float = 5.0) -> None:
    """SIGTERM to each replica's process group, then SIGKILL to what is left after the grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline and any(map(alive, groups)):
            time.sleep(0.5)
    for group in groups:  # reap the leaders this process started
        with contextlib.suppress(ChildProcessError):
            os.waitpid(group, os.WNOHANG)


@contextmanager
def replicas(
    launches: Sequence[Launch],
    one_by_one: bool,
    logs: Path,
    env: Mapping[str, str],
    ready_s: float = 420,
    first_port: int = FIRST_REPLICA_PORT,
    on_first: Callable[[int], None] | None = None,
) -> Iterator[Fleet]:
    """One replica per launch on ports from `first_port` (each with `env` under its own variables), ended on the
    way out however the block ends; `on_first` gets the first replica's pid as soon as it is started (to profile
    its start)."""
    fleet = Fleet([], [], [], {})
    taken = [port for port in range(first_port, first_port + len(launches)) if healthy(f"http://127.0.0.1:{port}")]
    if taken:
        raise RuntimeError(f"port {taken[0]} already answers /health: end the server there (another bench run, or a "
                           "replica that outlived its arm) before this arm starts its own")  # fmt: skip
    try:
        for index, launch in enumerate(launches):
            port = first_port + index
            fleet.logs.append(logs / f"serve-{port}.log")
            fleet.groups.append(start_one(launch.argv, port, fleet.logs[-1], {**env, **launch.env}))
            if index == 0 and on_first:
                on_first(fleet.groups[0])
            fleet.urls.append(f"http://127.0.0.1:{port}")
            if one_by_one:
                fleet.ready_s |= wait_ready(fleet.urls[-1:], fleet.groups[-1:], ready_s)
                if fleet.urls[-1] not in fleet.ready_s:
                    raise RuntimeError(f"replica on {port} never became healthy; see {fleet.logs[-1]}")
        if not one_by_one:
            fleet.ready_s = wait_ready(fleet.urls, fleet.groups, ready_s)
        yield fleet
    finally:
        stop(fleet.groups)


def engine_starts(logs: Sequence[Path]) -> list[dict]:
    """Per replica log, the start figures its engine printed (START_FIGURES)."""
    starts = []
    for path in logs:
        text = path.read_text(errors="replace") if path.exists() else ""
        figures = {
            key: [float(found.replace(",", "")) for found in re.findall(pattern, text)]
            for key, pattern in START_FIGURES.items()
        }
        starts.append({"log": path.name, **figures})
    return starts


@contextmanager
def mps_daemon(work: Path, env: dict[str, str], say) -> Iterator[None]:
    """A CUDA MPS control daemon for the block, its pipe and log folders in `env` for the replicas."""
    control = shutil.which("nvidia-cuda-mps-control") or "/usr/local/nvidia/bin/nvidia-cuda-mps-control"
    pipes = {"CUDA_MPS_PIPE_DIRECTORY": work / "mps-pipe", "CUDA_MPS_LOG_DIRECTORY": work / "mps-log"}
    for folder in pipes.values():
        folder.mkdir(parents=True, exist_ok=True)
    env.update({key: str(value) for key, value in pipes.items()})
    started = subprocess.run([control, "-d"], env=env, check=False).returncode == 0 if Path(control).exists() else False
    say("MPS daemon started" if started else "MPS daemon did not start")
    try:
        yield
    finally:
        if started:
            subprocess.run([control], input="quit\n", text=True, env=env, check=False)
        for key in pipes:
            env.pop(key, None)
