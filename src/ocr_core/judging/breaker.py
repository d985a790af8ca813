"""Stops a job whose pages fail alike, before it spends hours of GPU time on a dataset of error rows.

A misconfigured job (a text-only model, the wrong image column, a chat template the engine refuses, a max_tokens
far too low) fails every page the same way, and no retry helps. Two rules catch it: the first pages all fail with
one kind of error, or most of the recent pages fail. The job then stops (its finished rows kept) with the kind, a
sample reason, the likely cause and the fix; a healthy job with the odd bad page never trips either rule.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import NamedTuple

from ..errors import INTERNAL_ERROR, CutOff, JobFailed
from .poison import SET_ASIDE

FIRST_OUTCOMES = 8
RATE_WINDOW = 100
RATE_MIN_OUTCOMES = 50
MAX_ERROR_RATE = 0.8
SAMPLE_LIMIT = 300
LOOP = "repetition loop"
TRUNCATED = "truncated"
UNSTORABLE = "unstorable output"


class Advice(NamedTuple):
    cause: str
    fix: str


ADVICE = {
    "bad image": Advice(
        "the column read as images holds no readable page images",
        "check --image-column (and --split, --input-config) against the input dataset",
    ),
    "bad pdf": Advice(
        "the input's PDFs cannot be read: damaged, encrypted, or not PDFs",
        "check the files the error column names; decrypt encrypted ones (for example `qpdf --decrypt`)",
    ),
    "server rejected the page": Advice(
        "the server refuses these requests",
        "check that --model is a vision-language model and that the server runs {image} (the image tag and vLLM "
        "version listed in models.json)",
    ),
    "engine rejected the page": Advice(
        "the vLLM engine refuses these prompts: a chat template or chat_template_kwargs it does not accept, or a "
        "model that takes no images",
        "check --model, the vLLM version pinned in models.json and --extra-serve-args",
    ),
    LOOP: Advice(
        "the model repeats itself until max_tokens on these pages",
        "check --model, --temperature (the recipe's default suits its model) and that the pages are documents",
    ),
    TRUNCATED: Advice(
        "answers are longer than max_tokens allows",
        "raise --max-tokens (it must stay below --max-model-len) and redo the cut-off rows with --retry-errors, as "
        "the command below does; or use --ignore-eos for benchmark runs",
    ),
    INTERNAL_ERROR: Advice(
        "the recipe cannot handle what it reads or what the server answers",
        "rerun with --verbose and report the reason together with the recipe's name",
    ),
    SET_ASIDE: Advice(
        "these pages get no answer however often they are sent: the server fails, times out or its engine dies on "
        "each of them",
        "read the server log around these pages (--verbose names each failed attempt); a page that takes longer "
        "than --request-timeout needs a larger one",
    ),
    UNSTORABLE: Advice(
        "the model's output does not fit the recipe's extra column",
        "check --model (another model writes another format); report it with the recipe's name",
    ),
}
GENERIC_ADVICE = Advice("every page meets the same failure", "read the sample reason above")


def error_kind(error: str) -> str:
    """The category of an error column: a known prefix, else the text before its first colon."""
    for kind in ADVICE:
        if error.startswith(kind):
            return kind
    return error.split(":", 1)[0].strip()[:80]


class Breaker:
    """Watches row outcomes; `record` raises JobFailed once they say the job itself is wrong."""

    def __init__(
        self,
        max_error_rate: float = MAX_ERROR_RATE,
        image: str | None = None,
        first: int = FIRST_OUTCOMES,
        window: int = RATE_WINDOW,
        least: int = RATE_MIN_OUTCOMES,
    ) -> None:
        self.max_error_rate = max_error_rate
        self.image = image
        self.first = first
        self.least = least
        self.seen = 0
        self.recent: deque[str | None] = deque(maxlen=max(window, first))

    def record(self, error: str | None) -> None:
        """One row's outcome: None for a success, else its error column."""
        if self.max_error_rate >= 1.0:
            return
        self.seen += 1
        self.recent.append(error)
        if self.seen == self.first:
            self.check_first()
        if len(self.recent) >= self.least:
            self.check_rate()

    def check_first(self) -> None:
        errors = list(self.recent)[: self.first]
        if all(errors) and len({error_kind(error) for error in errors}) == 1:
            stop(errors, f"the first {self.first} pages all failed the same way: {self.explain(errors)}")

    def check_rate(self) -> None:
        errors = [error for error in self.recent if error is not None]
        if len(errors) > self.max_error_rate * len(self.recent):
            stop(
                errors,
                f"{len(errors)} of the last {len(self.recent)} pages failed (--max-error-rate {self.max_error_rate} "
                f"allows {self.max_error_rate:.0%}); most often {self.explain(errors)}",
            )

    def explain(self, errors: list[str]) -> str:
        kind, count = most_common_kind(errors)
        sample = next(error for error in reversed(errors) if error_kind(error) == kind)
        cause, fix = ADVICE.get(kind, GENERIC_ADVICE)
        fix = fix.format(image=self.image or "the image")
        after = (
            ""
            if kind == TRUNCATED
            else " After the fix, rerun the same command with --retry-errors to redo the failed rows"
        )
        return (
            f"{kind} ({count}x), for example: {sample[:SAMPLE_LIMIT]!r}. Likely cause: {cause}. Fix: {fix}.{after} "
            "(--max-error-rate 1.0 turns this check off)."
        )


def most_common_kind(errors: list[str]) -> tuple[str, int]:
    return Counter(error_kind(error) for error in errors).most_common(1)[0]


def stop(errors: list[str], message: str) -> None:
    """Stops the job; pages cut off at max_tokens stop it with the command that goes on (CutOff)."""
    raise (CutOff if most_common_kind(errors)[0] == TRUNCATED else JobFailed)(message)
