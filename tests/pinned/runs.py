"""What the pinned tier's end-to-end tests share: the recipes whose pinned vLLM runs here, small pages, a recipe run
on its pinned venv and readers of what the run left (the spawned argv, the progress records, the output dataset)."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import pyarrow.parquet as pq
from PIL import Image

from ocr_core.facts import ModelFacts
from ocr_core.store.layout import PROGRESS_ROOT
from tests.testbed.env import REPO_ROOT
from tests.testbed.pinned import PinnedVllm
from tools.recipes import facts_of

TEST_SERVE_ARGS = ["--load-format", "dummy", "--enforce-eager"]
MAX_MODEL_LEN = 1024
MAX_TOKENS = 24
# The random model never emits its end token, so every page runs to --max-tokens: --ignore-eos says so. Its
# answers repeat one token (a random Qwen3.5 writes '</think>' over and over), which the canary rightly calls
# degenerate: the tier checks flags and kwargs on the pinned release, not text, so the canary is off here.
COMMON = [
    "--max-model-len", str(MAX_MODEL_LEN), "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--ignore-eos",
    "--no-canary",
]  # fmt: skip
RUN_TIMEOUT_S = 900


@dataclass(frozen=True)
class Twins:
    module: str
    server: str
    offline: str

    @property
    def facts(self) -> ModelFacts:
        return facts_of(self.offline)

    @property
    def vllm(self) -> PinnedVllm:
        return PinnedVllm(self.facts.vllm_pin)


TWINS = [
    Twins("lighton_ocr3", "lighton-ocr3-saturate.py", "lighton-ocr3.py"),
    Twins("ovis_ocr2", "ovis-ocr2-server.py", "ovis-ocr2.py"),
]


def extra_serve_args(*flags: str) -> str:
    """--extra-serve-args with the tier's own flags (no weights to load, no compilation) and `flags` after them."""
    return f"--extra-serve-args={shlex.join([*TEST_SERVE_ARGS, *flags])}"


def small_pages(folder: Path, sides: Sequence[tuple[int, int]]) -> Path:
    """Sample pages shrunk to `sides` (a few hundred pixels: the vision tower's cost grows with the patch count),
    saved as a dataset of rows p0, p1, ..."""
    sources = sorted((REPO_ROOT / "samples" / "pages").glob("*.png"))
    pages = []
    for index, size in enumerate(sides):
        path = folder / f"page-{index}.png"
        Image.open(sources[index % len(sources)]).convert("RGB").resize(size).save(path)
        pages.append(str(path))
    features = datasets.Features({"page_id": datasets.Value("string"), "image": datasets.Image()})
    rows = {"page_id": [f"p{index}" for index in range(len(pages))], "image": pages}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(folder / "dataset"))
    return folder / "dataset"


def run(
    twins: Twins, script: str, *args: str, tmp: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """A recipe with the pinned venv's python and `vllm` (its core: the session's wheel, tests/pinned/conftest.py)
    and `env` beside the tier's; TMPDIR (`tmp`, a short path: vLLM puts its ZMQ sockets there, and a socket path is at
    most 107 bytes) keeps its server log and sockets apart from other tests'."""
    env = {**twins.vllm.env(), **(env or {}), "TMPDIR": str(tmp)}
    command = [str(twins.vllm.python), str(REPO_ROOT / script), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)


def spawned_argv(stderr: str) -> list[str]:
    """The `vllm serve` command line the recipe printed as it started the server."""
    line = next(line for line in stderr.splitlines() if "starting: vllm serve" in line)
    return shlex.split(line.split("starting: ", 1)[1])


def results(out: Path) -> dict[str, dict]:
    """Each row's newest record in the run's progress parts (its tokens as the engine counted them)."""
    rows: dict[str, dict] = {}
    for path in sorted((out / PROGRESS_ROOT).rglob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            if row["row_id"] not in rows or row["recorded_at"] > rows[row["row_id"]]["recorded_at"]:
                rows[row["row_id"]] = row
    return rows


def load(folder: Path) -> datasets.Dataset:
    return datasets.load_dataset(str(folder), split="train", cache_dir=str(folder) + ".cache")
