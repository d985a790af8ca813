"""What a run tells its user while it goes (a tqdm bar on stderr) and when it ends (one JSON line on stdout)."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from tqdm.auto import tqdm

from .breaker import LOOP, TRUNCATED, error_kind
from .rates import billed_pages_per_s, sustained
from .redact import redact
from .version import core_identity

IMPORTED = time.monotonic()


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


def process_seconds() -> float:
    """Seconds since this process started, interpreter start-up and imports included (Linux: the start time in
    /proc against the same boot clock); elsewhere since this module was imported, the nearest moment known."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic() - IMPORTED


def say(message: str) -> None:
    """Logs to stderr without tearing the progress bar; stdout is kept for the final summary. Never a secret."""
    tqdm.write(redact(message), file=sys.stderr)


@dataclass
class RunFacts:
    """What a run that reached its pages did: where the rows stand, how fast, at what cost, how it fed the engine.
    `extra` holds the cost fields and the model's own metrics, whose names vary."""

    output: str
    rows: int
    done_this_run: int
    resumed: int
    shard: list[int] | None
    errors: int
    errors_this_run: int
    truncated: int
    loops_this_run: int
    truncated_this_run: int
    missing: int
    pages_per_s: float
    sustained_pages_per_s: float | None
    output_tokens_per_s: float
    inference_s: float
    sustained_s: float | None
    sustained_pages: int
    sustained_unix: list[float] | None
    wall_s: float
    flavor: str
    window: int
    peak_in_flight: int
    peak_window: int
    interrupted: bool
    failure: str | None
    billed_pages_per_s: float | None = None
    billed_s: float | None = None
    extra: dict = field(default_factory=dict)

    def bill(self, process_s: float) -> None:
        """The rows this run did over the process's life so far: called last, just before the summary prints, so
        that publishing and every clean-up before it count."""
        rate = billed_pages_per_s(self.done_this_run, process_s)
        self.billed_pages_per_s = None if rate is None else round(rate, 3)
        self.billed_s = round(process_s, 2)


@dataclass(frozen=True)
class ScriptCopy:
    """What the summary line says of the script that ran: released, modified or unchecked (on a core that is not
    a release build), the sha256 of its bytes, and that of its prompt (None: the image alone is the prompt)."""

    script_release: str
    script_sha256: str | None
    prompt_sha256: str | None


@dataclass
class Summary:
    """The one JSON line on stdout that every way out of a run prints (scripts and benchmarks parse it): who ran,
    what the run did when it got that far, why it failed if it did, and the exit code."""

    script: str
    model: str
    mode: str
    output: str | None
    run: RunFacts | None = None
    failure: str | None = None
    exit_code: int | None = None
    load_with: str | None = None
    copy: ScriptCopy | None = None

    def sentence(self) -> str:
        """What the JSON line says, for a person: the rows, their errors, and where the dataset is (and how to open
        it), or why it is not there yet."""
        run = self.run
        assert run is not None, "only a run that reached its pages has a sentence"
        rows = f"{run.rows} row(s): {run.done_this_run} OCR'd this run, {run.resumed} done before"
        said = f"{rows}, {run.errors} with an error (exit {self.exit_code})"
        if self.load_with is not None:
            return f"{said}; the dataset is at {run.output}; open it with {self.load_with}."
        why = "interrupted" if run.interrupted else run.failure or f"{run.missing} row(s) have no outcome yet"
        return f"{said}; not published: {why}. Rerun the same command to resume."

    def line(self) -> str:
        fields = {"script": self.script, "model": self.model, "mode": self.mode, "output": self.output}
        if self.run is not None:
            facts = {key: value for key, value in vars(self.run).items() if key != "extra"}
            fields.update(facts, **self.run.extra)
        if self.failure is not None:
            fields["failure"] = self.failure
        if self.copy is not None:
            fields.update(vars(self.copy))
        fields["core"] = core_identity()
        fields["exit_code"] = self.exit_code
        return redact(json.dumps(fields, sort_keys=False))

    def print_to(self, stream: TextIO) -> None:
        print(self.line(), file=stream, flush=True)
