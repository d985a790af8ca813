"""A model's facts, as a recipe states them: the single place a script's model-specific behaviour comes from.

Each shipped script constructs one `ModelFacts` at its top (the prompt and sampling on its first screen) and hands
it to its shape's entry in recipes.py. The fields are keyword-only, so a misspelt one (`max_sides=`) is a TypeError
the moment the script starts, never a fact silently left at its default. Model-specific code (a parser, a serve-flag
rewrite) is a hook: a typed callable field, defined once in `ocr_models.<model>` and named by both twins.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Parsed(NamedTuple):
    """What a parse hook makes of the model's raw text: the output column's text and any extra columns."""

    text: str
    extra: Mapping[str, Any] = {}


def default_parse(text: str, options: Mapping[str, Any]) -> Parsed:
    return Parsed(text.strip())


ParseHook = Callable[[str, Mapping[str, Any]], Parsed]
PrepareServeHook = Callable[[list[str], str], list[str]]
AddArgumentsHook = Callable[[argparse.ArgumentParser], None]
SummaryMetricsHook = Callable[[Mapping[str, float], Mapping[str, float]], dict]


@dataclass(frozen=True, kw_only=True)
class ModelFacts:
    """What the model card (and the recipe's own tests) say about serving one model.

    `prompt` follows the page image in the one user message (None: the image alone is the prompt); `sampling` is
    the card's; `vllm_pin` is the vLLM release the recipe is tested on (an offline script's header pins it).
    """

    model: str
    image: str
    max_model_len: int
    sampling: Mapping[str, Any]
    serve_args: Sequence[str]
    prompt: str | None = None
    vllm_pin: str | None = None
    flavor: str = "l4x1"
    params_b: float | None = None
    request_extras: Mapping[str, Any] = field(default_factory=dict)
    max_side: int | None = None
    max_pixels: int | None = None
    retry_temperature: float | None = None
    serve_env: Mapping[str, str] = field(default_factory=dict)
    pdf_render: Mapping[str, Any] = field(default_factory=dict)
    job_command: str | None = None
    extra_columns: Mapping[str, Any] = field(default_factory=dict)
    parse: ParseHook = default_parse
    prepare_serve: PrepareServeHook | None = None
    add_arguments: AddArgumentsHook | None = None
    summary_metrics: SummaryMetricsHook | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "serve_args", tuple(self.serve_args))

    def build_content(self, image_part: dict) -> list[dict]:
        """The user message's content: the page image, then the prompt when the model takes one."""
        return [image_part, {"type": "text", "text": self.prompt}] if self.prompt else [image_part]
