"""The command lines of a bench arm, from its record and where the kit keeps things: what bench.py runs and what
`bench.py --dry-run` prints, built by the same functions so the two cannot differ.

Every arm reads the same pages with `ignore_eos`, a fixed `max_tokens` and temperature 0, and loads its model folder
(real shapes, no weights: tools/dummy_models) with `--load-format dummy`.
"""

from __future__ import annotations

import ast
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import profiling
from arms import Bench, HandArm, RecipeArm, ReplicasArm, Run
from ports import HAND_PORT, RECIPE_PORT

# Serve flags each shape needs on the bench's wheels. A hand-started server gets its model card's flags; a recipe
# starts its own server with those, so it needs only what the bench's wheels need: the Qwen3.5 shape dies on its
# first prefill without the triton GDN prefill (no flashinfer in the lean wheels).
RECIPE_SERVE = {"qwen2_5_vl": (), "qwen3_5": ("--gdn-prefill-backend", "triton")}
# Whose model card's flags a hand-started server of each shape gets: src/ocr_models states them once.
CARD_MODEL = {"qwen2_5_vl": "nanonets_ocr2", "qwen3_5": "lighton_ocr3"}


def card_serve(shape: str) -> tuple[str, ...]:
    """The serve flags of the model card the shape stands in for, as its recipe gives them: read from the card's
    source, not imported, since importing it imports the core and its dependencies (`datasets`), which the device's
    image lacks while bench.py runs on it."""
    source = Path(__file__).resolve().parents[2] / "src" / "ocr_models" / f"{CARD_MODEL[shape]}.py"
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.keyword) and node.arg == "serve_args":
            return tuple(ast.literal_eval(node.value))
    return ()  # a card without serve_args serves with vLLM's defaults


@dataclass(frozen=True)
class Paths:
    """Where the kit keeps what an arm's command names."""

    python: str
    root: Path
    pages: Path
    models: Path
    outputs: Path
    logs: Path

    def model(self, shape: str) -> Path:
        return self.models / shape

    def recipe(self, name: str) -> str:
        return str(self.root / name)

    def torch_traces(self, arm: str) -> Path:
        """Where a replicas arm's torch-profiler traces go: under --work, beside the logs, not among them (a trace
        is hundreds of MB)."""
        return self.logs.parent / "torch-profile" / arm


def tokens_of(bench: Bench, tokens: int | None) -> int:
    return tokens if tokens is not None else bench.max_tokens


def pages_of(bench: Bench, pages: int | None) -> int:
    """An arm's pages, at most the dataset's (a smaller --pages for a quick check caps every arm)."""
    return bench.pages if pages is None else min(pages, bench.pages)


def sampling(paths: Paths, bench: Bench, shape: str, tokens: int | None) -> list[str]:
    return [
        "--model",
        str(paths.model(shape)),
        "--max-model-len",
        str(bench.max_model_len),
        "--max-tokens",
        str(tokens_of(bench, tokens)),
        "--temperature",
        "0",
        "--ignore-eos",
    ]


def recipe_serve_flags(arm: RecipeArm) -> list[str]:
    return [*RECIPE_SERVE[arm.shape], *arm.serve_flags]


def recipe_env(base: Mapping[str, str], tmp: Path, arm: RecipeArm) -> dict[str, str]:
    """The recipe's environment, which its engines inherit: the bench's, a TMPDIR of the arm's own (where a spawned
    server's log lands), then the arm's `env` over both."""
    return {**base, "TMPDIR": str(tmp), **dict(arm.env)}


def recipe_command(paths: Paths, bench: Bench, arm: RecipeArm) -> list[str]:
    """The recipe on the pages; it spawns `vllm serve` (or runs vLLM in-process when offline) with its own flags,
    its machine plan, and the arm's serve flags on top."""
    command = [paths.python, paths.recipe(arm.recipe), str(paths.pages), str(paths.outputs / arm.name)]
    command += sampling(paths, bench, arm.shape, arm.tokens)
    if not arm.offline:
        command += ["--server", f"http://127.0.0.1:{RECIPE_PORT}"]
    command.append("--extra-serve-args=" + shlex.join(["--load-format", "dummy", *recipe_serve_flags(arm)]))
    if arm.pages is not None:
        command += ["--max-samples", str(pages_of(bench, arm.pages))]
    return command + list(arm.recipe_flags)


def serve_command(bench: Bench, model: Path, shape: str, flags: list[str]) -> list[str]:
    """`vllm serve` as the bench starts it by hand: the model card's flags, the bench's, then the arm's."""
    return [
        "vllm",
        "serve",
        str(model),
        *card_serve(shape),
        "--max-model-len",
        str(bench.max_model_len),
        "--load-format",
        "dummy",
        *flags,
    ]


def hand_command(paths: Paths, bench: Bench, arm: HandArm) -> list[str]:
    """hand_driver.py, which starts the server itself (so the arm's time counts its start) and feeds it."""
    model = paths.model(arm.shape)
    return [
        paths.python,
        str(Path(__file__).with_name("hand_driver.py")),
        str(paths.pages),
        "--server",
        f"http://127.0.0.1:{HAND_PORT}",
        "--model",
        str(model),
        "--concurrency",
        str(arm.concurrency),
        "--max-tokens",
        str(tokens_of(bench, arm.tokens)),
        "--temperature",
        "0",
        "--pages",
        str(pages_of(bench, arm.pages)),
        "--serve-log",
        str(paths.logs / f"{arm.name}-serve.log"),
        "--serve",
        *serve_command(bench, model, arm.shape, list(arm.serve_flags)),
    ]


def arm_serve_flags(paths: Paths, arm: ReplicasArm) -> list[str]:
    """The arm's own serve flags, and the profiler's when the arm has one."""
    profiler = profiling.serve_flags(paths.torch_traces(arm.name)) if arm.torch_profile else []
    return [*arm.serve_flags, *profiler]


def replica_command(paths: Paths, bench: Bench, arm: ReplicasArm) -> list[str]:
    """Each replica's `vllm serve` of an arm without the plan (`plan = false`): the model card's flags, the bench's
    and the arm's."""
    return serve_command(bench, paths.model(arm.shape), arm.shape, arm_serve_flags(paths, arm))


def plan_command(paths: Paths, bench: Bench, arm: ReplicasArm) -> list[str]:
    """The recipe's `--plan` for this arm's replicas: the recipe as shipped, with `--replicas N` and the bench's and
    the arm's serve flags as --extra-serve-args, so each replica starts with the exact argv and environment the
    recipe would start it with (its model card's flags, its machine plan on this machine and vLLM, the arm's flags
    over both)."""
    extra = shlex.join(["--load-format", "dummy", *arm_serve_flags(paths, arm)])
    return [
        paths.python,
        paths.recipe(arm.recipe),
        str(paths.pages),
        str(paths.outputs / arm.name),
        *sampling(paths, bench, arm.shape, None),
        "--replicas",
        str(arm.replicas),
        f"--extra-serve-args={extra}",
        "--plan",
    ]


def run_command(paths: Paths, bench: Bench, arm: ReplicasArm, run: Run, servers: str) -> list[str]:
    """One run of a replicas arm: the recipe's own pump and window over the replicas it is given."""
    return [
        paths.python,
        paths.recipe(arm.recipe),
        str(paths.pages),
        str(paths.outputs / f"{arm.name}-{run.name}"),
        *sampling(paths, bench, arm.shape, run.tokens),
        "--no-canary",
        "--server",
        servers,
        "--max-samples",
        str(pages_of(bench, run.pages)),
    ]
