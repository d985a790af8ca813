"""A model's facts, as a recipe states them: the single place a script's model-specific behaviour comes from.

Each shipped script constructs one `ModelFacts` at its top (the prompt and sampling on its first screen) and hands
it to its shape's entry (entry.py). The fields are keyword-only, so a misspelt one (`max_sides=`) stops the
script the moment it starts, never a fact silently left at its default: exit 2 (the fix is the user's), the closest
field named, and the summary line every way out prints. Model-specific code (a parser, a serve-flag
rewrite) is a hook: a typed callable field, defined once in `ocr_models.<model>` and named by both twins.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
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

    def __new__(cls, **given: Any) -> ModelFacts:
        """Refuses fields the recipe does not have before the constructor's bare TypeError would (see the module)."""
        unknown = sorted(set(given) - {item.name for item in fields(cls)})
        if unknown:
            refuse_unknown_fields(unknown, given.get("model"))
        return super().__new__(cls)

    def __post_init__(self) -> None:
        object.__setattr__(self, "serve_args", tuple(self.serve_args))

    def build_content(self, image_part: dict) -> list[dict]:
        """The user message's content: the page image, then the prompt when the model takes one."""
        return [image_part, {"type": "text", "text": self.prompt}] if self.prompt else [image_part]


def unknown_fields_message(unknown: list[str]) -> str:
    """Each field FACTS does not have, with the closest one it does."""
    known = [item.name for item in fields(ModelFacts)]
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        named.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return (
        f"FACTS has no field {', '.join(named)}: correct the name in the script's FACTS = ModelFacts(...); the fields "
        f"are {', '.join(known)}"
    )


def refuse_unknown_fields(unknown: list[str], model: object) -> None:
    """Exit 2 with the message and the summary line, as a refused command line gets."""
    from .console import say
    from .summary_line import Summary

    message = unknown_fields_message(unknown)
    say(f"error: {message}")
    script = Path(sys.argv[0]).name
    Summary(script, str(model), "unknown", None, failure=message, exit_code=2).print_to(sys.stdout)
    raise SystemExit(2)
