"""The fleet's parts, each over a membership of fake endpoints: who serves (membership.py), where a page goes
(routing.py), what a death or a departure costs (supervision.py) and how a late replica joins (joining.py).

test_pump_faults.py, test_fleet_start.py and test_server_faults.py drive the parts together through the fleet;
here each part is built alone over the one thing it shares with the others, the membership.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest

from ocr_core.errors import JobFailed
from ocr_core.planning.engine_plan import ReplicaLaunch
from ocr_core.serving.chat import Retryable
from ocr_core.serving.fleet import Fleet
from ocr_core.serving.handle import Target
from ocr_core.serving.joining import Joining
from ocr_core.serving.membership import Membership
from ocr_core.serving.replica import GONE, RECOVERING, SERVING, STARTING, Replica
from ocr_core.serving.routing import PageRouting
from ocr_core.serving.server_api import ServerError
from ocr_core.serving.supervision import ReplicaSupervision


class Endpoint:
    """A server that starts as told: `serves` names the model it answers as, or `fails` why it cannot start."""

    headers: ClassVar[dict[str, str]] = {}
    launch = ReplicaLaunch(None, (), {})
    spawned = None

    def __init__(self, index: int, serves: str = "m", fails: str | None = None) -> None:
        self.url = f"http://replica-{index}.test"
        self.generation = 0
        self.restarts = 0
        self.serves = serves
        self.fails = fails
        self.closed = False

    def spawn(self) -> Target:
        if self.fails:
            raise ServerError(self.fails)
        return Target(self.url, self.serves, {})

    async def recover(self, error: Retryable, generation: int) -> None:
        self.generation += 1

    def close(self) -> None:
        self.closed = True


def members_of(*states: str, given: bool = False) -> Membership:
    members = Membership([Replica(index, Endpoint(index)) for index in range(len(states))], given)
    members.model = "m"
    for replica, state in zip(members.replicas, states):
        replica.state = state
    return members


@pytest.fixture(autouse=True)
def no_version_lookup(monkeypatch):
    """A joining replica is asked its vLLM version over HTTP; these endpoints have none."""

    async def version(url: str, headers: dict) -> str:
        return "0.0.test"

    monkeypatch.setattr("ocr_core.serving.joining.server_version", version)


# ---- membership.py ----


def test_a_page_waiting_for_a_server_wakes_when_one_serves():
    members = members_of(RECOVERING, STARTING)

    async def scenario() -> list[Replica]:
        waiting = asyncio.ensure_future(members.wait_serving())
        await asyncio.sleep(0)
        assert not waiting.done()
        await members.set_state(members.replicas[1], SERVING)
        return await waiting

    assert asyncio.run(scenario()) == [members.replicas[1]]


def test_a_replica_gone_stays_gone_and_the_last_one_gone_fails_the_wait():
    members = members_of(GONE, RECOVERING)
    members.replicas[0].why_gone = "did not start: port taken"

    async def scenario() -> None:
        await members.set_state(members.replicas[0], SERVING)
        assert members.replicas[0].state == GONE and members.staying() == 1
        waiting = asyncio.ensure_future(members.wait_serving())
        members.replicas[1].why_gone = "past its restart budget"
        await members.set_state(members.replicas[1], GONE)
        await waiting

    with pytest.raises(JobFailed, match="no vLLM server is left") as failed:
        asyncio.run(scenario())
    assert "port taken" in str(failed.value) and "restart budget" in str(failed.value)


def test_the_fleet_is_full_once_no_replica_is_still_starting():
    members = members_of(SERVING, STARTING)
    assert not members.full()
    members.replicas[1].state = GONE
    assert members.full()


# ---- routing.py ----


def test_a_page_goes_to_the_least_busy_serving_replica_other_than_the_one_it_failed_on():
    members = members_of(SERVING, SERVING, RECOVERING)
    first, second, recovering = members.replicas
    routing = PageRouting(members)
    first.outstanding, second.outstanding, recovering.outstanding = 3, 1, 0
    assert asyncio.run(routing.pick()) is second
    assert asyncio.run(routing.pick(failed_on=second)) is first
    only = PageRouting(members_of(SERVING))
    assert asyncio.run(only.pick(failed_on=only.members.replicas[0])) is only.members.replicas[0]


def test_a_server_on_trial_holds_no_more_than_its_canary_pages_until_cleared():
    members = members_of(SERVING)
    replica = members.replicas[0]
    routing = PageRouting(members)
    routing.trial_pages = 3
    replica.outstanding, replica.judged = 1, 1
    assert routing.takes_pages(replica)
    replica.judged = 2
    assert not routing.takes_pages(replica)
    replica.cleared = True
    assert routing.takes_pages(replica)


# ---- supervision.py ----


def test_a_dead_engine_is_taken_out_until_its_recovery_and_its_pages_count_a_death():
    members = members_of(SERVING, SERVING)
    supervision = ReplicaSupervision(members)
    replica = members.replicas[0]
    replica.in_flight.add("train-4")

    async def scenario() -> str:
        supervision.trouble(replica, Retryable("refused", engine_dead=True), 0)
        during = replica.state
        await asyncio.gather(*supervision.background)
        return during

    assert asyncio.run(scenario()) == RECOVERING
    assert replica.state == SERVING and replica.handle.generation == 1
    assert supervision.deaths["train-4"] == 1
    assert "replica-0.test died (refused)" in supervision.death_causes["train-4"]


def test_a_failure_that_does_not_mean_a_dead_engine_leaves_the_replica_serving():
    members = members_of(SERVING)
    supervision = ReplicaSupervision(members)
    supervision.trouble(members.replicas[0], Retryable("429 busy"), 0)
    assert members.replicas[0].state == SERVING and not supervision.background


def test_a_retired_replica_hands_its_pages_back_counts_their_deaths_and_is_stopped():
    members = members_of(SERVING, SERVING)
    supervision = ReplicaSupervision(members)
    replica = members.replicas[1]
    replica.in_flight.add("train-2")
    handed_back = replica.handback

    asyncio.run(supervision.retire(replica, "did not start: no GPU"))
    assert replica.state == GONE and replica.why_gone == "did not start: no GPU"
    assert handed_back.is_set() and replica.handle.closed
    assert supervision.deaths == {"train-2": 1} and members.staying() == 1


# ---- joining.py ----


class Retired:
    def __init__(self) -> None:
        self.why: dict[str, str] = {}

    async def __call__(self, replica: Replica, why: str) -> None:
        self.why[replica.url] = why
        replica.state = GONE


def test_a_late_replica_joins_and_is_heard_of_and_one_that_fails_is_retired():
    members = members_of(SERVING, STARTING, STARTING)
    members.replicas[2].handle.fails = "port 8002 is taken"
    retired, joins = Retired(), []
    joining = Joining(members, None, retired)

    async def joined() -> None:
        joins.append(len(members.serving()))

    joining.joined = joined
    asyncio.run(joining.start_rest())
    assert [replica.state for replica in members.replicas] == [SERVING, SERVING, GONE]
    assert joins == [2] and members.replicas[1].version == "0.0.test"
    assert retired.why == {"http://replica-2.test": "did not start: port 8002 is taken"}


def test_a_given_server_that_serves_the_model_under_another_name_is_retired():
    members = members_of(SERVING, STARTING, given=True)
    members.replicas[1].handle.serves = "other"
    retired = Retired()
    joining = Joining(members, None, retired)

    async def scenario() -> None:
        opened = asyncio.get_running_loop().create_future()
        opened.set_result(Target(members.replicas[1].url, "other", {}))
        joining.early = {members.replicas[1]: opened}
        await joining.start_rest()

    asyncio.run(scenario())
    assert "it serves the model as other, the fleet's other servers as m" in retired.why["http://replica-1.test"]


# ---- fleet.py: the parts share one membership ----


def test_the_fleets_parts_share_one_membership():
    fleet = Fleet([Replica(0, Endpoint(0))])
    assert fleet.routing.members is fleet.members is fleet.supervision.members is fleet.joining.members
    fleet.trial_pages = 2
    assert fleet.routing.trial_pages == 2
