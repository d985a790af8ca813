"""Where a replica's start went, read from its `vllm serve` log: launch, model load, compile, warm-up, KV cache
and graphs, serving; each phase in seconds, so a start-up lever is measured, not guessed.

Before the model loads a start has three phases: the `vllm` command's own imports (until it logs its non-default
arguments), the API server and engine core processes it spawns, each importing vLLM again (until the engine core
logs its config), and the engine's set-up (tokenizer, processor, distributed init). A warm H200 start of
2026-12-02 spent 18, 25 and 7 s in them: most of what the engine cache leaves is Python importing.

vLLM stamps its log lines with the local time to the second (`INFO 12-02 14:03:11 [file.py:123] message`) and
names its milestones in words that have held from 0.10 to 0.32: "non-default args" (or "vLLM API server version"),
"Initializing a V1 LLM engine", "Starting to load model", "Model loading took" (or
"Loading weights took" on the CPU), the compile lines of vllm/compilation/ ("torch.compile takes", "Compiling a
graph", "Directly load the compiled graph", "saved AOT compiled function"), "Initial profiling/warmup run took"
(monitor.py), and "init engine (profile, create kv cache, warmup model) took" (v1/engine/core.py). Each phase ends
at the last line of its milestone, so with several engines (data parallel) it ends when the slowest one is past
it; a phase whose milestone the log lacks (no compile under --enforce-eager) is None and its time falls into the
next phase. The launch and the first healthy /health come from the driver's own clock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

LINE = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.\d+)?\s+\[[^\]]*\]\s?(.*)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Each phase and the words of the line that ends it, in the order a start passes them.
MILESTONES = (
    ("imports", ("non-default args", "vLLM API server version")),
    ("processes", ("Initializing a V1 LLM engine",)),
    ("setup", ("Starting to load model",)),
    ("load", ("Model loading took", "Loading weights took")),
    (
        "compile",
        (
            "torch.compile takes",
            "torch.compile and initial profiling/warmup run together took",
            "Compiling a graph",
            "Directly load the compiled graph",
            "saved AOT compiled function",
            "Dynamo bytecode transform time",
        ),
    ),
    ("warmup", ("Initial profiling/warmup run took",)),
    ("kv_cache_and_graphs", ("init engine (profile, create kv cache, warmup model) took",)),
)
SERVING_PHASE = "api_up"
DAY_S = 86400.0


@dataclass(frozen=True)
class Stamped:
    """One log line of vLLM's own format: when it was written (epoch seconds) and its message."""

    at: float
    message: str


def stamped_lines(text: str, year: int) -> list[Stamped]:
    """The lines of vLLM's format, with their local time read as of `year`; others (uvicorn, tracebacks) skipped."""
    found = []
    for line in ANSI.sub("", text).splitlines():
        match = LINE.search(line)
        if match is None:
            continue
        month, day, hour, minute, second = (int(part) for part in match.groups()[:5])
        try:
            at = time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
        except (OverflowError, ValueError):
            continue
        found.append(Stamped(at, match.group(6)))
    return found


def milestone_times(lines: Sequence[Stamped]) -> dict[str, float]:
    """For each phase whose milestone the log holds, when it ended: its last milestone line before the first line
    of any later phase (compile lines after the warm-up, vLLM's compiles for given batch sizes, belong to the KV
    cache and graphs phase)."""
    ends: dict[str, float] = {}
    position = 0
    for index, (phase, words) in enumerate(MILESTONES):
        later = [word for _, others in MILESTONES[index + 1 :] for word in others]
        limit = next((at for at in range(position, len(lines)) if says(lines[at], later)), len(lines))
        hits = [at for at in range(position, limit) if says(lines[at], words)]
        if hits:
            ends[phase] = lines[hits[-1]].at
            position = hits[-1] + 1
    return ends


def says(line: Stamped, words: Sequence[str]) -> bool:
    return any(word in line.message for word in words)


def startup_timeline(log_text: str, launched_at: float, healthy_at: float) -> dict:
    """The phases of one start in seconds, from the log a start wrote (`log_text`, nothing of an earlier start) and
    the driver's clock: launch at `launched_at`, /health first answered at `healthy_at` (epoch seconds).

    The log's clock counts whole seconds, so a phase may be a second off, never below zero; `total_s` is the
    driver's own measure of launch to healthy."""
    year = time.localtime(launched_at).tm_year
    lines = stamped_lines(log_text, year)
    if lines and lines[0].at > launched_at + DAY_S:  # a start across New Year: the lines belong to the year before
        lines = stamped_lines(log_text, year - 1)
    ends = milestone_times(lines)
    phases: dict[str, float | None] = {}
    previous = launched_at
    for phase, _ in MILESTONES:
        end = ends.get(phase)
        if end is None:
            phases[phase] = None
            continue
        end = min(max(end, previous), healthy_at)
        phases[phase] = round(end - previous, 1)
        previous = end
    phases[SERVING_PHASE] = round(max(0.0, healthy_at - previous), 1)
    return {"phases_s": phases, "total_s": round(healthy_at - launched_at, 1)}


def describe_timeline(timeline: dict) -> str:
    """One line for the console: each phase the log showed, and the total."""
    shown = [
        f"{name.replace('_', ' ')} {seconds:.0f} s"
        for name, seconds in timeline["phases_s"].items()
        if seconds is not None
    ]
    waited = (
        f" (after {timeline['waited_s']:.0f} s waiting for another replica's start)" if timeline.get("waited_s") else ""
    )
    return f"{', '.join(shown)}; {timeline['total_s']:.0f} s from launch to healthy{waited}"
