"""Watches one bench arm, then folds what it saw into the arm's result: the library bench.py runs every arm through.

`watch` starts the arm's command, samples `nvidia-smi --query-gpu=utilization.gpu,memory.used -l 1` (each line
stamped with the time it arrived) and, every second, the resident memory of the command's whole process tree from
/proc, including the `vllm serve` a recipe starts in its own session (and the CPU and queues of servers started
before it, whose process groups `watch_pids` names; those it never ends). At the timeout it sends SIGTERM to the
command and, after a grace, SIGKILL; on every way out it then ends, by pid, any process of the tree that is still
alive (a recipe killed hard leaves its server behind, which would hold the GPU for the next arm). The largest
single process's peak is the highest VmHWM any process of the tree reported.

`merge` takes the recipe's JSON summary line (the last stdout line that parses as JSON) and adds GPU
utilisation (mean over the whole arm, over busy samples, over the inference window: the `inference_s`
seconds before the last busy sample, and `gpu_util_sustained` over the summary's sustained interval,
`sustained_unix`, the clock the samples are stamped with), `mfu_sustained` (the sustained pages/s times the
model FLOPs of a page from flops.py, over the H200's dense bf16 datasheet peak),
`billed_pages_per_s` (the summary's; for a driver without one, pages over the arm's elapsed time), each spawned
replica's start-up timeline (`startup`, the core's serving start-up log), the engine cache's use (`engine_cache`)
and the host-memory peaks. `watch` also keeps each process's CPU seconds and the engines' running and waiting
counts, and the merge counts the requests each API server process answered from the serve logs (procs.py); it gives
both again over the sustained interval alone, with CPU per page and the serving threads' scheduler figures
(sustained.py). With a `Profile`, `watch`
profiles the busiest engine core and API server once they serve, and the merge adds their summaries (pyspy.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from flops import DATASHEET_PEAK
from machine_cpu import MachineSampler
from procs import CpuSampler, QueueSampler, client_pids, queue_report, requests_per_api_server, serve_ports
from pyspy import Profiler, summarize_folder
from runqueue import SchedSampler
from sustained import sustained_figures

PAGE = os.sysconf("SC_PAGE_SIZE")


def children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def descendants(root: int) -> list[int]:
    tree = children_map()
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None once it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().decode(errors="replace").rsplit(")", 1)[-1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def hwm_bytes(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), the figure `/usr/bin/time -v` prints for one process."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def mem_used_bytes() -> int:
    info = {}
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                key, value = line.split(":", 1)
                info[key] = int(value.split()[0]) * 1024
    except OSError:
        return 0
    return info.get("MemTotal", 0) - info.get("MemAvailable", 0)


def gpu_sampler(path: Path, stop: threading.Event) -> subprocess.Popen | None:
    """nvidia-smi once a second; each line is prefixed with the time it arrived."""
    try:
        smi = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-l", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    except OSError:
        path.write_text("")
        return None

    def pump() -> None:
        with open(path, "w") as out:
            out.write("t,util,mem_mib\n")
            for line in smi.stdout:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) >= 2:
                    out.write(f"{time.time():.2f},{parts[0]},{parts[1]}\n")
                    out.flush()
                if stop.is_set():
                    break

    threading.Thread(target=pump, daemon=True).start()
    return smi


def end_leftovers(seen: dict[int, str | None], skip: set[int]) -> list[int]:
    """SIGTERM, then SIGKILL, every process of the arm's tree still alive (same pid and start time)."""
    alive = [pid for pid, started in seen.items() if pid not in skip and started and start_time(pid) == started]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(start_time(p) == seen[p] for p in alive):
            time.sleep(0.5)
        alive = [pid for pid in alive if start_time(pid) == seen[pid]]
        if not alive:
            break
    return alive


@dataclass(frozen=True)
class Profile:
    """py-spy on the busiest engine core and API server: its binary, how long after the engines first run a request
    it starts, for how many seconds it records, and the arm's extra py-spy flags (arms.PY_SPY_FLAGS)."""

    binary: str
    after_s: float = 60.0
    seconds: int = 20
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Watch:
    """Where one arm's samples go and how long it may run."""

    stats: Path
    gpu_log: Path
    timeout: float
    grace: float = 30.0
    watch_pids: tuple[int, ...] = ()
    interval: float = 1.0
    profile: Profile | None = None


def profile_folder(stats: Path) -> Path:
    return stats.with_name(stats.stem + "-pyspy")


def stop_gpu_sampler(smi: subprocess.Popen | None, stop: threading.Event) -> None:
    stop.set()
    if smi is None:
        return
    smi.terminate()
    try:
        smi.wait(timeout=5)
    except subprocess.TimeoutExpired:
        smi.kill()


def watch(cmd: Sequence[str], spec: Watch, env: Mapping[str, str], stdout: IO, stderr: IO, say=print) -> dict:
    """Runs `cmd` to its end (or its timeout) under watch; writes and returns the arm's stats."""
    stop = threading.Event()
    smi = gpu_sampler(spec.gpu_log, stop)
    baseline_used = mem_used_bytes()
    started = time.monotonic()
    wall_started = time.time()
    child = subprocess.Popen(list(cmd), env=dict(env), stdout=stdout, stderr=stderr)
    seen: dict[int, str | None] = {}
    peak_rss = peak_pss = peak_used = peak_single = 0
    timed_out = False
    term_sent_at = None
    tick = 0
    cpu, queues, sched, machine = CpuSampler(), QueueSampler(), SchedSampler(), MachineSampler()
    profile = spec.profile
    profiler = Profiler(profile.binary, profile_folder(spec.stats), profile.seconds, profile.flags) if profile else None
    busy_since = None
    try:
        while child.poll() is None:
            pids = descendants(child.pid)
            for pid in pids:
                if pid not in seen:
                    seen[pid] = start_time(pid)
            watched = pids + [pid for root in spec.watch_pids for pid in descendants(root)]
            now = time.time()
            cpu.sample(watched, now, client_pids(pids))
            sched.sample({pid: cpu.names[pid] for pid in watched if pid in cpu.names}, now)
            queues.sample(serve_ports(watched), now)
            machine.sample(now)
            busy_since = busy_since or (now if queues.busy() else None)
            if profiler and not profiler.started and busy_since and now - busy_since >= profile.after_s:
                targets = {role: cpu.busiest(role, 10) for role in ("engine_core", "api_server")}
                profiler.start({role: pid for role, pid in targets.items() if pid is not None})
            peak_rss = max(peak_rss, sum(rss_bytes(p) for p in pids))
            peak_single = max([peak_single, *(hwm_bytes(p) for p in pids)])
            if tick % 3 == 0:
                peak_pss = max(peak_pss, sum(pss_bytes(p) for p in pids))
            peak_used = max(peak_used, mem_used_bytes() - baseline_used)
            tick += 1
            elapsed = time.monotonic() - started
            if spec.timeout and elapsed > spec.timeout and term_sent_at is None:
                timed_out = True
                term_sent_at = time.monotonic()
                say(f"monitor: timeout after {elapsed:.0f} s, SIGTERM to {child.pid}")
                child.send_signal(signal.SIGTERM)
            if term_sent_at is not None and time.monotonic() - term_sent_at > spec.grace:
                child.kill()
            time.sleep(spec.interval)
    finally:
        if child.poll() is None:
            child.kill()
        rc = child.wait()
        elapsed = time.monotonic() - started
        if profiler:
            profiler.finish()
        alive_before = [p for p, t in seen.items() if p != os.getpid() and t and start_time(p) == t]
        left = end_leftovers(seen, {os.getpid()})
        stop_gpu_sampler(smi, stop)
    stats = {
        "rc": rc,
        "timed_out": timed_out,
        "elapsed_s": round(elapsed, 2),
        "started_at": round(wall_started, 2),
        "ended_at": round(wall_started + elapsed, 2),
        "host_tree_rss_peak_gib": round(peak_rss / 2**30, 2),
        "host_tree_pss_peak_gib": round(peak_pss / 2**30, 2),
        "host_used_peak_gib": round(peak_used / 2**30, 2),
        "host_max_single_rss_gib": round(peak_single / 2**30, 2),
        "processes_seen": len(seen),
        "leftovers_ended": len(alive_before) - len(left),
        "leftovers_still_alive": left,
        "processes": cpu.report(elapsed),
        "engine_queues": queue_report(queues.record()),
        "cpu_samples": cpu.record(),
        "queue_samples": queues.record(),
        "sched_samples": sched.record(),
        "machine_samples": machine.record(),
    }
    spec.stats.write_text(json.dumps(stats, indent=1) + "\n")
    return stats


def read_gpu(path: Path) -> list[tuple[float, float, float]]:
    rows = []
    try:
        lines = path.read_text().splitlines()[1:]
    except OSError:
        return rows
    for line in lines:
        try:
            t, util, mem = line.split(",")
            rows.append((float(t), float(util), float(mem)))
        except ValueError:
            continue
    return rows


def last_json_line(path: Path) -> dict | None:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def in_interval(gpu: list[tuple[float, float, float]], interval: list[float] | None) -> list[float]:
    """The utilisation samples stamped inside [start, end] (Unix seconds), or none without an interval."""
    if not interval:
        return []
    start, end = interval
    return [row[1] for row in gpu if start <= row[0] <= end]


def efficiency(summary: dict, stats: dict, gpu: list, tflop_per_page: float | None) -> dict:
    """The issue-30 figures of one arm: each over its own window (ocr_core/rates.py says which)."""
    sustained = summary.get("sustained_pages_per_s")
    pages = summary.get("done_this_run", summary.get("pages"))
    billed = summary.get("billed_pages_per_s")
    if billed is None and pages is not None and stats.get("elapsed_s"):
        billed = round(pages / stats["elapsed_s"], 3)
    mfu = round(sustained * tflop_per_page * 1e12 / DATASHEET_PEAK, 3) if sustained and tflop_per_page else None
    return {
        "pages": pages,
        "sustained_pages_per_s": sustained,
        "billed_pages_per_s": billed,
        "pages_per_s": summary.get("pages_per_s"),
        "gpu_util_sustained": mean(in_interval(gpu, summary.get("sustained_unix"))),
        "mfu_sustained": mfu,
        "startup": [replica.get("startup") for replica in summary.get("replicas") or []] or None,
        "engine_cache": summary.get("engine_cache"),
    }


def merge(
    arm: str,
    stdout: Path,
    spec: Watch,
    tflop_per_page: float | None = None,
    serve_logs: Sequence[Path] = (),
    extra: Mapping | None = None,
) -> dict:
    """The arm's result: its summary line, the watch's stats and the figures both give together."""
    summary = last_json_line(stdout)
    stats = json.loads(spec.stats.read_text()) if spec.stats.exists() else {}
    gpu = read_gpu(spec.gpu_log)
    inference_s = (summary.get("inference_s") or summary.get("seconds")) if summary else None
    busy = [row for row in gpu if row[1] > 0]
    end = busy[-1][0] if busy else None
    window = [row for row in gpu if end - float(inference_s) <= row[0] <= end] if end and inference_s else []
    result = {
        "arm": arm,
        "ok": bool(summary) and stats.get("rc") == 0 and not stats.get("timed_out"),
        "summary": summary,
        **efficiency(summary or {}, stats, gpu, tflop_per_page),
        "gpu_util_mean_inference": mean([row[1] for row in window]),
        "gpu_util_mean_busy": mean([row[1] for row in busy]),
        "gpu_util_mean_all": mean([row[1] for row in gpu]),
        "gpu_mem_used_peak_gib": round(max(row[2] for row in gpu) / 1024, 2) if gpu else None,
        "gpu_samples": len(gpu),
        "startup_and_teardown_s": round(stats["elapsed_s"] - float(inference_s), 1)
        if inference_s and "elapsed_s" in stats
        else None,
        **{key: stats.get(key) for key in stats if not key.endswith("_samples")},
        **sustained_figures(stats, summary or {}),
    }
    profiles = summarize_folder(profile_folder(spec.stats))
    if profiles:
        result["py_spy"] = profiles
    if serve_logs:
        result["requests_per_api_server"] = requests_per_api_server(list(serve_logs))
    result.update(extra or {})
    return result
