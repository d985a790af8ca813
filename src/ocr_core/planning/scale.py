"""How a spawned fleet uses the machine: how many independent `vllm serve` replicas per GPU, and their share of it.

One `vllm serve` cannot feed a fast GPU with a small model: its API server processes share one listening socket,
the kernel hands most connections to one of them, and that one process (image decoding and the HF processor) sets
the pace. On one H200 with the 0.8B Qwen3.5 shape, one server with 4 API servers gave 6.96 pages/s with the GPU 37 %
busy; three independent servers on the same GPU, each on its own port, gave 13.14 pages/s with the GPU 81 % busy
(2026-12-01). Data parallelism behind one endpoint has the same ceiling (two H200s: 0.996x one). So the plan puts
independent replicas on each GPU, as many as the GPU can use (its compute against the model's size), its memory
holds and the CPU cores can feed; a large model or a slow card gets one replica, as before.

Each replica's front end (API servers, renderer threads, the step size: frontend.py) is sized from the cores the
job really has (cpus.py: its affinity cut by its cgroup quota), and the replicas from what those cores feed: each
costs its engine core and its front end, beside the driver's core.

Replicas start together where that is safe. Each engine sizes its KV cache by profiling the GPU's free memory, so
two engines profiling one GPU at once misjudge it (one died with "No available memory for the cache blocks" on an
H200): replicas sharing a GPU therefore get their KV cache in bytes (`--kv-cache-memory-bytes`, vLLM 0.11 and
later), which skips that measurement, and replicas on different GPUs never share one. Only a shared GPU under an
older vLLM still starts its replicas one after another.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import CommandError
from .frontend import (
    DRIVER_CORES,
    ENGINE_CORES,
    LARGE_BATCH_EXTRA_GIB,
    LARGE_GPU_BATCHED_TOKENS,
    Engine,
    FrontEnd,
    plan_front_end,
)
from .machine import Gpu, Machine
from .serve_flags import flag_value

FAST_GPUS = ("H100", "H200", "H20", "GH200", "B200", "B100", "A100", "L40S", "RTX PRO 6000")
# Dense bf16 TFLOP/s by the datasheets: what the GPU can compute per page, not what the front end delivers.
GPU_TFLOPS = {
    "GH200": 989,
    "H200": 989,
    "H100": 989,
    "H20": 148,
    "B200": 2250,
    "B100": 1750,
    "A100": 312,
    "L40S": 362,
    "RTX PRO 6000": 500,
    "A10G": 70,
    "L4": 121,
    "T4": 65,
}
# Pages/s a GPU of 1 TFLOP/s gives a 1B-parameter model (1540 x 2000 pages, 800 output tokens): the 0.8B shape ran
# at 13.14 pages/s on an H200 with the GPU 81 % busy, so about 16.2 pages/s busy all the time.
PAGES_S_PER_TFLOP_PER_B = 16.2 * 0.8 / 989
# Pages/s one replica's front end delivers when its replicas share the host's cores (13.14 / 3, 6.96 alone).
FRONT_END_PAGES_S = 5.0
# A replica needs its weights (bf16) plus activations, CUDA graphs, the vision encoder's profile and some KV cache.
REPLICA_OVERHEAD_GIB = 8.0
# The least a replica needs beside the driver: its engine core and one API server process.
MIN_REPLICA_CORES = ENGINE_CORES + 1.0
VLLM_MEMORY_UTILIZATION = 0.9
# Replicas sharing a GPU each take a little less than their even share: each has its own CUDA context.
SHARED_GPU_HEADROOM = 0.98
# The first vLLM release with --kv-cache-memory-bytes (vllm/config/cache.py, kv_cache_memory_bytes).
KV_CACHE_BYTES_SINCE = (0, 11, 0)
# What a replica holds beside its KV cache and its weights: CUDA context, activations of the profile run (vision
# encoder with its largest image, one batch of max_num_batched_tokens), CUDA graphs and the sampler's buffers.
NON_KV_GIB = 6.0
# vLLM's step for `vllm serve` (its default --max-num-batched-tokens), whose activations NON_KV_GIB holds.
SERVE_BATCHED_TOKENS = 8192
GIB = 1024**3
# Memory that the plan turns into flags is counted in whole GiB, rounded down after a quarter GiB of slack: identical
# jobs on nodes of one kind see a few MiB apart (memory.total 143771 and 143765 MiB on two H200s), and the engine
# cache's key holds the flags, so a node seeing a little less would start cold. The slack keeps a size of a whole
# number of GiB (an A100's 81920 MiB) at it.
STEADY_SLACK_BYTES = GIB // 4
# vLLM's larger scheduler defaults apply from this much GPU memory (70 GiB).
LARGE_GPU_MIB = 70 * 1024


@dataclass(frozen=True)
class ScalePlan:
    """The plan's choices and why: replicas per GPU, each one's front end and memory share, data parallel size."""

    machine: Machine
    per_gpu: int
    front_end: FrontEnd
    data_parallel: int
    memory_share: float | None
    why: str
    kv_cache_bytes: int | None = None

    @property
    def concurrent_start(self) -> bool:
        """Whether the replicas may start together: each on its own GPU, or each with its KV cache in bytes."""
        return self.data_parallel == 1 and (self.per_gpu == 1 or self.kv_cache_bytes is not None)

    @property
    def replicas(self) -> int:
        return self.per_gpu * max(1, len(self.machine.gpus)) if self.data_parallel == 1 else 1

    def serve_args(self) -> list[str]:
        """The flags the plan gives every replica beside the model's own (the engine plan puts the user's over them)."""
        args = []
        if self.data_parallel > 1:
            args += ["--data-parallel-size", str(self.data_parallel)]
        args += self.front_end.serve_args()
        if self.memory_share is not None:
            args += ["--gpu-memory-utilization", f"{self.memory_share:.2f}"]
        if self.kv_cache_bytes is not None:
            args += ["--kv-cache-memory-bytes", str(self.kv_cache_bytes)]
        return args

    def describe(self) -> str:
        gpus = self.machine.gpus
        where = f"{len(gpus)} x {gpus[0].name}" if gpus else "no GPU"
        if self.data_parallel > 1:
            shape = f"one server, data parallel {self.data_parallel}"
        else:
            shape = f"{self.replicas} replica(s)" + (f", {self.per_gpu} per GPU" if gpus else "")
        share = f", {self.memory_share:.2f} of its GPU's memory each" if self.memory_share is not None else ""
        servers = self.front_end.describe()
        kv = f", {self.kv_cache_bytes / GIB:.1f} GiB of KV cache each" if self.kv_cache_bytes is not None else ""
        start = ", started together" if self.concurrent_start and self.replicas > 1 else ""
        return f"{where}, {self.machine.cpus} CPU cores: {shape}, {servers}{share}{kv}{start} ({self.why})"


def gpu_kind(name: str) -> str | None:
    """The GPU table's name for a GPU ("NVIDIA H200" is "H200"): the longest key in its name, so that "H200" is
    not read as "H20"; None for a GPU the table lacks."""
    matches = [key for key in GPU_TFLOPS if key.lower() in name.lower()]
    return max(matches, key=len) if matches else None


def gpu_tflops(name: str) -> float | None:
    kind = gpu_kind(name)
    return GPU_TFLOPS[kind] if kind is not None else None


def max_num_seqs(serve_args: Sequence[str], gpu: Gpu | None) -> int:
    """How many sequences one engine's scheduler runs at once: --max-num-seqs where the flags give it, else
    vLLM's default for `vllm serve` on this GPU (EngineArgs._set_default_args: 1024 on cards of 70 GiB or more
    other than the A100, 256 on the others and where the GPU is unknown)."""
    value = flag_value(serve_args, "--max-num-seqs")
    if value is not None:
        return int(value)
    large = gpu is not None and gpu.memory_mib >= LARGE_GPU_MIB and "a100" not in gpu.name.lower()
    return 1024 if large else 256


def memory_utilization(serve_args: Sequence[str]) -> float | None:
    """The model card's --gpu-memory-utilization, which the replicas on one GPU share."""
    value = flag_value(serve_args, "--gpu-memory-utilization")
    return float(value) if value is not None else None


def plan_scale(
    machine: Machine,
    params_b: float | None,
    memory_utilization: float | None = None,
    replicas: int | None = None,
    api_servers: int | None = None,
    data_parallel: int | None = None,
    vllm_version: str | None = None,
    model_flags: Sequence[str] = (),
) -> ScalePlan:
    """Flags override; otherwise replicas per GPU from the GPU's compute against the model's size (a rough
    estimate, calibrated on the H200), bounded by its memory and the CPU cores, and each replica's front end from
    the cores left to it (frontend.py) under the vLLM that runs (`vllm_version`) with the model's flags
    (`model_flags`). Replicas sharing a GPU under a vLLM that takes their KV cache in bytes get it, so that they
    can start together."""
    if data_parallel is not None and data_parallel > 1:
        front_end = FrontEnd(api_servers or data_parallel)
        return ScalePlan(machine, 1, front_end, data_parallel, None, "--data-parallel-size")
    gpus = max(1, len(machine.gpus))
    per_gpu, why = replicas_per_gpu(machine, params_b, memory_utilization)
    if replicas is not None:
        if machine.gpus and replicas % gpus:
            raise CommandError(
                f"--replicas {replicas} does not split evenly over {gpus} GPUs: pass a multiple of {gpus}"
            )
        per_gpu, why = (replicas // gpus if machine.gpus else replicas), "--replicas"
        if machine.gpus and per_gpu > (most := replicas_that_fit(machine.gpus[0], params_b, memory_utilization)):
            raise CommandError(
                f"--replicas {replicas} does not fit: each replica needs its weights and "
                f"{REPLICA_OVERHEAD_GIB:g} GiB beside them, so one {machine.gpus[0].name} holds {most}; pass "
                f"--replicas {most * gpus} or fewer (or leave it out for the machine plan)"
            )
    count = per_gpu * gpus
    engine = replica_engine(machine, vllm_version, model_flags, params_b)
    front_end = plan_front_end(front_end_cores(machine.cpus, count), engine, api_servers)
    share = None
    kv_bytes = None
    if per_gpu > 1 and machine.gpus:
        share = memory_share(per_gpu, memory_utilization)
        if takes_kv_cache_bytes(vllm_version):
            kv_bytes = replica_kv_bytes(machine.gpus[0], share, params_b, step_reserve_gib(front_end, model_flags))
    return ScalePlan(machine, per_gpu, front_end, 1, share, why, kv_bytes)


def step_reserve_gib(front_end: FrontEnd, flags: Sequence[str]) -> float:
    """What a replica's steps hold beside NON_KV_GIB (which covers vLLM's default step): LARGE_BATCH_EXTRA_GIB for
    the plan's 32768-token step, in proportion to the tokens above the default, for the step that runs, whoever
    set it. A step given in `flags` (the user's --extra-serve-args, a recipe's own) replaces the plan's, and the
    plan then gives none: reading only the plan's, a user's 32768 or 65536 left no reserve, and the KV cache took
    the memory its activations need. Above 32768 the figure is an extrapolation (activations grow with the
    step's tokens); a value not in plain digits (`32k`) counts as the plan's step."""
    given = flag_value(flags, "--max-num-batched-tokens")
    step = front_end.batched_tokens or SERVE_BATCHED_TOKENS
    if given is not None:
        step = int(given) if given.isdigit() else LARGE_GPU_BATCHED_TOKENS
    extra_tokens = max(0, step - SERVE_BATCHED_TOKENS)
    return LARGE_BATCH_EXTRA_GIB * extra_tokens / (LARGE_GPU_BATCHED_TOKENS - SERVE_BATCHED_TOKENS)


def front_end_cores(cpus: int, replicas: int) -> float:
    """The cores one replica's API servers may use: the job's, less the driver's and every engine core's, shared."""
    return max(1.0, (cpus - DRIVER_CORES - replicas * ENGINE_CORES) / replicas)


def replica_engine(
    machine: Machine, vllm_version: str | None, model_flags: Sequence[str], params_b: float | None
) -> Engine:
    """What a replica's front end depends on beside its cores: the vLLM, the model's flags and size, the GPU."""
    gpu = machine.gpus[0] if machine.gpus else None
    return Engine(
        vllm_version=vllm_version,
        model_flags=tuple(model_flags),
        fast_gpu=gpu is not None and fast_gpu(gpu.name),
        large_gpu=gpu is not None and gpu.memory_mib >= LARGE_GPU_MIB,
        params_b=params_b,
    )


def memory_share(per_gpu: int, memory_utilization: float | None) -> float:
    """Each replica's --gpu-memory-utilization: the card's (or vLLM's) share of the GPU split between them."""
    base = memory_utilization or VLLM_MEMORY_UTILIZATION
    return math.floor(100 * base * SHARED_GPU_HEADROOM / per_gpu) / 100


def replicas_that_fit(gpu: Gpu, params_b: float | None, memory_utilization: float | None) -> int:
    """The most replicas whose shares of one GPU each still hold a replica's weights and what it needs beside them
    (an unknown size counts as no weights); at least one, which takes the card's share whole."""
    needed_gib = 2 * (params_b or 0.0) + REPLICA_OVERHEAD_GIB
    count = 1
    while gpu.memory_mib / 1024 * memory_share(count + 1, memory_utilization) >= needed_gib:
        count += 1
    return count


def takes_kv_cache_bytes(vllm_version: str | None) -> bool:
    """Whether this vLLM release has --kv-cache-memory-bytes; an unknown or unparsable version is taken as not."""
    try:
        release = tuple(int(part) for part in (vllm_version or "").split(".")[:3])
    except ValueError:
        return False
    return bool(release) and release >= KV_CACHE_BYTES_SINCE


def replica_kv_bytes(gpu: Gpu, share: float, params_b: float | None, extra_gib: float = 0.0) -> int | None:
    """The KV cache that leaves a replica inside its share of the GPU: the share, less its bf16 weights and what
    an engine holds beside them (NON_KV_GIB, and `extra_gib` for larger steps); None where nothing would be left,
    so that the plan falls back to a start one after another."""
    weights_gib = 2 * (params_b or 0.0)
    kv_gib = steady_gib(gpu.memory_mib * 1024**2) * share - weights_gib - NON_KV_GIB - extra_gib
    return int(kv_gib * GIB) if kv_gib >= 1 else None


def steady_gib(size_bytes: int) -> int:
    """A memory size in whole GiB that a few MiB more or less leave alone (STEADY_SLACK_BYTES)."""
    return (size_bytes + STEADY_SLACK_BYTES) // GIB


def fast_gpu(gpu_name: str) -> bool:
    """A card on which one API server cannot prepare pages as fast as the engine takes them (the seed measured
    +9-16 % with 4 API servers on A100, RTX PRO 6000 and A10G-large)."""
    return any(name.lower() in gpu_name.lower() for name in FAST_GPUS)


def replicas_per_gpu(machine: Machine, params_b: float | None, memory_utilization: float | None) -> tuple[int, str]:
    """The smallest of what the GPU's compute can use, what its memory holds and what the cores can feed."""
    if not machine.gpus:
        return 1, "no GPU: one server"
    gpu = machine.gpus[0]
    tflops = gpu_tflops(gpu.name)
    if tflops is None or params_b is None:
        return 1, f"no figures for {gpu.name if tflops is None else 'this model'}: one replica per GPU"
    gpu_pages_s = PAGES_S_PER_TFLOP_PER_B * tflops / params_b
    by_compute = max(1, round(gpu_pages_s / FRONT_END_PAGES_S))
    usable_gib = gpu.memory_mib / 1024 * (memory_utilization or VLLM_MEMORY_UTILIZATION)
    by_memory = max(1, int(usable_gib // (2 * params_b + REPLICA_OVERHEAD_GIB)))
    by_cores = max(1, math.floor((machine.cpus - DRIVER_CORES) / MIN_REPLICA_CORES / len(machine.gpus)))
    count = min(by_compute, by_memory, by_cores)
    limits = {"compute": by_compute, "memory": by_memory, "CPU cores": by_cores}
    bound = min(limits, key=lambda name: (limits[name], list(limits).index(name)))
    return count, (
        f"about {gpu_pages_s:.0f} pages/s of GPU for a {params_b:g}B model against {FRONT_END_PAGES_S:g} per front "
        f"end; {bound} allows {limits[bound]}"
    )
