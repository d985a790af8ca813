"""Each engine core's step loop on a CPU of its own, for the A/B that tells whether the engine cores wait for a CPU.

A replicas arm's run with `pin = true` runs with every engine core's main thread (its step loop) alone on one CPU
and every other thread of the fleet, the engine cores' own helper threads and the recipe's client included, on the
CPUs left. If the step loops' waits for a CPU (runqueue.py) bind the fleet, the pinned run is faster; if the rest
of the fleet, squeezed onto fewer CPUs, binds, it is slower.

The engine CPUs are taken from the top of the machine's list, each on a physical core no other engine CPU shares
where the topology allows; a hyperthread sibling of an engine CPU stays with the rest, and the result names it.
Threads the serving processes start later inherit their creator's CPUs, so the layout is applied again every few
seconds while the run lasts. Afterwards every thread gets every CPU back.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from monitor import descendants
from procs import read, role

REAPPLY_S = 5.0


@dataclass(frozen=True)
class Layout:
    """Which CPU each engine core's main thread has alone, and the CPUs of every other thread."""

    engines: dict[int, int]
    rest: tuple[int, ...]
    siblings: dict[int, list[int]]

    def record(self) -> dict:
        return {
            "engine_cpus": {str(pid): cpu for pid, cpu in self.engines.items()},
            "rest": list(self.rest),
            "siblings_of_engine_cpus": {str(cpu): cpus for cpu, cpus in self.siblings.items()},
        }


def siblings_of(cpu: int) -> frozenset[int]:
    """The CPUs sharing `cpu`'s physical core (itself included), from sysfs; just itself where it says nothing."""
    text = (read(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") or "").strip()
    found: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return frozenset(found or {cpu})


def choose(cpus: Sequence[int], siblings: Mapping[int, frozenset[int]], engines: int) -> tuple[list[int], list[int]]:
    """`engines` CPUs for the step loops, from the top, a physical core apart where possible, and the rest; a
    ValueError when fewer than one CPU would be left for the rest."""
    if len(cpus) <= engines:
        raise ValueError(f"{engines} engine core(s) need {engines + 1} CPUs to pin, this process may use {len(cpus)}")
    picked: list[int] = []
    for spread in (True, False):
        for cpu in sorted(cpus, reverse=True):
            shares = any(cpu in siblings.get(other, frozenset({other})) for other in picked)
            if len(picked) < engines and cpu not in picked and not (spread and shares):
                picked.append(cpu)
    return picked, [cpu for cpu in sorted(cpus) if cpu not in picked]


def engine_cores(groups: Sequence[int]) -> list[int]:
    """The engine core processes under the replicas' process groups, in the replicas' order."""
    return [
        pid
        for group in groups
        for pid in descendants(group)
        if role((read(f"/proc/{pid}/comm") or "").strip()) == "engine_core"
    ]


def threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def apply(groups: Sequence[int], layout: Layout | None, everything: frozenset[int]) -> int:
    """Sets every thread of the fleet (and of this process, whose children are the client) to its CPUs under
    `layout`, or back to `everything` without one; returns the threads set. A thread that ended meanwhile is
    passed over."""
    done = 0
    pids = [os.getpid(), *(pid for group in groups for pid in descendants(group))]
    for pid in dict.fromkeys(pids):
        for tid in threads(pid):
            if layout is None:
                cpus = everything
            else:
                cpus = {layout.engines[pid]} if tid == pid and pid in layout.engines else set(layout.rest)
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)
                done += 1
    return done


def plan(groups: Sequence[int], cpus: Sequence[int]) -> Layout:
    found = engine_cores(groups)
    if not found:
        raise ValueError("no engine core process (VLLM::EngineCor) under the replicas")
    siblings = {cpu: siblings_of(cpu) for cpu in cpus}
    mine, rest = choose(cpus, siblings, len(found))
    shared = {cpu: sorted(siblings[cpu] - {cpu}) for cpu in mine}
    return Layout(dict(zip(found, mine, strict=True)), tuple(rest), shared)


@contextlib.contextmanager
def pinned(groups: Sequence[int], say: Callable[[str], None]) -> Iterator[dict | None]:
    """The fleet under `groups` pinned for the block; yields the layout's record, or None (and a log line) where
    it cannot be pinned. Every thread gets every CPU back at the end."""
    everything = frozenset(os.sched_getaffinity(0))
    try:
        layout = plan(groups, sorted(everything))
    except ValueError as exc:
        say(f"not pinned: {exc}")
        yield None
        return
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(REAPPLY_S):
            apply(groups, layout, everything)

    say(f"pinned {apply(groups, layout, everything)} threads: {layout.record()}")
    keeper = threading.Thread(target=keep, name="pinning", daemon=True)
    keeper.start()
    try:
        yield layout.record()
    finally:
        stop.set()
        keeper.join()
        say(f"unpinned {apply(groups, None, everything)} threads")
