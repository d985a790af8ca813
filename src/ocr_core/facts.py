"""A model's facts, as a recipe states them: the single place a script's model-specific behaviour comes from.

Model modules (src/ocr_models) are plain constants and hook functions, so that the generated scripts can put them
first and read top to bottom; `ModelFacts.from_namespace` collects them once the core is defined.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Parsed(NamedTuple):
    """What a parse hook makes of the model's raw text: the output column's text and any extra columns."""

    text: str
    extra: Mapping[str, Any] = {}


def default_build_content(image_part: dict) -> list[dict]:
    return [image_part]


def default_parse(text: str, options: Mapping[str, Any]) -> Parsed:
    return Parsed(text.strip())


@dataclass(frozen=True)
class ModelFacts:
    model: str
    image: str
    serve_args: tuple[str, ...]
    sampling: Mapping[str, Any]
    max_model_len: int
    build_content: Callable[[dict], list[dict]] = default_build_content
    parse: Callable[[str, Mapping[str, Any]], Parsed] = default_parse
    request_extras: Mapping[str, Any] = field(default_factory=dict)
    max_side: int | None = None
    max_pixels: int | None = None
    retry_temperature: float | None = None
    serve_env: Mapping[str, str] = field(default_factory=dict)
    prepare_serve: Callable[[list[str], str], list[str]] | None = None
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    extra_columns: Mapping[str, str] = field(default_factory=dict)
    summary_metrics: Callable[[Mapping[str, float], Mapping[str, float]], dict] | None = None
    flavor: str = "l4x1"
    job_command: str | None = None
    pdf_render: Mapping[str, Any] = field(default_factory=dict)
    params_b: float | None = None

    @classmethod
    def from_namespace(cls, ns: Mapping[str, Any]) -> ModelFacts:
        """Collects the upper-case facts and lower-case hooks a model module defines."""
        optional = {
            "build_content": ns.get("build_content"),
            "parse": ns.get("parse"),
            "request_extras": ns.get("REQUEST_EXTRAS"),
            "max_side": ns.get("MAX_SIDE"),
            "max_pixels": ns.get("MAX_PIXELS"),
            "retry_temperature": ns.get("RETRY_TEMPERATURE"),
            "serve_env": ns.get("SERVE_ENV"),
            "prepare_serve": ns.get("prepare_serve"),
            "add_arguments": ns.get("add_arguments"),
            "extra_columns": ns.get("EXTRA_COLUMNS"),
            "summary_metrics": ns.get("summary_metrics"),
            "flavor": ns.get("FLAVOR"),
            "job_command": ns.get("JOB_COMMAND"),
            "pdf_render": ns.get("PDF_RENDER"),
            "params_b": ns.get("PARAMS_B"),
        }
        return cls(
            model=ns["MODEL"],
            image=ns["IMAGE"],
            serve_args=tuple(ns["SERVE_ARGS"]),
            sampling=dict(ns["SAMPLING"]),
            max_model_len=ns["MAX_MODEL_LEN"],
            **{key: value for key, value in optional.items() if value is not None},
        )
