"""The results file of one arms file's run: every arm's figures in the shape bench/results/ keeps, with what each
figure means, and the full merged result of each arm one JSON line apiece beside it.

Each arm of the file: `arm`, `recipe`, `shape`, `pages`, `defaults` (true when the arm ran the recipe's own engine
settings), `sustained_pages_per_s`, `billed_pages_per_s`, `pages_per_s`, `gpu_util_sustained`, `mfu_sustained`,
`cpu_per_page`, `ok`, `startup` (each spawned replica's start-up timeline), `engine_cache`, `cpu_sustained`,
`engine_queues_sustained`, `sched_sustained`, `py_spy` (where the arm ran under it), `env` (what the arm added to
the environment), and the core that ran (`core`: version and folder; a checkout's src/ has no installed version, so
the version is pyproject.toml's, marked so).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from arms import Bench

ROOT = Path(__file__).resolve().parents[2]
FIELDS = (
    "arm",
    "recipe",
    "shape",
    "pages",
    "defaults",
    "sustained_pages_per_s",
    "billed_pages_per_s",
    "work_pages_per_s",
    "cpu_per_page",
    "pages_per_s",
    "gpu_util_sustained",
    "mfu_sustained",
    "ok",
    "started_at",
    "startup",
    "engine_cache",
    "cpu_sustained",
    "engine_queues_sustained",
    "sched_sustained",
    "machine_cpu_sustained",
    "py_spy",
    "pinned",
    "env",
    "same_text_as_reference",
)
DEFINITIONS = {
    "sustained_pages_per_s": "pages whose request was sent once every planned replica served and that finished "
    "before the last page was sent, over that interval (the core's rates); a lower bound, null when the window "
    "held every page at once",
    "billed_pages_per_s": "rows done over the recipe process's wall time, start to exit, start-up and publishing "
    "included; for the hand driver, pages over the arm's elapsed time (its server's start included)",
    "pages_per_s": "pages over inference, first page sent to the last outcome (the summary's own)",
    "gpu_util_sustained": "mean nvidia-smi utilisation (once a second) over the sustained interval",
    "mfu_sustained": "sustained pages/s times the model FLOPs of a page (flops.py) over 989 TFLOP/s (H200 dense "
    "bf16 datasheet peak)",
    "startup": "per spawned replica, seconds from launch to healthy by phase, read from its serve log: imports (the "
    "vllm command's), processes (the API servers and engine core it spawns, up), setup (tokenizer, processor, "
    "distributed init), load, compile, warmup (vLLM's initial profiling/warmup run), "
    "kv_cache_and_graphs, api_up; waited_s before its launch (the core's start-up log reader)",
    "engine_cache": "--engine-cache's key, outcome (hit, miss or off), notes and bytes loaded and written",
    "env": "the variables the arm added to the recipe's or its replicas' environment (arms.py's env); empty or null "
    "where none",
    "cpu_per_page": "core-seconds per page over the sustained interval (each role's cores there over the sustained "
    "pages/s), in all and by role (client: the recipe or driver and its helpers; api_server; engine_core; other: "
    "the vllm serve parents and the rest), and cpu_ceiling_projection: a PROJECTION, not a measurement, of the pages/s "
    "each HF flavor's vCPUs (l4x1 8, l40sx1 8, a100-large 12, h200 23) would feed at that cost, a busy vCPU counted "
    "as 0.75 of a core (sustained.py)",
    "cpu_sustained": "CPU seconds of the arm's process tree by role (client, api_server, engine_core, other) and per "
    "process, "
    "and cores (CPU seconds over the interval), from /proc samples stamped inside the sustained interval only",
    "engine_queues_sustained": "each engine's mean running and waiting requests over the sustained interval "
    "(its /metrics, once a second)",
    "sched_sustained": "per engine core and API server, from /proc/PID/task/TID/schedstat over the sustained interval: "
    "its main thread's and all its threads' seconds on a CPU and runnable but waiting for one, the waiting share of "
    "the time they wanted a CPU, and both as cores (runqueue.py)",
    "machine_cpu_sustained": "the whole machine over the sustained interval, from /proc/stat and the cgroup's "
    "cpu.stat (machine_cpu.py): busy vCPUs (user, nice, system, irq, softirq, every process and the kernel) and each "
    "field as cores, stolen vCPUs (steal), the seconds the cgroup was throttled, beside its vCPUs and quota",
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


def arm_of(row: dict) -> dict:
    arm = {key: row.get(key) for key in FIELDS}
    arm["core"] = core_of(row.get("summary") or {})
    return arm


def write(folder: Path, name: str, header: dict, rows: list[dict]) -> Path:
    """`folder/NAME.json` (the results file) and `folder/NAME.jsonl` (each arm's whole merged result)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.jsonl", "w") as lines:
        lines.writelines(json.dumps(row) + "\n" for row in rows)
    document = {
        "benchmark": name,
        "date": datetime.now(timezone.utc).date().isoformat(),
        **header,
        "definitions": DEFINITIONS,
        "arms": [arm_of(row) for row in rows],
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


def header(path: Path, bench: Bench, fake: bool, env: dict[str, str]) -> dict:
    """What the results file says of the run: the arms file, the machine and the vLLM that served (read with the
    environment the recipes ran in)."""
    path = path.resolve()
    probe = "import importlib.metadata as m; print(m.version('vllm'))"
    vllm = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout.strip()
    return {
        "arms_file": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
        "machine": "fake engine (no GPU)" if fake else gpu_name(),
        "vllm": "fake" if fake else vllm or None,
        "pages_n": bench.pages,
        "max_tokens": bench.max_tokens,
        "max_model_len": bench.max_model_len,
    }


def gpu_name() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return smi.stdout.strip() or None
