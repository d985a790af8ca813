"""The CPU cores a job may really use: its affinity mask, cut by the CPU quotas of its cgroup and its ancestors.

A container sees every core of its host in /proc/cpuinfo and, often, in its affinity mask too, while its cgroup
limits it to a share of them (`cpu.max` under cgroup v2, `cpu.cfs_quota_us` / `cpu.cfs_period_us` under v1). A
plan sized from the host's count would start more API servers and renderer threads than the job can run, and the
engine cores would starve. The job's cgroup may be nested below the root of the hierarchy (a runner's child cgroup
per job, a systemd slice in a slice), and a quota anywhere on the path from it up to the root binds it; the process
names its own cgroup in /proc/self/cgroup. So the plan counts the smaller of the affinity and the smallest quota on
that path, rounded down, at least one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


def job_cpus(cgroup_root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> int:
    """Cores this process may run on at once: its affinity, and its cgroups' quota where one is set."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_quota(cgroup_root, self_cgroup)
    return max(1, min(affinity, math.floor(quota))) if quota is not None else max(1, affinity)


def cgroup_quota(root: Path, self_cgroup: Path = SELF_CGROUP) -> float | None:
    """The smallest quota in cores on the path from the process's own cgroup up to `root` (cgroup v2's cpu.max
    where the hierarchy has one, else v1's cfs files under the cpu controller); None where none is set or readable."""
    v2_path, v1_path, v1_controllers = own_cgroups(read_text(self_cgroup) or "")
    v2 = [text for folder in lineage(root, v2_path) if (text := read_text(folder / "cpu.max")) is not None]
    if v2:
        return smallest(quota_v2(text) for text in v2)
    bases = [root / "cpu", *([root / v1_controllers] if v1_controllers else []), root]
    quotas = []
    for base in dict.fromkeys(bases):
        for folder in lineage(base, v1_path):
            quota, period = read_text(folder / "cpu.cfs_quota_us"), read_text(folder / "cpu.cfs_period_us")
            if quota is not None and period is not None:
                quotas.append(quota_v1(quota, period))
    return smallest(quotas)


def own_cgroups(text: str) -> tuple[str, str, str]:
    """From /proc/self/cgroup: the v2 path (the `0::/path` line), the v1 cpu controller's path and its controller
    list as mounted (`cpu,cpuacct`); "/" and "" where a line is missing."""
    v2_path, v1_path, v1_controllers = "/", "/", ""
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "" and path:
            v2_path = path
        elif "cpu" in controllers.split(",") and path:
            v1_path, v1_controllers = path, controllers
    return v2_path, v1_path, v1_controllers


def lineage(base: Path, path: str) -> list[Path]:
    """The folders from `base`/`path` up to `base`; those that do not exist read as no quota."""
    parts = [part for part in PurePosixPath(path).parts if part not in ("/", ".", "..")]
    return [base.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def smallest(quotas: Iterable[float | None]) -> float | None:
    return min((quota for quota in quotas if quota is not None), default=None)


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
