"""How one replica's front end is sized: its API server processes, the renderer threads in each and its step size,
each only where the vLLM that runs parses the flag and where it paid on an H200.

Every API server process of a `vllm serve` decodes pages and runs the HF image processor on a pool of
`--renderer-num-workers` threads, one by default. With one thread per process one replica fed its engine 9.6
pages/s (1 output token, 1540 x 2000 pages, Qwen3.5-0.8B shape, H200, vLLM 0.26) while 384 pages waited and the
machine's 16 cores were three-quarters idle; 4 threads per process gave 19.5 (2026-12-02). A process with several
threads still holds the GIL between the native calls: the busiest one used 1.65 cores, so the plan counts each API
server as API_SERVER_CORES and adds processes, not threads, while cores remain. `--max-num-batched-tokens 32768`
lets a step take several pages' prefill: with 2 threads and the pixels through shared memory it lifted the
800-token rate of one replica from 5.7 to 10.0 pages/s (2026-12-02).

The pixel tensors (about 73 MB a page in float32) stay on vLLM's own path, its engine socket: `--mm-tensor-ipc
torch_shm` ran within the noise of it on an H200 (1.02x, one replica) and cost the API servers CPU, 0.222
core-seconds a page against 0.169 on 0.30's CPU build; on an H100 the plan's three replicas with the socket (and a
forked engine core) spent 0.167 and 0.304 in their API servers against 0.287-0.423 with torch_shm in the runs
beside them, at a rate inside the lease's noise (bench/results/h100-start-window-2026-12-06.json). It also needs
room in /dev/shm (a container's 64 MB fails requests) and refuses a forked engine core.

With this plan and the pixels through shared memory, on one H200 (16 cores: 3 replicas of 2 API servers x 2
threads), LightOnOCR-3 ran 13.99-16.82 pages/s and OvisOCR2 13.92 at 800 tokens
(bench/results/h200-frontend-2026-12-02.json, h200-late-2026-12-02.json). Over the sustained interval the tree used
11.2 of the 16 cores (API servers 0.63-1.47 each, engine cores 1.39-1.49 each) with the GPU 89-92 % busy; a third
API server per replica or a fourth replica moved the rate by 0-2 %. So the plan's core counts hold, and what bounds
these replicas is the GPU's busy time per page, not their front end.

Which release parses `--renderer-num-workers` was read from each pin's own parser in the pinned test tier
(tests/pinned): 0.22.1, 0.26.0 and 0.30.0 do, 0.17.1 and 0.10.2 do not. Before 0.30.0 vLLM refuses more than one
renderer thread while the multimodal processor cache is on (`--mm-processor-cache-gb` above 0, its default): the cache
is not thread-safe there. From 0.30.0 an API server runs the HF image processor on a single-thread executor of its own
(vllm/renderers/base.py, `_mm_executor`), and the renderer threads tokenise, detokenise and render the chat template: on
0.30's CPU build a second thread added 16 % to the API server's CPU a page and took no work off that executor, so the
plan gives 0.30 and later no renderer threads. The API server counts above, measured on 0.26, stand until a 0.30 engine
runs on a GPU machine. `--mm-processor-device` (0.30.0, the HF processor on the GPU) is not passed: it could not be
measured here (the H200 image's torch 2.11 cannot run 0.30.0), and an unmeasured flag does not go into a paid job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .installed import release
from .serve_flags import flag_value

# The oldest of the pinned releases whose parser takes the flag (a release between two pins counts as the older).
RENDERER_WORKERS_SINCE = (0, 22, 1)
# From this release an API server runs the image processor on one thread of its own, so renderer threads do not
# parallelise it: on the CPU build a second one cost 16 % more API-server CPU a page (0.168 to 0.194 core-s, the
# busiest thread 79-81 % of the process either way; bench/results/front-end-cpu-vllm-0.30-2026-12-06.json).
SERIAL_PROCESSOR_SINCE = (0, 30, 0)
# What one replica's engine core process uses on a fast GPU (2.1 cores at 9.6 pages/s, 3.05 at 19.5, 1 token, alone;
# 1.39-1.49 each of three at 800 tokens), and what one API server process with two or more renderer threads uses
# at most (the GIL: 1.65 measured alone, 0.63-1.47 with six sharing 16 cores; 2026-12-02).
ENGINE_CORES = 2.0
API_SERVER_CORES = 1.5
# The driver (reading, resizing and base64-encoding pages, the asyncio client) and the rest of the job.
DRIVER_CORES = 1.0
MAX_API_SERVERS = 4
MAX_RENDERER_WORKERS = 4
# A renderer thread's share of a core: threads past the GIL's 1.5 cores a process add overlap, not more cores.
CORES_PER_RENDERER_WORKER = 0.75
# A step's token budget for a small model on a large GPU: several pages' prefill in one step (vLLM's serve default
# is 8192). It paid for the 0.8B shape (5.7 to 7.1 pages/s alone, 2026-12-02), not for the 3B one (0.99x, 2026-11-30).
LARGE_GPU_BATCHED_TOKENS = 32768
SMALL_MODEL_B = 1.0
# What the larger step adds to a replica's memory beside its KV cache (the profile run's activations).
LARGE_BATCH_EXTRA_GIB = 4.0


@dataclass(frozen=True)
class FrontEnd:
    """One replica's front end: API server processes, renderer threads in each and the step size. `renderer_workers`
    1 is vLLM's default, which passes no flag."""

    api_servers: int
    renderer_workers: int = 1
    batched_tokens: int | None = None

    def serve_args(self) -> list[str]:
        args = []
        if self.api_servers > 1:
            args += ["--api-server-count", str(self.api_servers)]
        if self.renderer_workers > 1:
            args += ["--renderer-num-workers", str(self.renderer_workers)]
        if self.batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.batched_tokens)]
        return args

    def cores(self) -> float:
        """The cores this front end and its engine core use at most: what the plan keeps within the job's CPUs."""
        per_server = API_SERVER_CORES if self.renderer_workers > 1 else 1.0
        return ENGINE_CORES + self.api_servers * per_server

    def describe(self) -> str:
        parts = [f"{self.api_servers} API server(s) each"]
        if self.renderer_workers > 1:
            parts.append(f"{self.renderer_workers} renderer threads per API server")
        if self.batched_tokens is not None:
            parts.append(f"{self.batched_tokens}-token steps")
        return ", ".join(parts)


@dataclass(frozen=True)
class Engine:
    """What the front end depends on beside the cores: the vLLM release that runs, the model's own serve flags
    (the processor cache, a step size of its own), the GPU (fast: one front end cannot feed it; large: room for
    bigger steps) and the model's size."""

    vllm_version: str | None = None
    model_flags: Sequence[str] = ()
    fast_gpu: bool = False
    large_gpu: bool = False
    params_b: float | None = None


def has(version: str | None, since: tuple[int, int, int]) -> bool:
    """Whether this release is at least `since`; an unknown one is taken as not."""
    found = release(version)
    return found is not None and found >= since


def processor_cache_off(flags: Sequence[str]) -> bool:
    value = flag_value(flags, "--mm-processor-cache-gb")
    try:
        return value is not None and float(value) == 0
    except ValueError:
        return False


def renderer_workers_help(engine: Engine) -> bool:
    """Whether more renderer threads parallelise this vLLM's image processing: from the release that parses the flag
    to the one that moved the processor onto a thread of its own, and only with the processor cache off (those
    releases refuse more than one thread beside it)."""
    version = engine.vllm_version
    if not has(version, RENDERER_WORKERS_SINCE) or has(version, SERIAL_PROCESSOR_SINCE):
        return False
    return processor_cache_off(engine.model_flags)


def plan_front_end(cores: float, engine: Engine, api_servers: int | None = None) -> FrontEnd:
    """One replica's front end from the cores left for it beside its engine core (`cores`).

    A slow GPU keeps vLLM's single API server and single thread: one front end outruns it. On a fast one, as many
    API servers as the cores hold (API_SERVER_CORES each, up to MAX_API_SERVERS), then renderer threads to fill
    the cores each process has (CORES_PER_RENDERER_WORKER each), and larger steps for a small model on a large GPU.
    `--api-server-count` (api_servers) overrides the first count."""
    if not engine.fast_gpu:
        return FrontEnd(api_servers or 1)
    servers = api_servers or max(1, min(MAX_API_SERVERS, math.floor(cores / API_SERVER_CORES)))
    workers = 1
    if renderer_workers_help(engine) and cores >= servers * API_SERVER_CORES:
        workers = max(2, min(MAX_RENDERER_WORKERS, math.floor(cores / servers / CORES_PER_RENDERER_WORKER)))
    own_step = flag_value(engine.model_flags, "--max-num-batched-tokens") is not None
    small = engine.params_b is not None and engine.params_b <= SMALL_MODEL_B
    batched = LARGE_GPU_BATCHED_TOKENS if engine.large_gpu and small and not own_step else None
    return FrontEnd(servers, workers, batched)
