"""Run by a pinned venv's python: a recipe's serve flags and offline engine kwargs, read by that vLLM's own parsers.

    python tests/pinned/flagcheck.py SCRIPT MODEL_DIR    # SCRIPT: a file stating FACTS; prints one JSON object

The `vllm serve` argv is the one the recipe spawns (its FACTS' serve_args, --max-model-len, the multi-GPU scale
flags, host and port); each flag is also parsed alone, so a failure names the flags this release does not know. The
offline kwargs are the recipe's own `engine_kwargs`, checked against this release's EngineArgs. Nothing is loaded:
the engine's compiled ops are never imported, which is why this runs even where the pinned release cannot.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

PORT = 8000
MULTI_GPU = ["--data-parallel-size", "2", "--api-server-count", "4"]


# `vllm serve`'s parser as the release builds it comes from the tool that writes the flag tables from it; this file
# runs as a script (its own folder first on the path), so the checkout's root is put on the path to reach it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.vllm_flags import Refused as ParseError  # noqa: E402
from tools.vllm_flags import serve_parser as release_parser  # noqa: E402


def serve_parser() -> tuple[argparse.ArgumentParser, Any]:
    """`vllm serve`'s parser, raising instead of exiting, and the checks `vllm serve` makes on the parsed arguments
    before it starts anything."""
    try:
        from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
    except ImportError:
        from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args
    return release_parser(), validate_parsed_serve_args


def parse_serve(argv: list[str]) -> argparse.Namespace:
    """argv as it follows `vllm serve`, parsed and validated."""
    parser, validate = serve_parser()
    args = parser.parse_args(argv)
    validate(args)
    return args


def flag_groups(argv: list[str]) -> list[list[str]]:
    """argv cut into one flag and its values each."""
    groups: list[list[str]] = []
    for arg in argv:
        if arg.startswith("--") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def refused_flags(model_dir: str, argv: list[str]) -> dict[str, str]:
    """Each flag group that this release refuses when parsed alone, with its error."""
    refused = {}
    for group in flag_groups(argv):
        try:
            parse_serve([model_dir, *group])
        except (ParseError, ValueError, TypeError, SystemExit) as exc:
            refused[" ".join(group)] = f"{type(exc).__name__}: {exc}"
    return refused


def engine_check(serve_args: list[str], model_dir: str) -> dict[str, Any]:
    """The offline recipe's `LLM(...)` kwargs, and any this release's EngineArgs does not take."""
    from vllm.engine.arg_utils import EngineArgs

    from ocr_core.shapes.llm_batches import engine_kwargs

    try:
        kwargs = engine_kwargs(serve_args)
    except BaseException as exc:
        return {"kwargs": None, "error": f"{type(exc).__name__}: {exc}"}
    fields = {field.name for field in dataclasses.fields(EngineArgs)}
    unknown = sorted(set(kwargs) - fields)
    error = None
    if not unknown:
        try:
            EngineArgs(model=model_dir, **kwargs)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    return {"kwargs": {key: repr(value) for key, value in kwargs.items()}, "unknown": unknown, "error": error}


def script_facts(path: str) -> Any:
    """The FACTS a script states (its entry is behind `__name__ == "__main__"`, so loading it runs nothing else)."""
    spec = importlib.util.spec_from_file_location("flagcheck_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FACTS


def h200_plan(facts: Any, version: str) -> Any:
    """The machine plan (a ScalePlan) for a recipe's FACTS on HF's h200 flavor (23 cores, one H200)
    under this vLLM release."""
    from ocr_core.planning.scale import Gpu, Machine, memory_utilization, plan_scale

    machine = Machine((Gpu("0", "NVIDIA H200", 143771),), 23)
    return plan_scale(
        machine, facts.params_b, memory_utilization(facts.serve_args), vllm_version=version,
        model_flags=facts.serve_args,
    )  # fmt: skip


def plan_check(facts: Any, model_dir: str, version: str) -> dict[str, Any]:
    """The machine plan's flags for HF's h200 flavor under this release, parsed; where they hold a front-end flag,
    also built into this release's model config, where it refuses renderer threads beside the processor cache (the
    "flags" releases' transformers cannot read the test model's config, and the plan gives them no front-end flag)."""
    from vllm.engine.arg_utils import EngineArgs

    plan = h200_plan(facts, version)
    argv = [model_dir, *facts.serve_args, "--max-model-len", str(facts.max_model_len), *plan.serve_args()]
    result: dict[str, Any] = {"args": plan.serve_args(), "ok": True, "error": None}
    try:
        parsed = parse_serve(argv)
        parsed.model = model_dir  # what `vllm serve` does with its positional model
        if "--renderer-num-workers" in plan.serve_args():
            EngineArgs.from_cli_args(parsed).create_model_config()
    except Exception as exc:
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}")
    return result


def check(script: str, model_dir: str) -> dict[str, Any]:
    import vllm

    facts = script_facts(script)
    serve_args = list(facts.serve_args)
    argv = [
        model_dir, *serve_args, "--max-model-len", str(facts.max_model_len), *MULTI_GPU,
        "--host", "127.0.0.1", "--port", str(PORT),
    ]  # fmt: skip
    try:
        parsed = vars(parse_serve(argv))
        serve = {"ok": True, "error": None}
    except (ParseError, ValueError, TypeError, SystemExit) as exc:
        parsed = {}
        serve = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    serve["refused"] = refused_flags(model_dir, argv[1:])
    serve["parsed"] = {key: repr(value) for key, value in parsed.items()}
    return {
        "vllm": vllm.__version__,
        "serve": serve,
        "engine": engine_check(serve_args, model_dir),
        "plan": plan_check(facts, model_dir, vllm.__version__),
    }


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1], sys.argv[2])))
