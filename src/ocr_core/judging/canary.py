"""Stops a job whose first answers are no text, before it spends hours of GPU time writing "!!!!" into a dataset.

A model served by a vLLM build it does not work on answers every page on time and without an error, so the load
looks normal and the circuit breaker (which watches errors) sees nothing: a Qwen2.5-VL model on vLLM 0.11 or later
writes "!" until max_tokens, others return nothing, loop on every page, or never stop. The canary reads the first
answers of a run: when every one of them is degenerate (one character or token over and over, empty, a loop, cut
off at max_tokens), the job stops at once. Those rows are marked as failed, so that a rerun with --retry-errors
redoes them, and the message names the likely cause, the image the model is pinned to and the exact job command.
A run whose first pages include one real answer is never stopped by it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import CutOff, JobFailed
from ..store.progress import ResultLog, RowResult
from .breaker import LOOP, TRUNCATED, Advice, error_kind

CANARY_PAGES = 8
REPEATED = "one character or token repeated"
EMPTY = "empty"
DEGENERATE = "degenerate answer"
REPEAT_MAX_UNIT = 8
REPEAT_MIN_COUNT = 4
SAMPLE_CHARS = 60


VERSION_FIX = (
    "run the model on the image it is pinned to, {image} (models.json; this run used {served}), for example:\n"
    "  {command}"
)
CANARY_ADVICE = {
    REPEATED: Advice(
        "the engine runs the model wrongly, most often a vLLM version the model does not work on (Qwen2.5-VL "
        "models such as Nanonets-OCR2 write only '!' on vLLM 0.11 and later)",
        VERSION_FIX,
    ),
    EMPTY: Advice(
        "the engine returns no text: a vLLM version or chat template that does not fit the model",
        VERSION_FIX,
    ),
    LOOP: Advice(
        "the model loops on every page: a vLLM version other than the one it is pinned to (LightOnOCR loops on "
        "every page on vLLM 0.27.1), or sampling other than the card's (check --temperature)",
        VERSION_FIX,
    ),
    TRUNCATED: Advice(
        "every answer is cut off at max_tokens: --max-tokens is far below what a page needs, or the model never "
        "stops because the engine runs it wrongly",
        "raise --max-tokens (below --max-model-len) and redo the cut-off rows with --retry-errors, as the command "
        "below does; if the answers are garbage rather than long, the engine runs the model wrongly: run it on the "
        "image it is pinned to, {image} (models.json; this run used {served})",
    ),
}


@dataclass(frozen=True)
class CanaryContext:
    """What the message needs to name the fix: the pinned image, the command that runs there, the vLLM it met."""

    model: str
    image: str
    command: str
    served: str | None = None
    server: str | None = None


def repeated_unit(text: str) -> str | None:
    """The short unit that, repeated, is the whole answer (whitespace aside): '!' for '!!!!!!', else None."""
    compact = "".join(text.split())
    for size in range(1, REPEAT_MAX_UNIT + 1):
        count, rest = divmod(len(compact), size)
        if count < REPEAT_MIN_COUNT:
            return None
        if not rest and compact == compact[:size] * count:
            return compact[:size]
    return None


def degenerate_kind(text: str | None, error: str | None) -> str | None:
    """Why a page's answer is no text, or None when it may be text (or when the page has no answer at all)."""
    if text is None:
        return None
    if not text.strip():
        return EMPTY
    if repeated_unit(text):
        return REPEATED
    kind = error_kind(error) if error else None
    return kind if kind in (LOOP, TRUNCATED) else None


def canary_verdict(kinds: Sequence[str | None]) -> str | None:
    """The most common kind when every answer is degenerate, else None: one real answer clears the run."""
    if not kinds or not all(kinds):
        return None
    return Counter(kinds).most_common(1)[0][0]


class Canary:
    """Watches the first `pages` results of a run; `record` raises JobFailed when every answer among them is
    degenerate. Results without an answer (an unreadable page, a refused request) are the breaker's to judge."""

    def __init__(self, log: ResultLog, context: CanaryContext, pages: int = CANARY_PAGES) -> None:
        self.log = log
        self.context = context
        self.pages = pages
        self.seen = 0
        self.answers: list[RowResult] = []
        self.kinds: list[str | None] = []
        self.stopped = False

    def record(self, result: RowResult) -> None:
        """One page's final result, already logged.

        Once the canary has stopped the job, pages that were still in flight and answer as badly are flagged too.
        """
        kind = degenerate_kind(result.text, result.error)
        if self.stopped:
            if kind is not None:
                self.flag(result, kind)
            return
        if self.seen >= self.pages:
            return
        self.seen += 1
        if result.text is not None:
            self.answers.append(result)
            self.kinds.append(kind)
        verdict = canary_verdict(self.kinds) if self.seen == self.pages else None
        if verdict is not None:
            self.stop(verdict)

    @property
    def cleared(self) -> bool:
        """One real answer among those seen, or its pages seen without a verdict: it will never stop the job."""
        return any(kind is None for kind in self.kinds) or (self.seen >= self.pages and not self.stopped)

    def conclude(self) -> None:
        """At the end of the run: judges the answers seen when fewer than `pages` came (one server of a fleet may
        answer only a few pages), so that no answer goes unjudged."""
        if not self.stopped and self.seen < self.pages and (verdict := canary_verdict(self.kinds)) is not None:
            self.stop(verdict)

    def stop(self, verdict: str) -> None:
        self.stopped = True
        for answer, found in zip(self.answers, self.kinds):
            self.flag(answer, found)
        raise (CutOff if verdict == TRUNCATED else JobFailed)(self.explain(verdict))

    def flag(self, result: RowResult, kind: str | None) -> None:
        """Records a degenerate row again as failed (the newer record wins), so --retry-errors redoes it."""
        reason = f"{DEGENERATE}: {kind}; the canary stopped the job (see its message)"
        error = "; ".join(part for part in (reason, result.error) if part)
        self.log.add(replace(result, error=error, recorded_at=max(time.time(), result.recorded_at + 1e-3)))
        self.log.flush()

    def explain(self, kind: str) -> str:
        context = self.context
        sample = next(result for result, found in zip(self.answers, self.kinds) if found == kind)
        shown = sample.error if kind in (LOOP, TRUNCATED) else sample.text
        cause, fix = CANARY_ADVICE[kind]
        fix = fix.format(
            image=context.image, command=context.command, served=context.served or "an unknown vLLM version"
        )
        answers = len(self.kinds)
        where = f" at {context.server}" if context.server else ""
        return (
            f"canary: the first {answers} answers{where} are all degenerate ({kind}: {self.kinds.count(kind)} of "
            f"{answers}), "
            f"for example {shown[:SAMPLE_CHARS]!r}. Likely cause for {context.model}: {cause}. Fix: "
            f"{fix}\nThose rows are marked as failed; --retry-errors redoes them. If these pages really are blank "
            "or repetitive, rerun with --no-canary."
        )
