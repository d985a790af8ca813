"""The arm's figures over the sustained interval alone, where a long job spends its time: CPU by process and role,
the engines' queues, the scheduler's on-CPU and waiting time per serving process (runqueue.py), and the headline of the
front-end work, CPU per page.

CPU per page is core-seconds over the interval, by role, over the pages' worth of work done in it: the engines'
output tokens over the interval (their Prometheus counters) over a page's output tokens. The sustained page count
(rates.py) leaves out the pages in flight when the interval opens, some 550 for three replicas, so it reads low
and the CPU per page high, the more so the shorter the run; the token count holds every step the engines ran. Where
the engines gave no counter (records of earlier runs), the sustained rate stands in, and `per_page_of` says
which. The roles: the recipe's client, the API servers, the engine cores, and other (the `vllm serve` parent
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


def per_page(held: dict, sustained: float | None, of: str = "sustained pages") -> dict:
    """Core-seconds per page by role and in all over the sustained interval, and the flavors' projected ceilings;
    `sustained` is the interval's pages (or pages' worth of output tokens, `of`) per second."""
    cores = held.get("cores_by_role") or {}
    if not sustained or not sum(cores.values()):
        return {}  # no rate, or no process sampled twice inside the interval
    total = sum(cores.values()) / sustained
    return {
        "per_page_of": of,
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
    queues = queue_report(stats.get("queue_samples") or {}, interval)
    work = work_pages_per_s(queues, summary)
    return {
        "cpu_sustained": held,
        "work_pages_per_s": work,
        "cpu_per_page": per_page(held, work, "output tokens")
        if work
        else per_page(held, summary.get("sustained_pages_per_s")),
        "engine_queues_sustained": queues,
        "sched_sustained": sched_report(stats.get("sched_samples") or {}, interval),
        "machine_cpu_sustained": machine_report(stats.get("machine_samples") or {}, interval),
    }


def work_pages_per_s(queues: dict, summary: dict) -> float | None:
    """Pages' worth of output tokens the engines made per second over the interval: their tokens per second over
    the run's tokens per page (its output tokens per second over its pages per second). None without a counter."""
    rates = [engine["output_tokens_per_s"] for engine in queues.values() if "output_tokens_per_s" in engine]
    tokens, pages = summary.get("output_tokens_per_s"), summary.get("pages_per_s")
    if not rates or not tokens or not pages:
        return None
    return round(sum(rates) / (tokens / pages), 3)
