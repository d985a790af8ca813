"""What a shape counts while it drives the pages: the tally of outcomes and speeds, and the tqdm bar on stderr."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from ..judging.breaker import LOOP, TRUNCATED, error_kind
from ..rates import sustained


@dataclass
class Tally:
    """The run's counts and the times its rates are taken over (rates.py): each page's first send and its
    outcome, the last send, and the moment every planned replica served. Recording costs one tuple a page."""

    done: int = 0
    errors: int = 0
    loops: int = 0
    truncated: int = 0
    output_tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    whole_at: float | None = None
    last_sent: float | None = None
    pages: list[tuple[float, float]] = field(default_factory=list)

    def seconds(self) -> float:
        return max(1e-9, (self.finished or time.monotonic()) - self.started)

    def mark_sent(self, at: float, whole: bool) -> None:
        """A page's first request went at `at`; `whole`: every planned replica served by then (the first such send
        opens the sustained interval)."""
        if whole and self.whole_at is None:
            self.whole_at = at
        self.last_sent = at

    def sustained(self) -> dict[str, float | int | list[float] | None]:
        """The summary's sustained figures; the interval also in Unix seconds, to line up with a GPU monitor's
        samples. Null where the run had no sustained interval (rates.sustained says when)."""
        interval = sustained(self.whole_at, self.last_sent, self.pages)
        if interval is None:
            return {"sustained_pages_per_s": None, "sustained_s": None, "sustained_pages": 0, "sustained_unix": None}
        to_unix = time.time() - time.monotonic()
        return {
            "sustained_pages_per_s": round(interval.pages_per_s, 3),
            "sustained_s": round(interval.seconds, 2),
            "sustained_pages": interval.pages,
            "sustained_unix": [round(interval.start + to_unix, 2), round(interval.end + to_unix, 2)],
        }

    def pages_per_s(self) -> float:
        return self.done / self.seconds()

    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds()


class ProgressBar:
    """Counts results and keeps the bar's numbers current: pages/s, output tokens/s, pages in flight, errors."""

    def __init__(self, total: int, already_done: int) -> None:
        self.tally = Tally()
        self.total = total
        self.already_done = already_done
        self.bar: tqdm | None = None

    def start(self) -> None:
        """Starts the clock and the bar once pages flow, so start-up and dataset loading count for neither."""
        self.tally.started = time.monotonic()
        interactive = sys.stderr.isatty()
        self.bar = tqdm(
            total=self.total,
            initial=self.already_done,
            unit="page",
            file=sys.stderr,
            mininterval=0.5 if interactive else 15.0,
            dynamic_ncols=True,
        )

    def record(self, error: str | None, output: int, sent: float | None = None) -> None:
        """One row's outcome; loops and truncated pages are errors that are also counted apart. `sent`: when its
        first request went (None for a page that never reached the engine, which no rate over requests counts)."""
        tally = self.tally
        if sent is not None:
            tally.pages.append((sent, time.monotonic()))
        kind = error_kind(error) if error is not None else None
        tally.done += 1
        tally.errors += error is not None
        tally.loops += kind == LOOP
        tally.truncated += kind == TRUNCATED
        tally.output_tokens += output
        if self.bar is not None:
            self.bar.update(1)

    def show(self, in_flight: int, window: int) -> None:
        tally = self.tally
        if self.bar is None:
            return
        self.bar.set_postfix(
            tok_s=f"{tally.tokens_per_s():.0f}",
            in_flight=in_flight,
            window=window,
            errors=tally.errors,
            refresh=False,
        )

    def close(self) -> None:
        self.tally.finished = time.monotonic()
        if self.bar is not None:
            self.bar.close()
