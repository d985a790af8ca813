"""What a torch profiler trace of one vLLM engine says about its bound (issue 51): how much of each engine step the
GPU spent running kernels, where the GPU sat idle between kernels and what the engine's host thread was doing
then, how much kernel time the vision encoder took, and the kernels that took the most.

vLLM 0.26 wraps every `execute_model` of the worker in a user annotation named `execute_context_N(T)_generation_M(G)`
and the model's forward in `gpu_model_runner: forward`; the multimodal encoder runs between the two (the step's
`_preprocess`). So a kernel whose launch (the runtime call with the same `correlation`) falls inside a step but
before that step's forward is counted as the encoder's (with the small embedding gathers beside it): an upper
bound on the vision encoder's share. The raw trace (hundreds of MB) stays on the device; this summary comes back.

    python3 bench/gpu/trace_summary.py TRACE.json[.gz] [--top 25] > summary.json
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
# Kernels are launched through the runtime (cudaLaunchKernel, cudaGraphLaunch) or the driver (Triton's cuLaunchKernel).
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}
HOST_CATEGORIES = {"user_annotation", "cpu_op", "cuda_runtime", "cuda_driver"}
STEP_PREFIX = "execute_context_"
FORWARD = "gpu_model_runner: forward"
# Idle stretches of the GPU by length, in microseconds: launch-latency gaps against host-bound ones.
GAP_EDGES_US = (10, 100, 1000, 10000)
NAME_CHARS = 140
NO_FORWARD = (
    "no 'gpu_model_runner: forward' annotation in the trace (vLLM records it only with"
    " VLLM_CUSTOM_SCOPES_FOR_PROFILING=1): the encoder's share is unknown; steps_by_kind splits steps with a"
    " prefill (where the encoder runs) from decode-only ones instead"
)


def load(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        data = json.load(handle)
    return data["traceEvents"] if isinstance(data, dict) else data


def complete(events: Iterable[dict]) -> list[dict]:
    """The duration events ('X') with a start and a length."""
    return [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping or touching intervals merged, sorted by start."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def covered(intervals: list[tuple[float, float]], start: float, end: float, starts: list[float] | None = None) -> float:
    """Length of [start, end) covered by merged, sorted intervals (`starts`: their starts, when already listed)."""
    total = 0.0
    starts = starts if starts is not None else [a for a, _ in intervals]
    index = max(0, bisect.bisect_right(starts, start) - 1)
    for a, b in intervals[index:]:
        if a >= end:
            break
        total += max(0.0, min(b, end) - max(a, start))
    return total


def gaps(busy: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The idle stretches of [start, end) between merged busy intervals."""
    idle = []
    cursor = start
    for a, b in busy:
        if b <= cursor:
            continue
        if a > cursor:
            idle.append((cursor, min(a, end)))
        cursor = max(cursor, b)
        if cursor >= end:
            break
    if cursor < end:
        idle.append((cursor, end))
    return [(a, b) for a, b in idle if b > a]


def quantiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "n": len(values),
        "mean": round(statistics.fmean(values), 1),
        "p10": at(0.1),
        "p50": at(0.5),
        "p90": at(0.9),
        "max": round(ordered[-1], 1),
    }


def host_thread(steps: list[dict]) -> tuple | None:
    """The (pid, tid) that ran most engine steps: the engine core's main thread."""
    counts = Counter((e.get("pid"), e.get("tid")) for e in steps)
    return counts.most_common(1)[0][0] if counts else None


def step_regions(steps: list[dict], forwards: list[dict]) -> list[dict]:
    """Each step's start and end on the host, and where its forward starts (its end when none was recorded)."""
    starts = [f["ts"] for f in forwards]
    regions = []
    for step in steps:
        begin, end = step["ts"], step["ts"] + step["dur"]
        index = bisect.bisect_left(starts, begin)
        forward = starts[index] if index < len(starts) and starts[index] < end else end
        regions.append({"name": step["name"], "start": begin, "end": end, "forward": forward})
    return regions


def summarize(events: list[dict], top: int = 25) -> dict:
    """The figures of one trace (see the module's docstring); all times in microseconds unless named _ms."""
    spans = complete(events)
    kernels = [e for e in spans if e.get("cat") in GPU_CATEGORIES]
    steps = sorted(
        (e for e in spans if e.get("cat") == "user_annotation" and e["name"].startswith(STEP_PREFIX)),
        key=lambda e: e["ts"],
    )
    main = host_thread(steps)
    steps = [e for e in steps if (e.get("pid"), e.get("tid")) == main]
    forwards = sorted(
        (
            e
            for e in spans
            if e.get("cat") == "user_annotation" and e["name"] == FORWARD and (e.get("pid"), e.get("tid")) == main
        ),
        key=lambda e: e["ts"],
    )
    if not kernels:
        return {"error": "no GPU kernels in the trace (was CUDA activity on?)"}
    busy = union((k["ts"], k["ts"] + k["dur"]) for k in kernels)
    window = (steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]) if steps else (busy[0][0], busy[-1][1])
    wall = window[1] - window[0]
    busy_in_window = covered(busy, *window)
    kernel_sum = sum(k["dur"] for k in kernels if window[0] <= k["ts"] < window[1])

    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in spans
        if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})
    }
    regions = step_regions(steps, forwards)
    region_starts = [r["start"] for r in regions]

    def region_of(kernel: dict) -> tuple[int | None, str]:
        launched = launches.get(kernel.get("args", {}).get("correlation"))
        if launched is None:
            return None, "unattributed"
        index = bisect.bisect_right(region_starts, launched) - 1
        if index < 0 or launched >= regions[index]["end"]:
            return None, "outside steps"
        if not forwards:
            return index, "inside step"
        return index, "before forward" if launched < regions[index]["forward"] else "forward and after"

    per_step_kernel = defaultdict(float)
    steps_with_encoder: set[int] = set()
    by_region: Counter[str] = Counter()
    by_name: dict[str, list[float]] = defaultdict(list)
    name_region: dict[str, Counter[str]] = defaultdict(Counter)
    for kernel in kernels:
        index, region = region_of(kernel)
        by_region[region] += kernel["dur"]
        name = kernel["name"][:NAME_CHARS]
        by_name[name].append(kernel["dur"])
        name_region[name][region] += kernel["dur"]
        if index is not None:
            per_step_kernel[index] += kernel["dur"]
            if region == "before forward":
                steps_with_encoder.add(index)
    all_kernel = sum(by_region.values())

    step_rows = []
    for index, region in enumerate(regions[:-1]):
        period = regions[index + 1]["start"] - region["start"]
        step_rows.append(
            {"period": period, "host": region["end"] - region["start"], "kernel": per_step_kernel.get(index, 0.0)}
        )
    step_figures = {
        "steps": len(regions),
        "period_us": quantiles([r["period"] for r in step_rows]),
        "host_in_step_us": quantiles([r["host"] for r in step_rows]),
        "kernel_us": quantiles([r["kernel"] for r in step_rows]),
        "kernel_over_period": quantiles([100 * r["kernel"] / r["period"] for r in step_rows if r["period"] > 0]),
        "with_kernels_before_forward": len(steps_with_encoder),
    }

    idle = gaps(busy, *window)
    lengths = [b - a for a, b in idle]
    buckets = Counter()
    for length in lengths:
        edge = next((f"<{e}" for e in GAP_EDGES_US if length < e), f">={GAP_EDGES_US[-1]}")
        buckets[edge] += length
    host = host_activity(spans, main, idle, regions)

    ranked = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:top]
    return {
        "window_ms": round(wall / 1000, 3),
        "gpu_busy_ms": round(busy_in_window / 1000, 3),
        "gpu_busy_share": round(busy_in_window / wall, 4) if wall else None,
        "kernel_sum_ms": round(kernel_sum / 1000, 3),
        "kernels": len(kernels),
        "steps": step_figures,
        "kernel_time_by_region_ms": {k: round(v / 1000, 3) for k, v in by_region.most_common()},
        "encoder_share_of_kernel_time": round(by_region["before forward"] / all_kernel, 4) if forwards else None,
        "note": None if forwards else NO_FORWARD,
        "steps_by_kind": by_kind(regions, step_rows),
        "gaps": {
            "count": len(idle),
            "idle_ms": round(sum(lengths) / 1000, 3),
            "length_us": quantiles(lengths),
            "idle_ms_by_length_us": {k: round(v / 1000, 3) for k, v in sorted(buckets.items())},
        },
        "host_during_gaps": host,
        "top_kernels": [
            {
                "name": name,
                "count": len(durs),
                "total_ms": round(sum(durs) / 1000, 3),
                "mean_us": round(statistics.fmean(durs), 1),
                "share": round(sum(durs) / all_kernel, 4),
                "regions_ms": {k: round(v / 1000, 3) for k, v in name_region[name].most_common()},
            }
            for name, durs in ranked
        ],
    }


def by_kind(regions: list[dict], step_rows: list[dict]) -> dict:
    """Steps with a prefill (`execute_context_N(...)` with N > 0: a new page's encoder and prefill run there) against
    decode-only steps: their count, period and kernel time."""
    kinds: dict[str, list[dict]] = {"with prefill": [], "decode only": []}
    for region, row in zip(regions, step_rows):
        prefill = not region["name"].startswith(f"{STEP_PREFIX}0(")
        kinds["with prefill" if prefill else "decode only"].append(row)
    return {
        kind: {
            "steps": len(rows),
            "period_us": quantiles([r["period"] for r in rows]),
            "kernel_us": quantiles([r["kernel"] for r in rows]),
        }
        for kind, rows in kinds.items()
    }


def host_activity(spans: list[dict], main: tuple | None, idle: list[tuple[float, float]], regions: list[dict]) -> dict:
    """What the engine's main thread was in while the GPU idled: outside any step (the engine core's own loop:
    scheduling, inputs and outputs), inside a step's named phases, and by host event (annotations, aten ops and
    CUDA runtime calls, each counted for the idle time it overlaps; nested events each count)."""
    if main is None:
        return {}
    own = [e for e in spans if (e.get("pid"), e.get("tid")) == main and e.get("cat") in HOST_CATEGORIES]
    step_spans = union((r["start"], r["end"]) for r in regions)
    idle_total = sum(b - a for a, b in idle)
    step_starts = [a for a, _ in step_spans]
    in_steps = sum(covered(step_spans, a, b, step_starts) for a, b in idle)
    by_event: Counter[str] = Counter()
    gap_starts = [a for a, _ in idle]
    for event in own:
        begin, end = event["ts"], event["ts"] + event["dur"]
        index = max(0, bisect.bisect_right(gap_starts, begin) - 1)
        overlap = 0.0
        for a, b in idle[index:]:
            if a >= end:
                break
            overlap += max(0.0, min(b, end) - max(a, begin))
        if overlap:
            by_event[f"{event['cat']}: {event['name'][:NAME_CHARS]}"] += overlap
    return {
        "idle_ms": round(idle_total / 1000, 3),
        "outside_steps_ms": round((idle_total - in_steps) / 1000, 3),
        "inside_steps_ms": round(in_steps / 1000, 3),
        "top_events_ms": [[k, round(v / 1000, 3)] for k, v in by_event.most_common(20)],
    }


def table(summary: dict) -> str:
    """The top kernels as a markdown table."""
    rows = ["| kernel | count | total ms | mean us | share | launched |", "|---|---|---|---|---|---|"]
    for k in summary.get("top_kernels", []):
        where = ", ".join(f"{r} {ms}" for r, ms in k["regions_ms"].items())
        rows.append(f"| `{k['name']}` | {k['count']} | {k['total_ms']} | {k['mean_us']} | {k['share']:.1%} | {where} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--table", type=Path, help="also write the top kernels as a markdown table here")
    args = parser.parse_args()
    summary = {"trace": args.trace.name, **summarize(load(args.trace), args.top)}
    if args.table:
        args.table.write_text(table(summary) + "\n")
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
