"""The circuit breaker: a job whose pages fail alike stops with the cause and the fix, a healthy one never does."""

from __future__ import annotations

import pytest

from ocr_core.errors import JobFailed, internal_error
from ocr_core.judging.breaker import Breaker, error_kind

REJECTED = "server rejected the page (400): The model does not support image input"
BAD_IMAGE = "bad image: not a readable image (UnidentifiedImageError)"
ENGINE = "engine rejected the page: ValueError: chat template kwargs do not apply"
LOOP = (
    "repetition loop: output hit max_tokens repeating 'q' 900 times after 1 attempt(s); text holds the trimmed output"
)
TRUNCATED = "truncated: the answer hit max_tokens (16) before the model finished; text holds what was written"


def feed(breaker: Breaker, outcomes: list[str | None]) -> None:
    for error in outcomes:
        breaker.record(error)


def trip_message(breaker: Breaker, outcomes: list[str | None]) -> str:
    with pytest.raises(JobFailed) as caught:
        feed(breaker, outcomes)
    return str(caught.value)


def test_first_pages_all_rejected_by_the_server_stop_the_job():
    breaker = Breaker(image="vllm/vllm-openai:v0.10.2")
    feed(breaker, [REJECTED] * 7)
    message = trip_message(breaker, [REJECTED])
    assert "server rejected the page" in message
    assert "does not support image input" in message
    assert "vision-language model" in message and "vllm/vllm-openai:v0.10.2" in message
    assert "--retry-errors" in message


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        (BAD_IMAGE, "--image-column"),
        ("bad pdf: scans/a.pdf is encrypted (password protected): decrypt it first", "qpdf --decrypt"),
        (ENGINE, "chat template"),
        (LOOP, "--temperature"),
        (TRUNCATED, "--max-tokens"),
        (internal_error("parsing the answer", OverflowError("int too large")), "--verbose"),
    ],
)
def test_each_kind_names_its_fix(error, fix):
    assert fix in trip_message(Breaker(), [error] * 8)


def test_mixed_kinds_at_the_start_do_not_trip():
    breaker = Breaker()
    feed(breaker, [REJECTED] * 7 + [BAD_IMAGE])
    feed(breaker, [None] * 20)


def test_one_success_among_the_first_pages_keeps_the_job_going():
    breaker = Breaker()
    feed(breaker, [REJECTED] * 4 + [None] + [REJECTED] * 3 + [None] * 20)


def test_the_first_pages_rule_only_looks_at_the_first_pages():
    breaker = Breaker()
    feed(breaker, [None] + [REJECTED] * 30)


def test_error_rate_trips_once_enough_pages_have_an_outcome():
    breaker = Breaker(max_error_rate=0.8)
    feed(breaker, [None] * 10 + [BAD_IMAGE, REJECTED] * 20)
    message = trip_message(breaker, [BAD_IMAGE])
    assert "41 of the last 51 pages failed" in message
    assert "bad image" in message and "--image-column" in message


def test_error_rate_is_over_a_sliding_window():
    breaker = Breaker(max_error_rate=0.8)
    feed(breaker, [None] * 300 + [REJECTED] * 80)
    message = trip_message(breaker, [REJECTED])
    assert "81 of the last 100 pages failed" in message


def test_a_lower_bound_trips_sooner():
    breaker = Breaker(max_error_rate=0.1)
    feed(breaker, [None] * 45)
    feed(breaker, [LOOP] * 5)
    message = trip_message(breaker, [LOOP])
    assert "repetition loop" in message


def test_rate_of_one_turns_the_breaker_off():
    breaker = Breaker(max_error_rate=1.0)
    feed(breaker, [REJECTED] * 500)


def test_error_kinds():
    assert error_kind(REJECTED) == "server rejected the page"
    assert error_kind("server rejected the page (413): too large") == "server rejected the page"
    assert error_kind(BAD_IMAGE) == "bad image"
    assert error_kind(ENGINE) == "engine rejected the page"
    assert error_kind(LOOP) == "repetition loop"
    assert error_kind(TRUNCATED) == "truncated"
    assert error_kind(internal_error("preparing the page", RuntimeError("boom"))) == "internal error"
    assert error_kind("something new: detail") == "something new"
