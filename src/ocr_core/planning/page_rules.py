"""What every page is held to, decided once from the command line and the model's facts: the sampling each request
asks for, how an answer is judged, how long a request may take and how much failure a job tolerates.

The pump (server shapes) and the offline runner read this record, not the command line, so both twins send the
same sampling and judge answers by the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AnswerRules:
    """How an answer is judged: `ignore_eos` runs every page to max_tokens on purpose (benchmarks), so nothing is a
    loop or truncated; `model_options` are what the model's parse hook reads; the lengths name the flag to raise
    when an answer is cut off."""

    ignore_eos: bool = False
    model_options: Mapping[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    max_model_len: int = 0


@dataclass(frozen=True)
class PageRules:
    """The requests' sampling, the answers' rules, the error rate that stops a job, a request's timeout and the
    retry budget of a page (None where a shape has none), whether each page's failure is printed, and how many
    first pages the canary watches (None: no canary)."""

    sampling: Mapping[str, Any]
    answers: AnswerRules
    max_error_rate: float
    request_timeout: float | None = None
    retry_budget: float | None = None
    verbose: bool = False
    canary_pages: int | None = None
