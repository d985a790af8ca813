"""The poison-page decisions (poison.py) as scenarios: when a spent budget is the page's fault, how strikes add up
across runs, what the set-aside row says, and how struck pages go back after a death."""

from __future__ import annotations

import asyncio

import pytest

from ocr_core.judging.poison import MAX_STRIKES, Lane, Strikes, fault_of_the_page, set_aside_error


@pytest.mark.parametrize(
    ("answered_since", "others_left", "probe_answered", "page"),
    [
        (True, True, False, True),  # the servers answer others: the page is at fault
        (False, False, True, True),  # nothing else is left to ask, but the servers answer a blank page
        (False, False, False, False),  # nothing answered at the tail, the probe neither: an outage, no strike
        (False, True, False, False),  # nothing answered while others wait: the servers are down, the run stops
    ],
)
def test_a_spent_budget_is_the_pages_fault_only_with_evidence(answered_since, others_left, probe_answered, page):
    assert fault_of_the_page(answered_since, others_left, probe_answered) is page


def test_strikes_count_on_from_earlier_runs_and_deaths_only_once():
    strikes = Strikes({"p": 1})
    assert strikes.count("p") == 1 and not strikes.last_chance("p")
    assert strikes.add_deaths("p", 1, "the engine died") == 1
    assert strikes.add_deaths("p", 1, "the engine died") == 0, "a death seen again is not a new strike"
    assert strikes.last_chance("p") and not strikes.condemned("p")
    strikes.add("p", "kept failing for 900 s")
    assert strikes.condemned("p") and strikes.count("p") == MAX_STRIKES
    assert strikes.reason("p") == set_aside_error(3, 1, "kept failing for 900 s")


def test_the_set_aside_error_says_how_often_since_when_why_and_how_to_retry():
    assert set_aside_error(3, 2, "server answered 500: boom") == (
        "failed every attempt: 3 attempts got no answer, 2 of them in earlier runs (last: server answered 500: "
        "boom); set aside so that the rest publishes: fix the cause, then rerun with --retry-errors to try it again"
    )
    assert set_aside_error(3, 3, None).startswith("failed every attempt: 3 attempts got no answer, 3 of them in")


def test_the_lane_starts_at_one_widens_with_answers_and_narrows_at_a_death():
    async def scenario() -> None:
        lane = Lane()
        await lane.enter(alone=False)
        assert not lane.admits(alone=False), "one struck page at a time after a death"
        await lane.leave(answered=True)
        await lane.enter(alone=False)
        assert lane.admits(alone=False), "one more for each that came back answered"
        await lane.leave(answered=False)
        lane.narrow()
        assert lane.width == 1

    asyncio.run(scenario())


def test_a_page_one_strike_from_the_bound_goes_alone_and_holds_the_others_back():
    async def scenario() -> list[str]:
        lane, order = Lane(), []
        lane.width = 4
        await lane.enter(alone=False)

        async def page(name: str, alone: bool) -> None:
            await lane.enter(alone)
            order.append(name)
            await asyncio.sleep(0.01)
            await lane.leave(answered=True)

        last = asyncio.create_task(page("last chance", alone=True))
        await asyncio.sleep(0)
        other = asyncio.create_task(page("other", alone=False))
        await asyncio.sleep(0.01)
        assert order == [], "the last-chance page waits for the lane to empty, and the other waits behind it"
        await lane.leave(answered=True)
        await asyncio.gather(last, other)
        return order

    assert asyncio.run(scenario()) == ["last chance", "other"]
