"""The one JSON summary line every way out of a run prints on stdout, and its one sentence on stderr."""

from __future__ import annotations

import json
import os
import shlex
import time
from dataclasses import dataclass, field
from typing import TextIO

from .rates import billed_pages_per_s
from .redaction import redact
from .version import core_identity

IMPORTED = time.monotonic()


def process_seconds() -> float:
    """Seconds since this process started, interpreter start-up and imports included (Linux: the start time in
    /proc against the same boot clock); elsewhere since this module was imported, the nearest moment known."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic() - IMPORTED


def shell_opening(load_with: str) -> str:
    """The run's `load_dataset` line as a command any shell with uv runs: the Python at hand may lack datasets and
    Pillow (the demo's machine does), so uv brings both for this one call, and --no-project keeps a project in the
    folder it is typed in (a clone's) out of it. Double quotes around the code keep its own quotes readable."""
    code = f"import datasets; print({load_with})"
    quoted = shlex.quote(code) if set(code) & set('"$`\\!') else f'"{code}"'
    return f"uv run --no-project --with datasets --with pillow python -c {quoted}"


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
    next_command: str | None = None
    """The command that goes on, when rerunning the same one would stop the same way (shapes/drive_result.py)."""

    def sentence(self) -> str:
        """What the JSON line says, for a person: the rows, their errors, and where the dataset is (and how to open
        it), or why it is not there yet."""
        run = self.run
        assert run is not None, "only a run that reached its pages has a sentence"
        rows = f"{run.rows} row(s): {run.done_this_run} OCR'd this run, {run.resumed} done before"
        said = f"{rows}, {run.errors} with an error (exit {self.exit_code})"
        if self.load_with is not None:
            return f"{said}; the dataset is at {run.output}; open it with {shell_opening(self.load_with)}."
        why = "interrupted" if run.interrupted else run.failure or f"{run.missing} row(s) have no outcome yet"
        if self.next_command is not None and not run.interrupted:
            return f"{said}; not published: {why} Go on with:\n  {self.next_command}"
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
