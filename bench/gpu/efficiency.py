"""Collects the bench arms' merged results into the issue-30 file, bench/results/h200-efficiency-<date>.json.

    python3 bench/gpu/efficiency.py OUT.json RESULT.json|ROWS.jsonl ...

Each input is one arm's merged result (monitor.py merge) or a JSON line per arm (sweep.sh, hand_replicas.sh).
Each arm of the file: `arm`, `recipe`, `shape`, `pages`, `defaults` (true when the arm ran the recipe's own engine
settings), `sustained_pages_per_s`, `billed_pages_per_s`, `pages_per_s`, `gpu_util_sustained`, `mfu_sustained`,
`ok`, `startup` (each spawned replica's start-up timeline), `engine_cache`, `cpu_sustained`,
`engine_queues_sustained`, `py_spy` (where the arm ran under it), and the core that ran (`core`: version
and folder; a checkout's src/ has no installed version, so the version is pyproject.toml's, marked so). An existing
OUT.json keeps its arms, so the calls of one warm machine add up to one file; an arm read again (same arm and start
time) replaces its earlier copy.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIELDS = (
    "arm",
    "recipe",
    "shape",
    "pages",
    "defaults",
    "sustained_pages_per_s",
    "billed_pages_per_s",
    "pages_per_s",
    "gpu_util_sustained",
    "mfu_sustained",
    "ok",
    "started_at",
    "startup",
    "engine_cache",
    "cpu_sustained",
    "engine_queues_sustained",
    "py_spy",
)
DEFINITIONS = {
    "sustained_pages_per_s": "pages whose request was sent once every planned replica served and that finished "
    "before the last page was sent, over that interval (ocr_core/rates.py); a lower bound, null when the window "
    "held every page at once",
    "billed_pages_per_s": "rows done over the recipe process's wall time, start to exit, start-up and publishing "
    "included; for the hand driver, pages over the arm's elapsed time (its server's start included)",
    "pages_per_s": "pages over inference, first page sent to the last outcome (the summary's own)",
    "gpu_util_sustained": "mean nvidia-smi utilisation (once a second) over the sustained interval",
    "mfu_sustained": "sustained pages/s times the model FLOPs of a page (flops.py) over 989 TFLOP/s (H200 dense "
    "bf16 datasheet peak)",
    "startup": "per spawned replica, seconds from launch to healthy by phase, read from its serve log: imports (the "
    "vllm command's), processes (the API servers and engine core it spawns, up), setup (tokenizer, processor, "
    "distributed init; the three were one phase, start, before 2026-12-02 late), load, compile, warmup (vLLM's "
    "initial profiling/warmup run), "
    "kv_cache_and_graphs, api_up; waited_s before its launch (ocr_core/serving/startup_log.py)",
    "engine_cache": "--engine-cache's key, outcome (hit, miss or off), notes and bytes loaded and written",
    "cpu_sustained": "CPU seconds of the arm's process tree by role (api_server, engine_core, other) and per process, "
    "and cores (CPU seconds over the interval), from /proc samples stamped inside the sustained interval only",
    "engine_queues_sustained": "each engine's mean running and waiting requests over the sustained interval "
    "(its /metrics, once a second)",
    "py_spy": "py-spy of the busiest engine core and API server once serving (bench/gpu/pyspy.py): shares of the "
    "samples by thread, innermost frame and frame on the stack",
}


def source_version() -> str | None:
    """The core's version as the checkout declares it (what src/ holds when nothing installed it)."""
    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    return found.group(1) if found else None


def core_of(summary: dict) -> dict | None:
    core = summary.get("core")
    if not core or core.get("version"):
        return core
    return {**core, "version": f"{source_version()} (src/ of the checkout, not installed)"}


def read_rows(path: Path) -> list[dict]:
    text = path.read_text()
    try:
        return [json.loads(text)]
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def arm_of(row: dict) -> dict:
    arm = {key: row.get(key) for key in FIELDS}
    arm["arm"] = row.get("setting") or row.get("arm")
    arm["core"] = core_of(row.get("summary") or {})
    return arm


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    kept = json.loads(out.read_text())["arms"] if out.exists() else []
    new = [arm_of(row) for path in sys.argv[2:] for row in read_rows(Path(path))]
    fresh = {(arm["arm"], arm["started_at"]) for arm in new}
    arms = [arm for arm in kept if (arm["arm"], arm["started_at"]) not in fresh] + new
    document = {
        "benchmark": "h200-efficiency",
        "date": datetime.now(timezone.utc).date().isoformat(),
        "issue": 30,
        "definitions": DEFINITIONS,
        "arms": arms,
    }
    out.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
