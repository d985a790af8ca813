"""How much host memory a run may spend on pages in flight.

On a job container the cgroup limit, not the machine's free memory, decides when the kernel kills us, so both are
read and the smaller wins.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

GIB = 1024**3
PAGE_IN_FLIGHT_BYTES = int(0.1 * GIB)
MEMORY_SHARE = 0.5
CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_available() -> int | None:
    for limit_file, usage_file in CGROUP_FILES:
        try:
            limit_text = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit_text == "max" or int(limit_text) >= 1 << 60:
            return None
        return max(0, int(limit_text) - usage)
    return None


def available_memory() -> int | None:
    readings = [value for value in (meminfo_available(), cgroup_available()) if value is not None]
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
