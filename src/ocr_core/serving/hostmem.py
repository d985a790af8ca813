"""How much host memory a run may spend on pages in flight.

On a job container the cgroup limit, not the machine's free memory, decides when the kernel kills us, so both are
read and the smaller wins. Both count page cache the kernel can reclaim as available (MemAvailable semantics): the
cgroup's usage includes the dataset and weight files this job has read, and counting that cache as used would hold
the window at the pages in flight and ratchet it down toward one page.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

GIB = 1024**3
PAGE_IN_FLIGHT_BYTES = int(0.1 * GIB)
MEMORY_SHARE = 0.5
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_LAYOUTS = (
    ("memory.max", "memory.current", "memory.stat", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file"),
)
NO_LIMIT = 1 << 60


def meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_available(root: Path = CGROUP_ROOT) -> int | None:
    """The limit minus what the cgroup cannot give back: usage less its inactive file cache (v2, then v1 layout)."""
    for limit_name, usage_name, stat_name, reclaimable_key in CGROUP_LAYOUTS:
        try:
            limit_text = (root / limit_name).read_text().strip()
            usage = int((root / usage_name).read_text())
            limit = NO_LIMIT if limit_text == "max" else int(limit_text)
        except (OSError, ValueError):
            continue
        if limit >= NO_LIMIT:
            return None
        return max(0, limit - usage + stat_bytes(root / stat_name, reclaimable_key))
    return None


def stat_bytes(path: Path, key: str) -> int:
    """One counter of a cgroup's memory.stat; 0 when it cannot be read, so usage alone then decides."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return 0
    return 0


def available_memory(meminfo: str = "/proc/meminfo", cgroup_root: Path = CGROUP_ROOT) -> int | None:
    """Read every second by the memory guard: a few small files, no subprocess."""
    readings = [value for value in (meminfo_available(meminfo), cgroup_available(cgroup_root)) if value is not None]
    return min(readings) if readings else None


SERVER_BYTES_PER_PIXEL = 30


class MemoryGuard:
    """Re-derives the window's cap while the run goes, from what pages in flight really cost.

    A page in flight costs its request body twice on the client (the JSON string and httpx's buffer) and, when
    the server runs on this host, its decoded pixels and the processor's float tensors there (about 30 bytes per
    pixel for Qwen-style processors). The prior of 0.1 GiB per page holds until real pages have been measured.
    """

    def __init__(self, ceiling: int, local_server: bool, reading: Callable[[], int | None] = available_memory) -> None:
        self.ceiling = ceiling
        self.local_server = local_server
        self.reading = reading
        self.page_bytes = float(PAGE_IN_FLIGHT_BYTES)
        self.measured = 0

    def observe(self, body_bytes: int, pixels: int) -> None:
        cost = 2 * body_bytes + (SERVER_BYTES_PER_PIXEL * pixels if self.local_server else 0)
        self.measured += 1
        weight = 1 / min(self.measured, 64)
        self.page_bytes = cost if self.measured == 1 else (1 - weight) * self.page_bytes + weight * cost

    def cap(self, in_flight: int) -> tuple[int, str]:
        """Pages in flight now plus what half of the memory still available would hold."""
        available = self.reading()
        if available is None:
            return self.ceiling, "host memory is unknown, so only --max-inflight caps the window"
        room = int(available * MEMORY_SHARE // max(1.0, self.page_bytes))
        cap = max(1, min(self.ceiling, in_flight + room))
        basis = "measured" if self.measured else "assumed"
        return cap, (
            f"{available / GIB:.1f} GiB available with {in_flight} page(s) in flight, {self.page_bytes / GIB:.3f} GiB "
            f"per page ({basis}), {MEMORY_SHARE:.0%} of the rest; --max-inflight {self.ceiling}"
        )
