"""CPU seconds by process and thread of a `vllm serve` process group, from /proc (utime + stime), for the benches
that count a page's CPU by role: the API server(s), the engine core (and the CPU build's model runner), the rest."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int, thread: int | None = None) -> float:
    """utime + stime of one process (its threads included; exited children not) or of one of its threads, in s."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def threads_cpu(pid: int) -> dict[int, float]:
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[int(task.name)] = process_cpu(pid, int(task.name))
        except OSError:
            continue
    return found


def group_processes(pgid: int) -> dict[int, str]:
    """The server's processes by pid, each with its command line: its own process group, whose leader is `pgid`,
    and every descendant of that leader, also one started in a session of its own (`vllm-rs serve` starts vLLM's
    Python engine so)."""
    parents, groups, lines = {}, {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            pid = int(entry.name)
            parents[pid], groups[pid] = int(fields[1]), int(fields[2])
            lines[pid] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue

    def served(pid: int) -> bool:
        seen = set()
        while pid in parents and pid not in seen:
            if pid == pgid or groups[pid] == pgid:
                return True
            seen.add(pid)
            pid = parents[pid]
        return False

    return {pid: line for pid, line in lines.items() if served(pid)}


def role(pid: int, cmdline: str, leader: int, api_server_count: int) -> str:
    """vLLM titles its processes VLLM::EngineCore, VLLM::Worker (the CPU build's model runner, which a one-GPU engine
    runs inside its engine core), VLLM::APIServer_N; with one API server, the API server is the group's leader."""
    if "EngineCore" in cmdline or "VLLM::Worker" in cmdline:
        return "engine_core"
    if "APIServer" in cmdline or (pid == leader and api_server_count == 1):
        return "api_server"
    return "other"


def cpu_by_role(pgid: int, api_server_count: int) -> dict[int, tuple[str, float]]:
    snapshot = {}
    for pid, cmdline in group_processes(pgid).items():
        try:
            snapshot[pid] = (role(pid, cmdline, pgid, api_server_count), process_cpu(pid))
        except OSError:
            continue
    return snapshot


def api_servers(snapshot: dict[int, tuple[str, float]]) -> list[int]:
    return sorted(pid for pid, (name, _) in snapshot.items() if name == "api_server")


def busiest_thread(before: dict[int, dict[int, float]], after: dict[int, dict[int, float]]) -> float:
    """The most CPU one thread of an API server used: near the whole API server's figure, the work is serial."""
    return max(
        (cpu - before.get(pid, {}).get(tid, 0.0) for pid, threads in after.items() for tid, cpu in threads.items()),
        default=0.0,
    )
