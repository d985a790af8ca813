"""The rate definitions (rates.py), pinned by scenarios whose send and finish times are known."""

from __future__ import annotations

import pytest

from ocr_core.rates import billed_pages_per_s, counts_as_sustained, sustained


def steady_stream(rate: float, latency: float, first: float, count: int) -> list[tuple[float, float]]:
    """Pages sent one every 1/rate seconds from `first`, each done `latency` seconds after its send."""
    return [(first + i / rate, first + i / rate + latency) for i in range(count)]


def test_a_page_counts_only_when_sent_and_finished_inside_the_interval():
    assert counts_as_sustained(sent=2.0, finished=5.0, start=2.0, end=5.0)
    assert not counts_as_sustained(sent=1.9, finished=3.0, start=2.0, end=5.0), "half decoded before the start"
    assert not counts_as_sustained(sent=4.0, finished=5.1, start=2.0, end=5.0), "finished in the final drain"


def test_pages_half_decoded_before_the_last_replica_joined_are_not_counted():
    """One replica at 2 pages/s for 10 s, then two at 4 pages/s: the pages sent before the join and finished after
    it are the work the old steady rate wrongly counted; sustained leaves them out and reads at most 4."""
    latency = 3.0
    before = steady_stream(2.0, latency, 0.0, 20)
    after = steady_stream(4.0, latency, 10.0, 80)
    rate = sustained(10.0, after[-1][0], before + after)
    assert rate is not None
    assert rate.start == 10.0 and rate.end == pytest.approx(29.75)
    inside = [page for page in after if page[1] <= rate.end]
    assert rate.pages == len(inside) == 68
    assert rate.pages_per_s == pytest.approx(68 / 19.75)
    assert rate.pages_per_s < 4.0


def test_the_final_burst_after_the_last_send_is_not_counted():
    """2 pages/s, 1 s each, then a window of 8 drains in the second after the last send: sustained stops at the
    last send, so neither the burst nor the one page still decoding then is counted."""
    pages = steady_stream(2.0, 1.0, 0.0, 40) + [(19.5, 20.5 + i / 8) for i in range(8)]
    rate = sustained(0.0, 19.5, pages)
    assert rate is not None and rate.pages == 38
    assert rate.pages_per_s == pytest.approx(38 / 19.5)


def test_no_interval_when_the_fleet_never_served_whole_or_the_window_held_every_page():
    pages = steady_stream(2.0, 1.0, 0.0, 10)
    assert sustained(None, 4.5, pages) is None, "a replica was still starting when the last page went"
    assert sustained(5.0, 4.5, pages) is None, "whole only after the last send"
    assert sustained(0.0, None, []) is None, "nothing sent"
    every_page_at_once = [(0.0 + i * 0.001, 10.0) for i in range(64)]
    assert sustained(0.0, 0.063, every_page_at_once) is None


def test_billed_is_rows_over_the_whole_process_life():
    assert billed_pages_per_s(100, 50.0) == 2.0
    assert billed_pages_per_s(0, 12.0) == 0.0
    assert billed_pages_per_s(5, 0.0) is None
