"""Stop signals: SIGTERM, SIGINT and SIGHUP turned into one orderly stop that keeps every finished row."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..console import say

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


KEPT = "finished rows are kept; rerun the same command to resume"


class Interrupted(BaseException):
    """A stop signal in synchronous code; a BaseException, so no `except Exception` on the way swallows it."""


SAME_PRESS_S = 1.0
"""A SIGINT this soon after the first is the same Ctrl-C: `uv run` forwards the terminal's SIGINT to the script,
which the terminal's process group already delivered, so one press arrives twice."""


class StopSignals:
    """Turns SIGTERM, SIGINT and SIGHUP into one orderly stop; a later signal only says the stop is under way, and
    the echo of one Ctrl-C (SAME_PRESS_S) says nothing. `clock` is the monotonic clock (tests pass their own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}
        self.clock = clock
        self.stopped_at = 0.0
        self.holding = 0
        self.held: int | None = None

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            self.previous.setdefault(signum, signal.getsignal(signum))
            signal.signal(signum, self.on_signal)

    def install_async(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task) -> None:
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self.on_async_signal, signum, task)

    def leave_async(self, loop: asyncio.AbstractEventLoop) -> None:
        """Back to the synchronous handlers before the loop closes (which would reset them to the default, under
        which one more SIGTERM kills the process without its summary); signals in between wait, blocked."""
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)
            self.install()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def on_signal(self, signum: int, frame: object) -> None:
        if not self.first(signum):
            return
        if self.holding:
            self.held = signum
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def whole(self) -> Iterator[None]:
        """Bookkeeping that must happen whole or not at all (a row logged and counted): a stop signal inside the
        block waits for its end and is raised there, so a killed run's summary counts exactly the rows it published."""
        self.holding += 1
        try:
            yield
        finally:
            self.holding -= 1
        if not self.holding and self.held is not None:
            signum, self.held = self.held, None
            raise Interrupted(signum)

    def on_async_signal(self, signum: int, task: asyncio.Task) -> None:
        if self.first(signum):
            task.cancel()

    def first(self, signum: int) -> bool:
        if self.signum is not None:
            echo = signum == self.signum == signal.SIGINT and self.clock() - self.stopped_at < SAME_PRESS_S
            if not echo:
                say(f"{signal.Signals(signum).name} again: already stopping, saving finished rows first")
            return False
        self.signum = signum
        self.stopped_at = self.clock()
        say(f"stopped by {signal.Signals(signum).name}; {KEPT}")
        return True

    def restore(self) -> None:
        """The handlers from before; after a stop, stop signals are ignored while the process winds down, so that
        one more SIGTERM cannot turn the exit code the summary announced into a kill."""
        for signum, handler in self.previous.items():
            signal.signal(signum, signal.SIG_IGN if self.signum is not None else handler)


def uninterrupted(action: Callable[[], str | None]) -> str | None:
    """Runs `action` to its end in a thread; a stop signal meanwhile is held until it is done, then raised, so a
    SIGTERM during the last upload cannot cut it short."""
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(capture(action)), name="closing")
    worker.start()
    held: Interrupted | None = None
    while worker.is_alive():
        try:
            worker.join()
        except Interrupted as exc:
            held = exc
    if held is not None:
        raise held
    value, error = outcome[0]
    if error is not None:
        raise error
    return value


def capture(action: Callable[[], str | None]) -> tuple[str | None, BaseException | None]:
    try:
        return action(), None
    except BaseException as exc:
        return None, exc
