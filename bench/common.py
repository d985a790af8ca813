"""What every benchmark here shares: the machine's description and where results go.

Benchmarks print numbers and write them to bench/results/*.json; they pass or fail nothing. Ratios are measured
within one run, since the machines they run on are shared and noisy.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# BENCH_RESULTS redirects the result files (the bench test runs every script at tiny sizes into a temporary folder).
RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results")
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]


def machine() -> dict:
    """CPU model, cores and memory, so a result file says what it was measured on."""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    memory_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kib / 1024**2, 1),
        "python": platform.python_version(),
        "gpu": None,
    }


def save(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc)
    path = RESULTS / f"{name}-{stamp:%Y-%m-%d}.json"
    body = {"benchmark": name, "date": f"{stamp:%Y-%m-%d}", "machine": machine(), **payload}
    path.write_text(json.dumps(body, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def vllm_version(venv: Path, env: dict[str, str]) -> str:
    """The vLLM release a venv holds, as its own interpreter reports it."""
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    return found.stdout.strip().splitlines()[-1]
