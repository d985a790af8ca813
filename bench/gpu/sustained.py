"""The arm's figures over the sustained interval alone, where a long job spends its time: CPU by process and role,
the engines' queues, the scheduler's on-CPU and waiting time per serving process (runqueue.py), and the headline of the
front-end work, CPU per page.

CPU per page is core-seconds over the interval, by role, over the pages done in it (the cores a role used over the
sustained pages/s): the recipe's client, the API servers, the engine cores, and other (the `vllm serve` parent
processes, an MPS daemon). A fleet whose CPU per page times its rate nears the cores the machine really gives binds
on the host, whatever the GPU's utilisation reads. `cpu_ceiling_projection` carries that to HF Jobs' flavors: the
pages/s their vCPUs would feed at the measured CPU per page, counting a busy vCPU as `SCALING` of a core (16 vCPUs
of the bench machine gave ~12 cores' worth of independent processes). It is a projection, not a measurement: it
assumes the same work per page and no other bound.
"""

from __future__ import annotations

from machine_cpu import machine_report
from procs import cpu_report, queue_report
from runqueue import sched_report

FLAVOR_VCPUS = {"l4x1": 8, "l40sx1": 8, "a100-large": 12, "h200": 23}  # HF Jobs' flavors the recipes plan for
SCALING = 0.75  # cores' worth of one busy vCPU when all are busy (16 gave ~12 on the bench machine, 2026-12-03)


def per_page(held: dict, sustained: float | None) -> dict:
    """Core-seconds per page by role and in all over the sustained interval, and the flavors' projected ceilings."""
    cores = held.get("cores_by_role") or {}
    if not sustained or not sum(cores.values()):
        return {}  # no rate, or no process sampled twice inside the interval
    total = sum(cores.values()) / sustained
    return {
        "core_s_per_page": round(total, 3),
        "core_s_per_page_by_role": {name: round(value / sustained, 3) for name, value in sorted(cores.items())},
        "cpu_ceiling_projection": {flavor: round(vcpus * SCALING / total, 1) for flavor, vcpus in FLAVOR_VCPUS.items()},
    }


def sustained_figures(stats: dict, summary: dict) -> dict:
    """CPU per process and role, CPU per page, the engines' queues and the serving threads' scheduler figures, over
    the summary's sustained interval only: the arm's own figures count the start-up too."""
    interval = summary.get("sustained_unix")
    if not interval or "cpu_samples" not in stats:
        return {}
    seconds = interval[1] - interval[0]
    held = {"seconds": round(seconds, 1), **cpu_report(stats["cpu_samples"], interval, seconds)}
    return {
        "cpu_sustained": held,
        "cpu_per_page": per_page(held, summary.get("sustained_pages_per_s")),
        "engine_queues_sustained": queue_report(stats.get("queue_samples") or {}, interval),
        "sched_sustained": sched_report(stats.get("sched_samples") or {}, interval),
        "machine_cpu_sustained": machine_report(stats.get("machine_samples") or {}, interval),
    }
