"""Shared core of the vLLM OCR recipes (distribution `ocr-vllm-core`): each shipped script pins one version of it,
states its model's facts (`ModelFacts`) and calls its shape's entry (`run_offline`, `run_server`, `run_saturate`).

The names below are the core's public face, what a recipe or a user composes: a model's facts, its parse hook's
result and the repetition trimmer a hook may apply, and the three entries. The recipes and `ocr_models` import
these and no module path, so the stage folders behind them (command, inputs, judging, store, serving, preparation,
shapes, publishing, fanout) can change without touching a script. The project's own bench/ and tools/ reach the
stage parts they measure through the second face, `ocr_core.internals`.
"""

from .entry import run_offline, run_saturate, run_server
from .facts import ModelFacts, Parsed
from .judging.repeats import trim_repeats

__all__ = [
    "ModelFacts",
    "Parsed",
    "run_offline",
    "run_saturate",
    "run_server",
    "trim_repeats",
]
