"""The machine a job runs on, as the plan sees it: the GPUs it may use and the CPU cores it may really run on. Read
once, before the plan is made; the plan itself (scale.py) is a pure function of it."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from .cpus import job_cpus


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi lists it: the id CUDA_VISIBLE_DEVICES names it by, its model and memory."""

    device: str
    name: str
    memory_mib: int


@dataclass(frozen=True)
class Machine:
    """The GPUs the job sees and the CPU cores it may use (cpus.py)."""

    gpus: tuple[Gpu, ...]
    cpus: int


def detect_machine() -> Machine:
    """The GPUs nvidia-smi reports, limited to CUDA_VISIBLE_DEVICES, and the CPU cores this job may use."""
    gpus = visible_gpus(listed_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    return Machine(gpus, job_cpus())


def listed_gpus() -> list[Gpu]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in listing.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3 and parts[2].isdigit():
            gpus.append(Gpu(parts[0], parts[1], int(parts[2])))
    return gpus


def visible_gpus(gpus: list[Gpu], visible: str | None) -> tuple[Gpu, ...]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves, under the ids it names them by (an index each, or a UUID, which is
    taken to be a GPU like the first one listed)."""
    if visible is None or not gpus:
        return tuple(gpus)
    by_index = {gpu.device: gpu for gpu in gpus}
    chosen = []
    for device in (part.strip() for part in visible.split(",")):
        if device:
            like = by_index.get(device, gpus[0])
            chosen.append(Gpu(device, like.name, like.memory_mib))
    return tuple(chosen)
