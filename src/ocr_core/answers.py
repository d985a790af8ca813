"""What a model's raw answer means for its row, the same way offline and in server mode.

One place decides loops, retries and parsing, so the offline and server twins cannot grade the same text
differently.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from .facts import ModelFacts
from .repeats import repeated_tail


@dataclass(frozen=True)
class Verdict:
    resample: bool
    text: str | None = None
    extra: str | None = None
    error: str | None = None


def requested_sampling(facts: ModelFacts, args: argparse.Namespace) -> dict[str, Any]:
    """The card's sampling with the command line's temperature and max_tokens on top."""
    sampling = {**facts.sampling, "temperature": args.temperature}
    if args.max_tokens is not None:
        sampling["max_tokens"] = args.max_tokens
    if args.ignore_eos:
        sampling["ignore_eos"] = True
    return sampling


def judge(
    text: str, finish_reason: str | None, facts: ModelFacts, args: argparse.Namespace, resampled: bool, attempts: int
) -> Verdict:
    """A loop is retried once at the card's other temperature; a loop that stays is kept trimmed and flagged.

    With --ignore-eos every page runs to max_tokens on purpose (benchmarks), so nothing there is a loop.
    """
    loop = repeated_tail(text) if finish_reason == "length" and not args.ignore_eos else None
    if loop and facts.retry_temperature is not None and not resampled:
        return Verdict(resample=True)
    parsed = facts.parse(text, args)
    error = None
    if loop:
        error = (
            f"repetition loop: output hit max_tokens repeating {loop.unit[:40]!r} {loop.count} times "
            f"after {attempts} attempt(s); text holds the trimmed output"
        )
    extra = json.dumps(dict(parsed.extra), ensure_ascii=False) if parsed.extra else None
    return Verdict(False, parsed.text, extra, error)
