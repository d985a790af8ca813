"""Where a `vllm serve` start's import seconds go, apart from any arm: the modules the command and its spawned API
servers and engine core import, timed by `python -X importtime` on the installed wheels without bytecode, then how
long compiling vLLM ahead (compileall) takes, the same imports with that bytecode, once more without -X importtime
(its own cost), and what a recipe imports before it starts a replica. Each import runs in a fresh process from an
empty folder, so nothing of the checkout is imported in place of the wheels.

    python3 bench/gpu/startup_study.py --out DIR [--site /tmp/site] [--recipe lighton-ocr3-saturate.py]

DIR receives imports-nopyc.txt, imports-pyc.txt and imports-recipe.txt (the raw -X importtime lines), times.json (the
wall seconds of each step) and summary.json (importtime_summary.py over the three). Run it on a fresh install
(wheels.py installs without bytecode): a second run finds the bytecode the first compiled. Where each process of a
serving replica spends its start: an arm with `importtime = true` (arms/profile.toml).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SERVE_MODULES = (
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve",
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.engine.core",
)


def timed(command: list[str], env: dict[str, str], stderr: Path | None = None) -> float:
    """Wall seconds of `command` run from an empty folder, its stderr into `stderr` when given."""
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as empty, open(stderr or os.devnull, "w") as err:
        subprocess.run(command, env=env, cwd=empty, stdout=subprocess.DEVNULL, stderr=err, check=True)
    return round(time.monotonic() - began, 2)


def bytecode_files(site: Path) -> int:
    return sum(1 for _ in site.rglob("*.pyc"))


def study(site: Path, out: Path, recipe: str) -> dict:
    """Each step's wall seconds (and the bytecode files before and after compiling), the raw lines into `out`."""
    python, imports = sys.executable, "import " + ", ".join(SERVE_MODULES)
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    times = {"pyc_files_before": bytecode_files(site)}
    times["nopyc_importtime_s"] = timed([python, "-X", "importtime", "-c", imports], env, out / "imports-nopyc.txt")
    times["compileall_s"] = timed([python, "-m", "compileall", "-q", "-j", "0", str(site / "vllm")], env)
    times["pyc_files_after"] = bytecode_files(site)
    times["pyc_importtime_s"] = timed([python, "-X", "importtime", "-c", imports], env, out / "imports-pyc.txt")
    times["pyc_s"] = timed([python, "-c", imports], env)
    recipe_env = env | {"PYTHONPATH": f"{site}{os.pathsep}{ROOT / 'src'}"}
    command = [python, "-X", "importtime", str(ROOT / recipe), "--help"]
    times["recipe_importtime_s"] = timed(command, recipe_env, out / "imports-recipe.txt")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/startup-study")))
    parser.add_argument("--site", type=Path, default=Path("/tmp/site"), help="where wheels.py installed the wheels")
    parser.add_argument("--recipe", default="lighton-ocr3-saturate.py", help="the recipe whose imports are timed")
    args = parser.parse_args(argv)
    if not (args.site / "vllm").is_dir():
        print(f"startup_study: no vllm in {args.site}; run python bench/gpu/wheels.py install first", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    times = study(args.site, args.out, args.recipe)
    (args.out / "times.json").write_text(json.dumps(times, indent=1) + "\n")
    files = [str(args.out / f"imports-{name}.txt") for name in ("nopyc", "pyc", "recipe")]
    summary = subprocess.run([sys.executable, str(HERE / "importtime_summary.py"), *files], capture_output=True)
    (args.out / "summary.json").write_bytes(summary.stdout)
    print(json.dumps(times))
    return summary.returncode


if __name__ == "__main__":
    sys.exit(main())
