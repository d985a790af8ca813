"""The whole machine's CPU over an arm, from /proc/stat and the cgroup's cpu.stat: what the processes' own CPU
seconds (procs.py) and their threads' waits (runqueue.py) cannot say. Serving threads that wait to run while the
processes' own count shows idle vCPUs point at time the processes are not charged for (interrupts, the kernel's
network work for loopback HTTP), at a hypervisor that takes its vCPUs back (steal), or at a CPU quota (throttling);
these figures tell which.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from procs import read

HZ = os.sysconf("SC_CLK_TCK")
# /proc/stat's first line, after its "cpu" label, in this order (proc(5)).
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
BUSY = ("user", "nice", "system", "irq", "softirq")
CGROUP = "/sys/fs/cgroup"


def proc_stat(text: str | None) -> tuple[int, ...] | None:
    """The machine's jiffies in each of FIELDS since boot."""
    first = (text or "").split("\n", 1)[0].split()
    return tuple(int(value) for value in first[1 : 1 + len(FIELDS)]) if first[:1] == ["cpu"] else None


def throttling(text: str | None) -> tuple[int, int] | None:
    """(periods throttled, µs throttled) from a cgroup v2 cpu.stat, or None where there is none."""
    pairs = dict(line.split()[:2] for line in (text or "").splitlines() if len(line.split()) >= 2)
    if "nr_throttled" not in pairs or "throttled_usec" not in pairs:
        return None
    return int(pairs["nr_throttled"]), int(pairs["throttled_usec"])


def quota(text: str | None) -> float | None:
    """The cgroup's CPU quota in cores (cpu.max: QUOTA PERIOD), None where it has none ("max") or no file."""
    words = (text or "").split()
    return round(int(words[0]) / int(words[1]), 2) if len(words) == 2 and words[0] != "max" else None


@dataclass
class MachineSampler:
    """/proc/stat and the cgroup's cpu.stat, stamped with each sample's time."""

    root: str = "/"
    series: list[list] = field(default_factory=list)

    def sample(self, now: float) -> None:
        jiffies = proc_stat(read(os.path.join(self.root, "proc/stat")))
        if jiffies is None:
            return
        throttled = throttling(read(os.path.join(self.root, CGROUP.lstrip("/"), "cpu.stat"))) or (None, None)
        self.series.append([round(now, 2), *jiffies, *throttled])

    def record(self) -> dict:
        cpu_max = quota(read(os.path.join(self.root, CGROUP.lstrip("/"), "cpu.max")))
        return {"vcpus": os.cpu_count(), "quota_cores": cpu_max, "series": self.series}


def machine_report(record: dict, interval: list[float] | None) -> dict:
    """Over the interval: the machine's busy, idle, iowait and stolen vCPUs (as cores), and the seconds its cgroup
    was throttled, beside its vCPU count and quota."""
    inside = [row for row in record.get("series", []) if interval and interval[0] <= row[0] <= interval[1]]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return {}
    span = inside[-1][0] - inside[0][0]
    delta = dict(zip(FIELDS, (b - a for a, b in zip(inside[0][1:9], inside[-1][1:9], strict=True)), strict=True))
    cores = {name: round(delta[name] / HZ / span, 2) for name in FIELDS}
    report = {
        "vcpus": record.get("vcpus"),
        "quota_cores": record.get("quota_cores"),
        "busy_cores": round(sum(delta[name] for name in BUSY) / HZ / span, 2),
        "cores": cores,
    }
    if inside[0][9] is not None and inside[-1][9] is not None:
        report["throttled_periods"] = inside[-1][9] - inside[0][9]
        report["throttled_s"] = round((inside[-1][10] - inside[0][10]) / 1e6, 1)
    return report
