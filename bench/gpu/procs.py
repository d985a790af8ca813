"""What each process of a bench arm did, for the front-end figures of issue 41 (monitor.py samples it each second).

- CPU seconds per process of the arm's tree (utime + stime from /proc/PID/stat, each sample stamped), with its name
  (/proc/PID/comm: `VLLM::APIServe` for an API server, `VLLM::EngineCor` for an engine core; a `vllm serve` that is
  its replica's only API server counts as one), summed by role: a bound named as "the front end" must show which
  process was saturated. Over the whole arm the figure mixes the start-up's imports and compiles (over half the CPU
  seconds of an H200 arm of 2026-12-02) with the serving, so the merge also cuts the samples to the sustained
  interval (`cpu_report`).
- The engines' running and waiting request counts, read from the /metrics of every `vllm serve --port N` in the
  tree, stamped the same way: an engine that runs few requests while many wait is starved by its front end.
- Requests per API server process of each replica, counted from the serve logs (`(APIServer pid=N) ... "POST
  /v1/chat/completions`): how evenly the kernel handed the connections to the processes.
"""

from __future__ import annotations

import re
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

TICKS_PER_S = 100
METRIC = re.compile(
    r"^vllm:(num_requests_running|num_requests_waiting|generation_tokens_total)\{[^}]*\}\s+([0-9.eE+-]+)", re.M
)
# The name serving_names gives a `vllm serve` process that is its replica's only API server.
SERVING_API = "APIServer (vllm serve)"
REQUEST_LINE = re.compile(r"\((?:APIServer|ApiServer_\d+) pid=(\d+)\).*\"POST /v1/chat/completions")


def read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:
        return None


def cpu_ticks(pid: int) -> int | None:
    stat = read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[11]) + int(fields[12])


def role(comm: str) -> str:
    if comm.startswith("VLLM::APIServ") or comm.startswith("APIServer"):
        return "api_server"
    if comm.startswith("VLLM::EngineCor") or comm.startswith("EngineCore"):
        return "engine_core"
    return "other"


def serving_names(comms: dict[int, str], supervisors: set[int]) -> dict[int, str]:
    """Each process's name for its role. With one API server (`--api-server-count 1`) the `vllm serve` process
    serves the API itself under its untitled name (`vllm`), and its CPU would read as "other": where no process of
    the tree is a titled API server, a server process counts as the API server (SERVING_API), unless it is in
    `supervisors`: a server once seen beside titled API servers, which only supervises them (also while they start
    and after they end)."""
    if any(role(comm) == "api_server" for comm in comms.values()):
        supervisors.update(pid for pid, comm in comms.items() if role(comm) == "other" and is_server(pid))
        return comms
    return {
        pid: SERVING_API if role(comm) == "other" and pid not in supervisors and is_server(pid) else comm
        for pid, comm in comms.items()
    }


@dataclass
class CpuSampler:
    """CPU ticks of every process seen, stamped with the time of each sample, and its name: a figure over the whole
    arm counts the start-up's imports and compiles, so the merge cuts the samples to the sustained interval."""

    series: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    clients: set[int] = field(default_factory=set)
    supervisors: set[int] = field(default_factory=set)
    served: set[int] = field(default_factory=set)

    def sample(self, pids: list[int], now: float, clients: set[int] = frozenset()) -> None:
        """One sample of `pids`; those in `clients` (the arm's command and its helpers, no server) count as the
        client, as of their latest sample: a child forked by the driver is a copy of it until it execs a server.
        A process once seen outside the client stays outside it, and keeps the role it served in: while it exits,
        a `vllm serve`'s command line reads empty and no longer says it is a server."""
        self.served |= set(pids) - set(clients)
        self.clients = (self.clients - set(pids)) | (set(clients) - self.served)
        ticks = {pid: cpu_ticks(pid) for pid in pids}
        comms = {pid: (read(f"/proc/{pid}/comm") or "?").strip() for pid in pids if ticks[pid] is not None}
        for pid, name in serving_names(comms, self.supervisors).items():
            self.series.setdefault(pid, []).append((now, ticks[pid]))
            if role(name) != "other" or role(self.names.get(pid, "?")) == "other":
                self.names[pid] = name

    def report(self, seconds: float) -> dict:
        """CPU seconds per process (the busiest first), per role, and the cores used on average over `seconds`."""
        return cpu_report(self.record(), None, seconds)

    def record(self) -> dict:
        """The samples as JSON: what `cpu_report` reads back at merge time."""
        return {
            "names": {str(pid): name for pid, name in self.names.items()},
            "clients": sorted(pid for pid in self.clients if pid in self.names),
            "series": {str(pid): [[round(t, 2), ticks] for t, ticks in rows] for pid, rows in self.series.items()},
        }

    def busiest(self, wanted_role: str, seconds: float) -> int | None:
        """The process of a role that used the most CPU over the last `seconds` (py-spy's target)."""
        used = {}
        for pid, rows in self.series.items():
            if role(self.names.get(pid, "?")) != wanted_role:
                continue
            recent = [ticks for t, ticks in rows if t >= rows[-1][0] - seconds]
            used[pid] = recent[-1] - recent[0]
        return max(used, key=used.get) if used else None


def cpu_report(record: dict, interval: list[float] | None, seconds: float) -> dict:
    """CPU seconds per process and role from a CpuSampler record: between the first and last sample of each process,
    or only those stamped inside `interval` (Unix seconds), with cores as CPU seconds over `seconds`."""
    used = {}
    for pid, rows in record["series"].items():
        inside = [ticks for t, ticks in rows if interval is None or interval[0] <= t <= interval[1]]
        if len(inside) >= 2:
            used[pid] = (inside[-1] - inside[0]) / TICKS_PER_S
    by_role: Counter[str] = Counter()
    clients = {str(pid) for pid in record.get("clients", ())}
    for pid, cpu_s in used.items():
        by_role["client" if pid in clients else role(record["names"][pid])] += cpu_s
    busiest = sorted(used, key=used.get, reverse=True)[:24]
    return {
        "cpu_s_by_role": {name: round(value, 1) for name, value in by_role.items()},
        "cores_by_role": {name: round(value / seconds, 2) for name, value in by_role.items()} if seconds else {},
        "cores_total": round(sum(used.values()) / seconds, 2) if seconds else None,
        "cpu_s_per_process": [
            {
                "pid": int(pid),
                "name": record["names"][pid],
                "cpu_s": round(used[pid], 1),
                **({"cores": round(used[pid] / seconds, 2)} if seconds else {}),
            }
            for pid in busiest
        ],
    }


def is_server(pid: int) -> bool:
    """Whether the process is a `vllm serve` (the real one or the fake) itself: `serve` right after the program or
    its interpreter's script, not a driver's `--serve vllm serve ...` arguments."""
    argv = (read(f"/proc/{pid}/cmdline") or "").split("\0")
    return any(
        argv[i] == "serve" and Path(argv[i - 1]).name in ("vllm", "fake_vllm.py") for i in (1, 2) if i < len(argv)
    )


def parent(pid: int) -> int | None:
    stat = read(f"/proc/{pid}/stat")
    return int(stat.rsplit(")", 1)[-1].split()[1]) if stat else None


def client_pids(pids: list[int]) -> set[int]:
    """The processes of the arm's own command tree with no `vllm serve` among themselves and their ancestors: the
    recipe (or driver) and its helpers, not the servers it started."""
    parents = {pid: parent(pid) for pid in pids}
    servers = {pid for pid in pids if is_server(pid)}

    def served(pid: int | None) -> bool:
        seen = set()
        while pid in parents and pid not in seen:
            if pid in servers:
                return True
            seen.add(pid)
            pid = parents[pid]
        return False

    return {pid for pid in pids if not served(pid)}


def serve_ports(pids: list[int]) -> set[int]:
    """The --port of every `vllm serve` among the processes."""
    ports = set()
    for pid in pids:
        argv = (read(f"/proc/{pid}/cmdline") or "").split("\0")
        if "serve" in argv and "--port" in argv:
            index = argv.index("--port") + 1
            if index < len(argv) and argv[index].isdigit():
                ports.add(int(argv[index]))
    return ports


def engine_counts(port: int) -> tuple[float, float, float] | None:
    """(running, waiting, output tokens so far) of the engine behind a port, summed over its engines; None if it did
    not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode(errors="replace")
    except OSError:
        return None
    counts = {"num_requests_running": 0.0, "num_requests_waiting": 0.0, "generation_tokens_total": 0.0}
    for name, value in METRIC.findall(text):
        counts[name] += float(value)
    return counts["num_requests_running"], counts["num_requests_waiting"], counts["generation_tokens_total"]


@dataclass
class QueueSampler:
    """Running and waiting counts and output tokens so far of each engine, stamped with the time of each sample."""

    samples: dict[int, list[tuple[float, float, float, float]]] = field(default_factory=dict)

    def sample(self, ports: set[int], now: float) -> None:
        for port in ports:
            counts = engine_counts(port)
            if counts is not None:
                self.samples.setdefault(port, []).append((round(now, 2), *counts))

    def busy(self) -> bool:
        """Whether any engine ran a request at its last sample."""
        return any(rows[-1][1] > 0 for rows in self.samples.values())

    def record(self) -> dict:
        return {str(port): rows for port, rows in self.samples.items()}


def queue_report(record: dict, interval: list[float] | None = None) -> dict:
    """Per engine, the mean running and waiting: over the samples in which it had any request, or over every
    sample inside `interval` (Unix seconds). Inside an interval, also the output tokens the engine made per second
    (its counter's rise from the first sample to the last): the work done in the interval, pages in flight at both
    ends included, where a page count leaves them out."""
    out = {}
    for port, rows in record.items():
        if interval is None:
            chosen = [row for row in rows if row[1] or row[2]]
        else:
            chosen = [row for row in rows if interval[0] <= row[0] <= interval[1]]
        if chosen:
            out[port] = {
                "running_mean": round(sum(row[1] for row in chosen) / len(chosen), 1),
                "waiting_mean": round(sum(row[2] for row in chosen) / len(chosen), 1),
                "samples": len(chosen),
            }
            rise = token_rate(chosen) if interval is not None else None
            if rise is not None:
                out[port]["output_tokens_per_s"] = rise
    return out


def token_rate(rows: list) -> float | None:
    """Output tokens per second between the first and last of `rows`, where they carry the counter (a fourth
    column; records written before it have three)."""
    if len(rows) < 2 or len(rows[0]) < 4 or rows[-1][0] <= rows[0][0]:
        return None
    return round((rows[-1][3] - rows[0][3]) / (rows[-1][0] - rows[0][0]), 1)


def requests_per_api_server(logs: list[Path]) -> dict[str, list[int]]:
    """Per serve log, the requests each API server process answered, the most first."""
    out = {}
    for log in logs:
        text = read(str(log)) or ""
        counts = Counter(REQUEST_LINE.findall(text))
        if counts:
            out[log.name] = sorted(counts.values(), reverse=True)
    return out
