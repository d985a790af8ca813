"""The memory guard against a simulated cgroup: page cache the kernel can reclaim is memory the window may use."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ocr_core.serving.hostmem import GIB, PAGE_IN_FLIGHT_BYTES, MemoryGuard, available_memory, cgroup_available

LIMIT = 32 * GIB
DRIVER = 4 * GIB
ACTIVE_CACHE = 2 * GIB
CACHE_READ = 64 * GIB
V2 = ("memory.max", "memory.current", "memory.stat", "inactive_file")
V1 = ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file")


class SimulatedCgroup:
    """A job's cgroup: the driver, the pages in flight, and the dataset and weight files in the page cache.

    The files read so far exceed the limit, so the kernel keeps the cache filled up to it and reclaims the inactive
    part when anonymous memory needs room: `memory.current` sits at the limit all run long.
    """

    def __init__(self, root: Path, layout: tuple[str, str, str, str]) -> None:
        self.root = root
        self.limit_file, self.usage_file, self.stat_file, self.reclaimable = layout
        (root / self.limit_file).parent.mkdir(parents=True, exist_ok=True)
        (root / self.limit_file).write_text(f"{LIMIT}\n")

    def settle(self, in_flight: int) -> None:
        anonymous = DRIVER + in_flight * PAGE_IN_FLIGHT_BYTES
        cache = max(0, min(CACHE_READ, LIMIT - anonymous))
        inactive = max(0, cache - ACTIVE_CACHE)
        (self.root / self.usage_file).write_text(f"{anonymous + cache}\n")
        (self.root / self.stat_file).write_text(
            f"anon {anonymous}\nfile {cache}\ninactive_anon 0\nactive_file {cache - inactive}\n"
            f"inactive_file {inactive if self.reclaimable == 'inactive_file' else 0}\n"
            f"total_inactive_file {inactive}\n"
        )


@pytest.mark.parametrize("layout", [V2, V1], ids=["cgroup-v2", "cgroup-v1"])
def test_page_cache_does_not_ratchet_the_window_down(tmp_path, layout):
    """300 one-second ticks of an adaptive run whose pages come back a few at a time between readings."""
    cgroup = SimulatedCgroup(tmp_path / "cgroup", layout)
    host = tmp_path / "meminfo"
    host.write_text("MemTotal: 1056000000 kB\nMemAvailable: 1000000000 kB\n")
    guard = MemoryGuard(512, local_server=False, reading=lambda: available_memory(str(host), tmp_path / "cgroup"))
    jitter = random.Random(3)
    in_flight = 0
    for _ in range(300):
        cgroup.settle(in_flight)
        cap, _ = guard.cap(in_flight)
        in_flight = max(0, cap - jitter.randint(0, 8))
    room = (LIMIT - DRIVER - ACTIVE_CACHE) // PAGE_IN_FLIGHT_BYTES
    assert 0.9 * room <= cap <= room


def test_reclaimable_cache_counts_as_available(tmp_path):
    cgroup = SimulatedCgroup(tmp_path, V2)
    cgroup.settle(in_flight=0)
    assert cgroup_available(tmp_path) == LIMIT - DRIVER - ACTIVE_CACHE


def test_a_cgroup_without_a_limit_leaves_the_host_reading(tmp_path):
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.current").write_text(f"{8 * GIB}\n")
    (tmp_path / "memory.stat").write_text("inactive_file 0\n")
    host = tmp_path / "meminfo"
    host.write_text("MemAvailable: 2097152 kB\n")
    assert cgroup_available(tmp_path) is None
    assert available_memory(str(host), tmp_path) == 2 * GIB


def test_no_cgroup_and_no_meminfo_is_unknown(tmp_path):
    assert available_memory(str(tmp_path / "meminfo"), tmp_path) is None
