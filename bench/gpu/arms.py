"""An arms file (bench/gpu/arms/*.toml) read into typed records: what bench.py runs, in the order written.

    [bench]                       # what every arm of the file shares (all optional)
    name = "h200-efficiency"      # the results file's name (default: the file's stem)
    pages = 3072                  # pages in the dataset every arm reads (make_pages.py)
    max_tokens = 800              # output tokens per page (ignore_eos), unless an arm or run says otherwise
    max_model_len = 8192
    budget_s = 3000               # seconds the whole file may take; later arms get what is left
    arm_timeout_s = 600           # at most this long per arm
    min_left_s = 60               # an arm starts only with this many seconds of the budget left
    reference = "base-a"          # the run (arm-run) whose texts every other run is compared with (same_pages.py)

    [[arm]]                       # a recipe that starts its own engine (or runs it in-process: offline = true)
    name = "lighton"
    recipe = "lighton-ocr3-saturate.py"
    shape = "qwen3_5"             # qwen2_5_vl (Nanonets-OCR2-3B) or qwen3_5 (LightOnOCR-3, OvisOCR2)
    serve_flags = []              # added to the recipe's own `vllm serve` flags (--extra-serve-args)
    recipe_flags = ["--no-canary"]
    pages = 512                   # --max-samples (default: every page)
    env = { VLLM_WORKER_MULTIPROC_METHOD = "fork" }   # added to the recipe's environment, which its engines inherit

    [[arm]]
    kind = "wipe"                 # removes the machine's compile caches, as a new job finds them

    [[arm]]                       # `vllm serve` started by hand, fed by hand_driver.py (the reference client)
    kind = "hand"
    name = "hand"
    serve_flags = ["--api-server-count", "4"]
    concurrency = 256

    [[arm]]                       # replicas started by hand, each run fed through a recipe's --server URL,...
    kind = "replicas"
    name = "mps3"
    replicas = 3
    mps = true                    # under a CUDA MPS daemon (default: as the recipe's plan: where replicas share a GPU)
    plan = true                   # each replica as the recipe's --plan starts it (--replicas N), serve_flags over it
    start = "together"            # or "one_by_one": each once the one before is healthy
    runs = [{name = "r3", pages = 1024, use = 3}, {name = "vp", pages = 1024, use = 3, tokens = 1}]
    # a run with pin = true: each engine core's step loop on a CPU of its own, the rest elsewhere (pinning.py)
    torch_profile = {run = "r3", at_s = 40, seconds = 3}   # vLLM's torch profiler on replica 1 during run r3
    py_spy_flags = ["--idle", "--gil"]                     # with --py-spy: also idle samples, GIL holders only
    importtime = true             # each Python process of the replicas writes its own -X importtime file
    spy_start_s = 110             # with --py-spy: py-spy follows replica 1's start (--subprocesses --idle)
    env = { VLLM_WORKER_MULTIPROC_METHOD = "fork" }   # added to each replica's environment (the plan's own over it)

`torch_profile` gives every replica `--profiler-config` (traces under WORK/torch-profile/ARM, which stay on the
machine) and VLLM_CUSTOM_SCOPES_FOR_PROFILING=1, POSTs /start_profile to replica 1 `at_s` seconds after the run
starts and /stop_profile `seconds` later (torch_profile.py), and reads each trace with trace_summary.py.

Flags are lists of words, one list item per shell word. Every key has one meaning; a key the kind does not know is
refused, so a typo cannot silently measure the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import tomllib

SHAPES = ("qwen2_5_vl", "qwen3_5")
# Flags of the bench, not engine settings: random weights need --no-canary and --max-samples picks the pages.
BENCH_FLAGS = ("--no-canary",)


class ArmsError(ValueError):
    """The arms file is not as bench/gpu/arms.py describes; the message names the arm and the fix."""


@dataclass(frozen=True)
class Bench:
    name: str
    pages: int = 192
    max_tokens: int = 800
    max_model_len: int = 8192
    budget_s: int = 570
    arm_timeout_s: int = 330
    min_left_s: int = 60
    reference: str | None = None


@dataclass(frozen=True)
class RecipeArm:
    name: str
    recipe: str
    shape: str = "qwen2_5_vl"
    serve_flags: tuple[str, ...] = ()
    recipe_flags: tuple[str, ...] = ()
    pages: int | None = None
    tokens: int | None = None
    offline: bool = False
    env: tuple[tuple[str, str], ...] = ()
    kind: str = "recipe"

    @property
    def defaults(self) -> bool:
        """Whether the arm ran the recipe's own engine settings (nothing but the bench's flags added)."""
        return not self.serve_flags and not self.env and all(flag in BENCH_FLAGS for flag in self.recipe_flags)


@dataclass(frozen=True)
class HandArm:
    name: str
    shape: str = "qwen2_5_vl"
    serve_flags: tuple[str, ...] = ()
    concurrency: int = 256
    pages: int | None = None
    tokens: int | None = None
    kind: str = "hand"


@dataclass(frozen=True)
class Run:
    name: str
    pages: int
    use: int
    tokens: int | None = None
    pin: bool = False


@dataclass(frozen=True)
class TorchProfile:
    """A torch-profiler window on replica 1 during one run of a replicas arm."""

    run: str
    at_s: float = 40.0
    seconds: float = 3.0


PY_SPY_FLAGS = ("--idle", "--gil")


@dataclass(frozen=True)
class ReplicasArm:
    name: str
    replicas: int
    runs: tuple[Run, ...]
    shape: str = "qwen3_5"
    recipe: str = "lighton-ocr3-saturate.py"
    serve_flags: tuple[str, ...] = ()
    plan: bool = True
    mps: bool | None = None
    start: str = "together"
    torch_profile: TorchProfile | None = None
    py_spy_flags: tuple[str, ...] = ()
    importtime: bool = False
    spy_start_s: int = 0
    env: tuple[tuple[str, str], ...] = ()
    kind: str = "replicas"


@dataclass(frozen=True)
class Wipe:
    name: str = "wipe"
    kind: str = "wipe"


Arm = RecipeArm | HandArm | ReplicasArm | Wipe
KINDS = {"recipe": RecipeArm, "hand": HandArm, "replicas": ReplicasArm, "wipe": Wipe}


@dataclass(frozen=True)
class ArmsFile:
    path: Path
    bench: Bench
    arms: tuple[Arm, ...] = field(default_factory=tuple)

    @property
    def shapes(self) -> set[str]:
        return {arm.shape for arm in self.arms if not isinstance(arm, Wipe)}


def build(record: type, where: str, table: dict, **given: object):
    """A record from a TOML table, refusing keys it does not have and lists where words are wanted."""
    known = {f.name for f in fields(record)}
    unknown = set(table) - known
    if unknown:
        raise ArmsError(f"{where}: unknown key(s) {sorted(unknown)}; the keys are {sorted(known - {'kind'})}")
    values = {key: tuple(value) if isinstance(value, list) else value for key, value in table.items()}
    if "env" in values:
        values["env"] = environment(values["env"], where)
    for key in ("serve_flags", "recipe_flags"):
        if key in values and not all(isinstance(word, str) for word in values[key]):
            raise ArmsError(f'{where}: {key} is a list of words, e.g. ["--api-server-count", "4"]')
    try:
        return record(**values, **given)
    except TypeError as exc:
        raise ArmsError(f"{where}: {exc} (bench/gpu/arms.py lists the keys of each kind)") from None


def environment(table: object, where: str) -> tuple[tuple[str, str], ...]:
    """An arm's `env`: names to string values, kept in the order written."""
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ArmsError(f'{where}: env is a table of strings, e.g. {{ VLLM_WORKER_MULTIPROC_METHOD = "fork" }}')
    return tuple(table.items())


def read_arm(table: dict, index: int) -> Arm:
    kind = table.get("kind", "recipe")
    where = f"arm {index + 1} ({table.get('name', kind)})"
    if kind not in KINDS:
        raise ArmsError(f"{where}: kind {kind!r} is not one of {sorted(KINDS)}")
    if kind == "replicas":
        runs = tuple(build(Run, f"{where}, run {i + 1}", run) for i, run in enumerate(table.get("runs", [])))
        given: dict[str, object] = {"runs": runs}
        if "torch_profile" in table:
            if not isinstance(table["torch_profile"], dict):
                raise ArmsError(f'{where}: torch_profile is a table, e.g. {{run = "r3", at_s = 40, seconds = 3}}')
            given["torch_profile"] = build(TorchProfile, f"{where}, torch_profile", table["torch_profile"])
        rest = {k: v for k, v in table.items() if k not in given}
        arm = build(ReplicasArm, where, rest, **given)
        check_replicas(arm, where)
        return arm
    arm = build(KINDS[kind], where, table)
    if getattr(arm, "shape", SHAPES[0]) not in SHAPES:
        raise ArmsError(f"{where}: shape {arm.shape!r} is not one of {SHAPES}")
    return arm


def check_replicas(arm: ReplicasArm, where: str) -> None:
    if arm.shape not in SHAPES:
        raise ArmsError(f"{where}: shape {arm.shape!r} is not one of {SHAPES}")
    if arm.start not in ("together", "one_by_one"):
        raise ArmsError(f'{where}: start is "together" or "one_by_one", not {arm.start!r}')
    if not arm.runs:
        raise ArmsError(f'{where}: a replicas arm needs runs, e.g. runs = [{{name = "r3", pages = 1024, use = 3}}]')
    for run in arm.runs:
        if not 1 <= run.use <= arm.replicas:
            raise ArmsError(f"{where}, run {run.name}: use is 1 to {arm.replicas} (the replicas started)")
    names = [run.name for run in arm.runs]
    if arm.torch_profile and arm.torch_profile.run not in names:
        raise ArmsError(f"{where}: torch_profile's run {arm.torch_profile.run!r} is not one of the runs {names}")
    if not set(arm.py_spy_flags) <= set(PY_SPY_FLAGS):
        raise ArmsError(f"{where}: py_spy_flags are some of {list(PY_SPY_FLAGS)}, not {list(arm.py_spy_flags)}")


def load(path: Path) -> ArmsFile:
    """The arms file at `path`, checked whole before anything runs."""
    document = tomllib.loads(path.read_text())
    unknown = set(document) - {"bench", "arm"}
    if unknown:
        raise ArmsError(f"{path}: unknown table(s) {sorted(unknown)}; the file has [bench] and [[arm]] tables")
    bench = build(Bench, f"{path} [bench]", {"name": path.stem} | document.get("bench", {}))
    arms = tuple(read_arm(table, index) for index, table in enumerate(document.get("arm", [])))
    if not arms:
        raise ArmsError(f"{path}: no [[arm]] table; add at least one")
    names = [arm.name for arm in arms if not isinstance(arm, Wipe)]
    twice = {name for name in names if names.count(name) > 1}
    if twice:
        raise ArmsError(f"{path}: arm names {sorted(twice)} appear twice; each arm's result is keyed by its name")
    return ArmsFile(path, bench, arms)
