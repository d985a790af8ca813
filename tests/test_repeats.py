"""Loop detection: flag a tail of one repeated unit, leave real text alone, trim to one copy."""

from __future__ import annotations

import random

from ocr_core.judging.repeats import repeated_tail, trim_repeats


def test_single_character_loop():
    found = repeated_tail("Title\n\nSome text. " + "q" * 500)
    assert found is not None
    assert found.unit == "q"
    assert found.count == 500


def test_loop_cut_mid_unit_is_still_found():
    text = "Intro. " + "<td>0</td>" * 60 + "<td"
    found = repeated_tail(text)
    assert found is not None
    assert len(found.unit) == len("<td>0</td>")


def test_ordinary_text_is_not_a_loop():
    rng = random.Random(1)
    words = ["river", "bank", "survey", "water", "table", "level", "meter", "the", "of", "and"]
    text = " ".join(rng.choice(words) for _ in range(3000))
    assert repeated_tail(text) is None


def test_short_repeats_are_not_loops():
    assert repeated_tail("Contents ........ 5") is None
    assert repeated_tail("ab" * 20) is None


def test_trim_keeps_one_copy():
    trimmed = trim_repeats("Page text. " + "Lorem ipsum. " * 40)
    assert trimmed.startswith("Page text. Lorem ipsum")
    assert trimmed.count("Lorem") == 1
    assert trim_repeats("nothing repeats here") == "nothing repeats here"
