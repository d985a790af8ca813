"""Scheduler accounting of the serving processes, from /proc/PID/task/TID/schedstat: how long each thread ran on a
CPU and how long it was runnable but waiting for one. A process that is busy because it has work differs from one
that waits for a core: the first binds on its own code, the second on the machine's CPUs, and CPU seconds alone
(procs.py) cannot tell them apart.

Each second the monitor reads, for every API server and engine core of the arm, its main thread (the engine core's
step loop, the API server's event loop) and the sum over all its threads (the API server's renderer threads among
them); `sched_report` gives both over the sustained interval.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from procs import read, role

NS = 1e9
ROLES = ("engine_core", "api_server")


def schedstat(path: str) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable and waiting) of one thread, or None once it is gone."""
    fields = (read(path) or "").split()
    return (int(fields[0]), int(fields[1])) if len(fields) >= 2 else None


def all_threads(pid: int) -> tuple[int, int] | None:
    """The sum over every thread the process has now (a thread that ended takes its share with it)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found = [schedstat(f"/proc/{pid}/task/{tid}/schedstat") for tid in tids]
    found = [pair for pair in found if pair]
    return (sum(pair[0] for pair in found), sum(pair[1] for pair in found)) if found else None


@dataclass
class SchedSampler:
    """The main thread's and all threads' schedstat of each serving process, stamped with each sample's time."""

    series: dict[int, dict[str, list]] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)

    def sample(self, names: dict[int, str], now: float) -> None:
        for pid, name in names.items():
            if role(name) not in ROLES:
                continue
            main, total = schedstat(f"/proc/{pid}/task/{pid}/schedstat"), all_threads(pid)
            if main is None or total is None:
                continue
            rows = self.series.setdefault(pid, {"main": [], "all": []})
            rows["main"].append([round(now, 2), *main])
            rows["all"].append([round(now, 2), *total])
            self.names[pid] = name

    def record(self) -> dict:
        return {"names": {str(pid): name for pid, name in self.names.items()}, "series": self.series}


def shares(rows: list, interval: list[float]) -> dict | None:
    """On-CPU and waiting seconds between the first and last sample inside the interval, the waiting share of the
    time the thread(s) wanted a CPU, and both as cores (seconds over the samples' span)."""
    inside = [row for row in rows if interval[0] <= row[0] <= interval[1]]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    span = inside[-1][0] - inside[0][0]
    on, wait = (inside[-1][1] - inside[0][1]) / NS, (inside[-1][2] - inside[0][2]) / NS
    return {
        "on_cpu_s": round(on, 1),
        "waiting_s": round(wait, 1),
        "wait_share": round(wait / (on + wait), 3) if on + wait else None,
        "on_cpu_cores": round(on / span, 2),
        "waiting_cores": round(wait / span, 2),
    }


def sched_report(record: dict, interval: list[float] | None) -> list[dict]:
    """Per engine core and API server: its main thread's and all its threads' figures over the interval, engine
    cores first, each role's busiest main thread first."""
    if not interval:
        return []
    out = []
    for pid, rows in record.get("series", {}).items():
        main, total = shares(rows["main"], interval), shares(rows["all"], interval)
        if main:
            name = record["names"][str(pid)]
            out.append({"pid": int(pid), "name": name, "role": role(name), "main_thread": main, "all_threads": total})
    return sorted(out, key=lambda row: (ROLES.index(row["role"]), -row["main_thread"]["on_cpu_s"]))
