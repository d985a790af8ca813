"""The CPU cores a job may really use: its affinity mask, cut by its cgroup's CPU quota.

A container sees every core of its host in /proc/cpuinfo and, often, in its affinity mask too, while its cgroup
limits it to a share of them (`cpu.max` under cgroup v2, `cpu.cfs_quota_us` / `cpu.cfs_period_us` under v1). A
plan sized from the host's count would start more API servers and renderer threads than the job can run, and the
engine cores would starve. So the plan counts the smaller of the two, rounded down, at least one.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def job_cpus(cgroup_root: Path = CGROUP_ROOT) -> int:
    """Cores this process may run on at once: its affinity, and its cgroup's quota where one is set."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_quota(cgroup_root)
    return max(1, min(affinity, math.floor(quota))) if quota is not None else max(1, affinity)


def cgroup_quota(root: Path) -> float | None:
    """The quota in cores (cgroup v2's cpu.max, else v1's cfs files); None where none is set or readable."""
    v2 = read_text(root / "cpu.max")
    if v2 is not None:
        return quota_v2(v2)
    quota = read_text(root / "cpu" / "cpu.cfs_quota_us") or read_text(root / "cpu.cfs_quota_us")
    period = read_text(root / "cpu" / "cpu.cfs_period_us") or read_text(root / "cpu.cfs_period_us")
    return quota_v1(quota, period) if quota is not None and period is not None else None


def quota_v2(text: str) -> float | None:
    """`max 100000` (no limit) or `QUOTA PERIOD`, both in microseconds."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    return as_quota(parts[0], parts[1])


def quota_v1(quota: str, period: str) -> float | None:
    """cfs_quota_us is -1 where no limit is set."""
    return as_quota(quota.strip(), period.strip())


def as_quota(quota: str, period: str) -> float | None:
    try:
        cores = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None
    return cores if cores > 0 else None


def read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
