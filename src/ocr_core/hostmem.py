"""How much host memory a run may spend on pages in flight.

On a job container the cgroup limit, not the machine's free memory, decides when the kernel kills us, so both are
read and the smaller wins.
"""

from __future__ import annotations

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


def memory_cap(
    per_page: int = PAGE_IN_FLIGHT_BYTES, available: int | None = None, share: float = MEMORY_SHARE
) -> tuple[int | None, str]:
    """Pages in flight that fit in a share of available memory, and a sentence saying why."""
    available = available_memory() if available is None else available
    if available is None:
        return None, "host memory is unknown, so only --max-inflight caps the window"
    cap = max(1, int(available * share // per_page))
    return cap, (
        f"{available / GIB:.1f} GiB available, {share:.0%} of it at {per_page / GIB:.2f} GiB per page in flight"
    )
