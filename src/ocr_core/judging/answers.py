"""What a model's raw answer means for its row, the same way offline and in server mode.

One place decides loops, retries, truncation and parsing, so the offline and server twins cannot grade the same
text differently. It also checks that the parsed extra values fit their typed columns: a value that does not must
fail its own row now, not the whole publish hours later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import ERROR_TEXT_LIMIT
from ..facts import ModelFacts
from ..planning.page_rules import AnswerRules
from .breaker import LOOP, TRUNCATED, UNSTORABLE
from .repeats import Repeat, keep_one_copy, repeated_tail


@dataclass(frozen=True)
class Verdict:
    resample: bool
    text: str | None = None
    extra: str | None = None
    error: str | None = None


def judge(
    text: str, finish_reason: str | None, facts: ModelFacts, rules: AnswerRules, resampled: bool, attempts: int
) -> Verdict:
    """A loop is retried once at the card's other temperature; a loop that stays is trimmed to one copy and flagged.

    A page cut off by max_tokens keeps its text and is flagged as truncated. With --ignore-eos every page runs to
    max_tokens on purpose (benchmarks), so nothing there is a loop or truncated.
    """
    cut_off = finish_reason == "length" and not rules.ignore_eos
    loop = repeated_tail(text) if cut_off else None
    if loop and facts.retry_temperature is not None and not resampled:
        return Verdict(resample=True)
    parsed = facts.parse(keep_one_copy(text, loop) if loop else text, rules.model_options)
    problems = []
    if loop:
        problems.append(loop_error(loop, attempts))
    elif cut_off:
        problems.append(truncation_error(rules))
    unstorable = storage_problem(parsed.extra, facts.extra_columns)
    if unstorable:
        problems.append(unstorable)
    extra = json.dumps(dict(parsed.extra), ensure_ascii=False) if parsed.extra and not unstorable else None
    return Verdict(False, parsed.text, extra, "; ".join(problems)[:ERROR_TEXT_LIMIT] if problems else None)


def loop_error(loop: Repeat, attempts: int) -> str:
    return (
        f"{LOOP}: output hit max_tokens repeating {loop.unit[:40]!r} {loop.count} times "
        f"after {attempts} attempt(s); text holds the trimmed output"
    )


def truncation_error(rules: AnswerRules) -> str:
    if rules.max_tokens is None:
        return (
            f"{TRUNCATED}: the answer filled the context (--max-model-len {rules.max_model_len}) before the model "
            "finished; text holds what was written; raise --max-model-len"
        )
    return (
        f"{TRUNCATED}: the answer hit max_tokens ({rules.max_tokens}) before the model finished; text holds what "
        "was written; raise --max-tokens"
    )


def storage_problem(extra: Mapping[str, Any], columns: Mapping[str, pa.DataType]) -> str | None:
    """Why a parsed value cannot be stored in its typed column, or None when every value fits."""
    for name, arrow_type in columns.items():
        try:
            pa.array([extra.get(name)], type=arrow_type)
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            return (
                f"{UNSTORABLE}: the parsed value cannot be stored in column {name}: {type(exc).__name__}: {exc}; "
                "text holds the parsed text"
            )
    return None
