"""bench/gpu/trace_summary.py on a small synthetic torch profiler trace whose answers are worked out by hand: two
engine steps on one host thread, a vision-encoder kernel launched before the first step's forward, overlapping
forward kernels, and idle stretches of the GPU inside and outside the steps (issue 51)."""

from __future__ import annotations

import gzip
import importlib
import json
import sys

import pytest

from tests.testbed.env import REPO_ROOT


@pytest.fixture(scope="module")
def trace_summary():
    sys.path.insert(0, str(REPO_ROOT / "bench" / "gpu"))
    try:
        yield importlib.import_module("trace_summary")
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "gpu"))


def span(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(ts: float, correlation: int) -> dict:
    return span("cuda_runtime", "cudaLaunchKernel", ts, 2, correlation=correlation)


def kernel(name: str, ts: float, dur: float, correlation: int) -> dict:
    return span("kernel", name, ts, dur, tid=7, correlation=correlation)


EVENTS = [
    span("user_annotation", "execute_context_1(2985)_generation_2(2)", 0, 100),
    span("user_annotation", "gpu_model_runner: forward", 40, 50),
    launch(10, 1),
    kernel("vit_kernel", 20, 30, 1),  # launched before the forward: the encoder's
    launch(45, 2),
    launch(50, 3),
    kernel("fwd_kernel", 60, 20, 2),
    kernel("fwd_kernel", 70, 20, 3),  # overlaps the one before: the GPU is busy 60-90
    span("user_annotation", "execute_context_0(0)_generation_2(2)", 250, 50),
    span("user_annotation", "gpu_model_runner: forward", 255, 40),
    span("cuda_driver", "cuLaunchKernelEx", 260, 2, correlation=4),  # a Triton kernel: launched through the driver
    kernel("fwd_kernel", 270, 20, 4),
    span("user_annotation", "execute_context_9(9)_generation_9(9)", 0, 300, tid=2),  # another thread's: not the main
    {"ph": "i", "name": "an instant event", "ts": 5},
]


def test_busy_time_steps_and_the_encoder_share(trace_summary):
    summary = trace_summary.summarize(EVENTS)
    assert summary["window_ms"] == 0.3
    assert summary["gpu_busy_ms"] == 0.08  # 20-50, 60-90, 270-290
    assert summary["gpu_busy_share"] == pytest.approx(80 / 300, abs=1e-4)
    assert summary["kernel_sum_ms"] == 0.09
    assert summary["kernel_time_by_region_ms"] == {"forward and after": 0.06, "before forward": 0.03}
    assert summary["encoder_share_of_kernel_time"] == pytest.approx(1 / 3, abs=1e-4)
    steps = summary["steps"]
    assert steps["steps"] == 2 and steps["with_kernels_before_forward"] == 1
    assert steps["period_us"]["p50"] == 250 and steps["kernel_us"]["p50"] == 70
    assert steps["kernel_over_period"]["p50"] == 28.0


def test_gaps_and_what_the_host_did_in_them(trace_summary):
    summary = trace_summary.summarize(EVENTS)
    gaps = summary["gaps"]
    assert gaps["count"] == 4 and gaps["idle_ms"] == 0.22  # 0-20, 50-60, 90-270, 290-300
    assert gaps["idle_ms_by_length_us"] == {"<100": 0.04, "<1000": 0.18}
    assert gaps["length_us"]["max"] == 180
    host = summary["host_during_gaps"]
    assert host["idle_ms"] == 0.22 and host["inside_steps_ms"] == 0.07 and host["outside_steps_ms"] == 0.15
    events = dict(host["top_events_ms"])
    assert events["user_annotation: execute_context_1(2985)_generation_2(2)"] == 0.04
    assert events["user_annotation: gpu_model_runner: forward"] == 0.03  # 10 in the first gap, 15 + 5 in the second
    assert events["cuda_runtime: cudaLaunchKernel"] == 0.004 and events["cuda_driver: cuLaunchKernelEx"] == 0.002
    assert not any("execute_context_9" in name for name in events), "only the engine's main thread counts"


def test_top_kernels_and_the_table(trace_summary):
    summary = trace_summary.summarize(EVENTS, top=1)
    (first,) = summary["top_kernels"]
    assert first["name"] == "fwd_kernel" and first["count"] == 3 and first["total_ms"] == 0.06
    assert first["share"] == pytest.approx(2 / 3, abs=1e-4) and first["regions_ms"] == {"forward and after": 0.06}
    assert "| `fwd_kernel` | 3 | 0.06 |" in trace_summary.table(summary)


def test_steps_split_by_kind_and_no_encoder_share_without_the_forward_annotation(trace_summary):
    """vLLM records 'gpu_model_runner: forward' only with VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 (the H200 trace of
    2026-12-03 had none, and every kernel read as the encoder's); steps with a prefill still split from the rest."""
    kinds = trace_summary.summarize(EVENTS)["steps_by_kind"]
    assert kinds["with prefill"]["steps"] == 1 and kinds["with prefill"]["kernel_us"]["p50"] == 70
    assert kinds["decode only"]["steps"] == 0, "the last step has no period and is left out"
    bare = trace_summary.summarize([e for e in EVENTS if e["name"] != "gpu_model_runner: forward"])
    assert bare["encoder_share_of_kernel_time"] is None and "VLLM_CUSTOM_SCOPES_FOR_PROFILING" in bare["note"]
    assert bare["kernel_time_by_region_ms"] == {"inside step": 0.09}


def test_a_gzipped_trace_loads_and_one_without_kernels_says_so(trace_summary, tmp_path):
    path = tmp_path / "engine.pt.trace.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": EVENTS}, handle)
    assert trace_summary.load(path) == EVENTS
    assert "error" in trace_summary.summarize([e for e in EVENTS if e.get("cat") != "kernel"])
