"""The run's speed figures, each over a window that holds only the work it counts.

A rate that mixes in work done outside its window reads high: a window that opens when the last replica joins
counts pages half decoded before that, one that closes on the final burst counts the drain. So each figure here
says exactly which pages and which seconds it divides:

- sustained: what a long job runs at once the whole fleet serves. Pages whose request was sent at or after the
  moment every planned replica served, and that finished by the time the last page was sent, over that interval.
  It is a lower bound: the interval opens with earlier pages in flight, whose completions it leaves out.
- billed: rows done over the process's wall time, start-up and publishing included: what the user pays for.
- recent: what the run does now, for the expected end a live card shows. Pages finished in the last few minutes,
  over those minutes; a run younger than that counts from its first finished page, so start-up does not read as
  slowness.

The inputs are plain times (any one clock), so the definitions are pinned by scenario tests with known times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Sustained:
    """The sustained interval: from `start` (every planned replica served) to `end` (the last page sent), and the
    pages counted in it."""

    start: float
    end: float
    pages: int

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds


def counts_as_sustained(sent: float, finished: float, start: float, end: float) -> bool:
    """Whether a page's whole request lies inside the interval: sent once the whole fleet served, done before the
    last page was sent (so neither its decode before the fleet was whole nor the final drain is counted)."""
    return start <= sent and finished <= end


def sustained(
    whole_at: float | None, last_sent: float | None, pages: Iterable[tuple[float, float]]
) -> Sustained | None:
    """The sustained interval over `pages` (each page's send and finish time), or None where there is none: the
    fleet never served whole, no page was sent after that, or no page both started and finished inside (a window
    that holds every page at once never reaches a steady state; more pages than the window give one)."""
    if whole_at is None or last_sent is None or last_sent <= whole_at:
        return None
    counted = sum(counts_as_sustained(sent, finished, whole_at, last_sent) for sent, finished in pages)
    return Sustained(whole_at, last_sent, counted) if counted else None


def billed_pages_per_s(rows_done: int, wall_s: float) -> float | None:
    """Rows done per second of the process's life; None before any time has passed."""
    return rows_done / wall_s if wall_s > 0 else None


def recent_pages_per_s(finished: Iterable[float], now: float, window_s: float) -> float | None:
    """Pages per second over the `window_s` seconds before `now`, or since the first page finished when that is
    later (the first page marks the start and is not counted: n pages after it took the time since it). None until
    a second page has finished."""
    times = [moment for moment in finished if moment <= now]
    if not times:
        return None
    start = max(now - window_s, min(times))
    counted = sum(start < moment for moment in times)
    return counted / (now - start) if counted else None
