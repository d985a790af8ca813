"""Detects the degenerate repetition loops that OCR models fall into, and trims them.

A page that hits max_tokens while its tail repeats one short unit over and over is a loop, not a long page; the
row is flagged (and retried where the card allows sampling) instead of silently storing kilobytes of "qqqq".
"""

from __future__ import annotations

from dataclasses import dataclass

LOOP_MIN_REPEATS = 8
LOOP_MIN_SPAN = 200
LOOP_MAX_UNIT = 200
LOOP_TAIL = 8000


@dataclass(frozen=True)
class Repeat:
    unit: str
    count: int
    start: int


def repeated_tail(
    text: str,
    min_repeats: int = LOOP_MIN_REPEATS,
    min_span: int = LOOP_MIN_SPAN,
    max_unit: int = LOOP_MAX_UNIT,
) -> Repeat | None:
    """The shortest unit whose back-to-back copies end the text, if it repeats enough to be a loop.

    The last copy may be cut short (generation stops mid-unit), so the match runs from the end backwards over
    characters equal to the one a unit earlier.
    """
    tail = text[-LOOP_TAIL:]
    for unit_len in range(1, min(max_unit, len(tail) // 2) + 1):
        span = matching_suffix(tail, unit_len) + unit_len
        if span // unit_len >= min_repeats and span >= min_span:
            if span == len(tail):
                span = matching_suffix(text, unit_len) + unit_len
            start = len(text) - span
            return Repeat(text[start : start + unit_len], span // unit_len, start)
    return None


def matching_suffix(text: str, period: int) -> int:
    """How many trailing characters equal the character `period` places before them."""
    end = len(text)
    matched = 0
    step = 64
    while matched + period < end:
        size = min(step, end - period - matched)
        right = text[end - matched - size : end - matched]
        left = text[end - matched - size - period : end - matched - period]
        if right == left:
            matched += size
            continue
        for index in range(size - 1, -1, -1):
            if right[index] != left[index]:
                return matched + (size - 1 - index)
        return matched + size
    return matched


def trim_repeats(text: str, min_repeats: int = 5, min_span: int = LOOP_MIN_SPAN) -> str:
    """Keeps one copy of a looping tail, so the page's real content survives a loop."""
    repeat = repeated_tail(text, min_repeats=min_repeats, min_span=min_span)
    return text if repeat is None else keep_one_copy(text, repeat)


def keep_one_copy(text: str, repeat: Repeat) -> str:
    """`text` up to the end of the first copy of its repeating tail."""
    return text[: repeat.start + len(repeat.unit)].rstrip()
