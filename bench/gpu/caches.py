"""The machine's own compile and kernel caches: how many files each holds (which one a start fills tells what it
compiled) and the wipe an arms file asks for, so the arm after it starts as a new job does (from --engine-cache's
archive alone)."""

from __future__ import annotations

import getpass
import os
import shutil
from pathlib import Path


def inductor() -> Path:
    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or f"/tmp/torchinductor_{getpass.getuser()}")


def counted() -> list[Path]:
    home = Path.home()
    return [home / ".triton" / "cache", home / ".cache" / "vllm" / "torch_compile_cache", inductor()]


def census() -> str:
    return " ".join(f"{folder}={sum(len(files) for _, _, files in os.walk(folder))}" for folder in counted())


def wipe() -> None:
    home = Path.home()
    for folder in (
        home / ".triton",
        home / ".cache" / "vllm",
        home / ".cache" / "flashinfer",
        home / ".nv",
        inductor(),
    ):
        shutil.rmtree(folder, ignore_errors=True)
