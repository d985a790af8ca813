"""One Ctrl-C is one stop, said once: under `uv run` the script gets the terminal's SIGINT and uv's forwarded copy of
it (issue 50), and the copy printed "SIGINT again: already stopping". A later press, or another signal, still says
the stop is under way. A clock of the test's own stands in for time."""

from __future__ import annotations

import signal

import pytest

from ocr_core.shapes.signals import SAME_PRESS_S, Interrupted, StopSignals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def press(stop: StopSignals, signum: int = signal.SIGINT) -> bool:
    """Delivers `signum` to the handler; whether it started the stop."""
    try:
        stop.on_signal(signum, None)
    except Interrupted:
        return True
    return False


def test_one_press_forwarded_by_uv_is_one_stop_said_once(capsys):
    clock = Clock()
    stop = StopSignals(clock)
    assert press(stop)
    clock.now += SAME_PRESS_S / 10
    assert not press(stop)
    err = capsys.readouterr().err
    assert err.count("stopped by SIGINT") == 1 and "again" not in err


@pytest.mark.parametrize("later", [signal.SIGINT, signal.SIGTERM])
def test_a_later_signal_says_the_stop_is_under_way(capsys, later):
    clock = Clock()
    stop = StopSignals(clock)
    assert press(stop)
    clock.now += SAME_PRESS_S * 3 if later == signal.SIGINT else 0.0
    assert not press(stop, later)
    assert f"{signal.Signals(later).name} again: already stopping" in capsys.readouterr().err
    assert stop.signum == signal.SIGINT
