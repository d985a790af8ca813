"""How a spawned server uses the machine: one engine per GPU, and enough API servers to keep them fed.

On fast GPUs a single API server cannot decode and preprocess page images as fast as the engine consumes them
(the seed measured +9-16% with 4 API servers on A100/RTX PRO 6000/A10G-large), so fast cards get more of them,
bounded by CPU cores; several GPUs get vLLM's own data parallelism behind one endpoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

FAST_GPUS = ("H100", "H200", "H20", "GH200", "B200", "B100", "A100", "L40S", "RTX PRO 6000")
CORES_PER_API_SERVER = 4
MAX_API_SERVERS = 4


@dataclass(frozen=True)
class ScalePlan:
    gpus: int
    gpu_name: str
    data_parallel: int
    api_servers: int

    def serve_args(self) -> list[str]:
        args = []
        if self.data_parallel > 1:
            args += ["--data-parallel-size", str(self.data_parallel)]
        if self.api_servers > 1:
            args += ["--api-server-count", str(self.api_servers)]
        return args

    def describe(self) -> str:
        gpus = f"{self.gpus} x {self.gpu_name}" if self.gpus else "no GPU"
        return f"{gpus}: data parallel {self.data_parallel}, {self.api_servers} API server(s)"


def detect_gpus() -> tuple[int, str]:
    """GPU count and model as nvidia-smi reports them, limited by CUDA_VISIBLE_DEVICES."""
    if shutil.which("nvidia-smi") is None:
        return 0, ""
    try:
        listing = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0, ""
    names = [line.strip() for line in listing.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        names = names[: len([device for device in visible.split(",") if device.strip()])]
    return len(names), names[0] if names else ""


def plan_scale(
    gpus: int, gpu_name: str, cpus: int, api_servers: int | None = None, data_parallel: int | None = None
) -> ScalePlan:
    """Flags override; otherwise one engine per GPU and, on fast GPUs, an API server per 4 cores (up to 4)."""
    parallel = data_parallel or max(1, gpus)
    if api_servers is None:
        fast = any(name.lower() in gpu_name.lower() for name in FAST_GPUS)
        per_cores = max(1, min(MAX_API_SERVERS, cpus // CORES_PER_API_SERVER))
        api_servers = max(parallel, per_cores if fast else 1)
    return ScalePlan(gpus, gpu_name, parallel, api_servers)
