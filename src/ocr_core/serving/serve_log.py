"""What a `vllm serve` log says while its start goes on, in the words a run shows, and its last lines for the
message of a start that failed. (startup_log.py reads the same log afterwards for each phase's seconds.)
"""

from __future__ import annotations

import os
from pathlib import Path

LOG_TAIL_LINES = 40
START_LOG_TAIL_BYTES = 1 << 18
# What a `vllm serve` log says as its start goes on, in the words a run shows: the phase of the last line that has a
# marker wins, and on one line the first marker listed (a specific one before the one it contains).
START_PHASES = (
    ("Initializing a V1 LLM engine", "starting the engine"),
    ("Starting to load model", "loading the model"),
    ("Loading weights took", "model loaded"),
    ("Model loading took", "model loaded"),
    ("Loading weights", "loading the model's weights"),
    ("Loading safetensors", "loading the model's weights"),
    ("Dynamo bytecode transform", "compiling the model (torch.compile)"),
    ("Compiling a graph", "compiling the model (torch.compile)"),
    ("Memory profiling", "profiling memory for the KV cache"),
    ("Available KV cache memory", "sizing the KV cache"),
    ("KV cache size", "sizing the KV cache"),
    ("Capturing CUDA graph", "capturing CUDA graphs"),
    ("Graph capturing finished", "CUDA graphs captured"),
    ("init engine", "engine ready, starting the API server"),
    ("Starting vLLM", "starting the API server"),
)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_phase(path: Path) -> str:
    """Where the latest start in a serve log stands (the log keeps every start, each after its `====` line, and a
    restart's log follows the whole access log of the run before it, so only its tail is read)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - START_LOG_TAIL_BYTES))
            text = log.read().decode(errors="replace")
    except OSError:
        return "no log yet"
    phase = "starting vllm serve"
    for line in text.rpartition("\n==== ")[2].splitlines():
        phase = next((said for marker, said in START_PHASES if marker in line), phase)
    return phase
