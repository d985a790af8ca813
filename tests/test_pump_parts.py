"""The pump's parts, each on its own with fakes around it: the page's life between attempts (page_life.py), its
way through the servers (page_attempts.py), the admission loop (admission.py) and the watches (watches.py).

No engine and no fleet: each part gets only the small things it asks for (a membership that serves, routing that
answers from a script, a window), so a part's rule is checked where it lives; test_pump_faults.py checks them
together through the pump.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import httpx
import pytest
from PIL import Image

from ocr_core.errors import JobFailed
from ocr_core.inputs.source import RowInput
from ocr_core.planning.engine_plan import ReplicaLaunch
from ocr_core.planning.plan_records import rules_of
from ocr_core.serving.chat import Answer, Retryable, RowFailed
from ocr_core.serving.replica import Replica
from ocr_core.shapes import page_life as life_module
from ocr_core.shapes import page_requests as requests_module
from ocr_core.shapes import watches as watches_module
from ocr_core.shapes.admission import Admission
from ocr_core.shapes.page_attempts import Page, PageAttempts
from ocr_core.shapes.page_life import Held, PageLife
from ocr_core.shapes.page_requests import Sent, Streak
from ocr_core.shapes.tally import Tally
from ocr_core.shapes.watches import MemoryWatch, QueueGauges, ReplicaCanaries, TailProbe
from ocr_core.shapes.window import Window
from ocr_core.store.progress import ResultLog, RowResult, read_strikes
from tests.test_pump_faults import recipe

URL = "http://vllm.test"


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    """Backoff of milliseconds: a pause's length is not what these tests look at."""
    monkeypatch.setattr(requests_module, "BACKOFF_BASE_S", 0.001)


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The page life's clock, moved by the test."""
    now = [100.0]
    monkeypatch.setattr(life_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


class Endpoint:
    url = URL
    headers: ClassVar[dict[str, str]] = {}
    launch = ReplicaLaunch(None, (), {})
    spawned = None
    generation = 0
    restarts = 0


class Members:
    """A membership that serves at once: its totals are set by the test."""

    def __init__(self) -> None:
        self.model = "m"
        self.restarts = 0
        self.answered = 0
        self.waited = 0

    async def wait_serving(self) -> list[Replica]:
        self.waited += 1
        return []

    def full(self) -> bool:
        return True


class Supervision:
    """Records the failures it is told of; `deaths` are set by the test."""

    def __init__(self) -> None:
        self.troubles: list[Retryable] = []
        self.deaths: Counter[str] = Counter()
        self.death_causes: dict[str, str] = {}

    def trouble(self, replica: Replica, error: Retryable, generation: int) -> None:
        self.troubles.append(error)


@dataclasses.dataclass
class Witness:
    """The tail probe: answers as told, and counts how often it was asked."""

    answers: bool = True
    asked: int = 0

    async def __call__(self, client: httpx.AsyncClient) -> bool:
        self.asked += 1
        return self.answers


def life_of(folder: Path, held: Held | None = None, witness: Witness | None = None, budget: float = 30.0):
    facts, settings = recipe()
    rules = rules_of(facts, dataclasses.replace(settings, retry_budget=budget))
    log = ResultLog(folder, "20260101T000000Z-aaaaaa", flush_rows=1000)
    members, supervision = Members(), Supervision()
    life = PageLife(members, supervision, rules, log, held or Held(), witness or Witness())
    return life, members, supervision


def failed_send(engine_dead: bool = False) -> Sent:
    return Sent(Replica(0, Endpoint()), 0, retry=Retryable("503 overloaded", engine_dead))


# ---- page_life.py: the retry pause, strikes and the setting aside ----


def test_a_pause_within_the_budget_tells_the_supervision_and_keeps_the_streak(tmp_path, clock):
    life, _, supervision = life_of(tmp_path)
    result = RowResult(0, "train-0", attempts=1)
    streak = asyncio.run(life.pause(failed_send(), result, None, None))
    clock[0] += 10.0
    again = asyncio.run(life.pause(failed_send(), result, streak, None))
    assert streak == again == Streak(100.0, 0, 0)
    assert len(supervision.troubles) == 2 and life.failing == {"train-0"}
    assert life.strikes.count("train-0") == 0


def test_a_restart_in_the_fleet_starts_a_fresh_streak(tmp_path, clock):
    life, members, _ = life_of(tmp_path)
    result = RowResult(0, "train-0", attempts=1)
    streak = asyncio.run(life.pause(failed_send(), result, None, None))
    clock[0] += 20.0
    members.restarts = 1
    assert asyncio.run(life.pause(failed_send(), result, streak, None)) == Streak(120.0, 1, 0)


def test_a_spent_budget_while_others_were_answered_is_a_strike_written_through(tmp_path, clock):
    life, members, _ = life_of(tmp_path, budget=25.0)
    result = RowResult(3, "train-3", attempts=4)
    streak = asyncio.run(life.pause(failed_send(), result, None, None))
    clock[0] += 30.0
    members.answered = 5
    fresh = asyncio.run(life.pause(failed_send(), result, streak, None))
    assert fresh == Streak(130.0, 0, 5)
    assert read_strikes(tmp_path) == {"train-3": 1}
    assert "kept failing for 30 s over 4 requests" in life.strikes.causes["train-3"]


def test_a_spent_budget_with_nothing_answered_and_pages_still_to_come_stops_the_job(tmp_path, clock):
    witness = Witness()
    life, _, _ = life_of(tmp_path, Held(open=2, fed_all=False), witness, budget=25.0)
    result = RowResult(0, "train-0", attempts=3)
    streak = asyncio.run(life.pause(failed_send(), result, None, None))
    clock[0] += 30.0
    with pytest.raises(JobFailed, match="kept failing for 30 s over 3 attempts"):
        asyncio.run(life.pause(failed_send(), result, streak, None))
    assert witness.asked == 0 and read_strikes(tmp_path) == {}


@pytest.mark.parametrize("answers", [True, False])
def test_at_the_tail_the_probe_decides_between_a_strike_and_a_stop(tmp_path, clock, answers):
    """Every row admitted and the one page open failing: the blank page is the only witness left."""
    witness = Witness(answers)
    life, _, _ = life_of(tmp_path, Held(open=1, fed_all=True), witness, budget=25.0)
    result = RowResult(0, "train-0", attempts=3)
    streak = asyncio.run(life.pause(failed_send(), result, None, None))
    clock[0] += 30.0
    if answers:
        asyncio.run(life.pause(failed_send(), result, streak, None))
        assert read_strikes(tmp_path) == {"train-0": 1}
    else:
        with pytest.raises(JobFailed):
            asyncio.run(life.pause(failed_send(), result, streak, None))
        assert read_strikes(tmp_path) == {}
    assert witness.asked == 1


def test_other_pages_open_beside_the_failing_ones_spare_the_probe(tmp_path):
    life, _, _ = life_of(tmp_path, Held(open=3, fed_all=True))
    life.failing = {"train-0", "train-1"}
    assert life.others_left()
    life.failing.add("train-2")
    assert not life.others_left()
    life.clear("train-2")
    assert life.others_left()


def test_deaths_seen_with_the_page_in_flight_are_strikes_counted_once(tmp_path):
    life, _, supervision = life_of(tmp_path)
    result = RowResult(1, "train-1", attempts=1)
    supervision.deaths["train-1"] = 2
    supervision.death_causes["train-1"] = f"the engine at {URL} died while it was in flight"
    life.lane.width = 4
    life.count_deaths(result)
    life.count_deaths(result)
    assert life.strikes.count("train-1") == 2 and read_strikes(tmp_path) == {"train-1": 2}
    assert life.lane.width == 1


def test_a_page_out_of_strikes_is_set_aside_with_the_reason(tmp_path):
    life, members, _ = life_of(tmp_path)
    result = RowResult(0, "train-0")
    assert not asyncio.run(life.set_aside(result))
    for _ in range(life.strikes.bound):
        life.strike(result, "503 overloaded")
    assert asyncio.run(life.set_aside(result))
    assert result.error.startswith("failed every attempt: 3 attempts got no answer") and members.waited == 2


def test_only_a_struck_page_waits_in_the_lane(tmp_path):
    life, _, _ = life_of(tmp_path)

    async def scenario() -> list[int]:
        inside = []
        struck = await life.take_turn("train-0")
        inside.append(life.lane.inside)
        await life.end_turn(struck, answered=False)
        life.strike(RowResult(1, "train-1"), "503")
        struck = await life.take_turn("train-1")
        inside.append(life.lane.inside)
        await life.end_turn(struck, answered=True)
        inside.append(life.lane.inside)
        return inside

    assert asyncio.run(scenario()) == [0, 1, 0]
    assert life.lane.width == 2


# ---- page_attempts.py: one page through the servers ----


def png(width: int = 64, height: int = 48) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buffer, format="PNG")
    return buffer.getvalue()


class Routing:
    """Answers each post from `script` (an Answer, or an exception to raise) and keeps each body it was sent."""

    def __init__(self, *script: Answer | Exception) -> None:
        self.script = list(script)
        self.replica = Replica(0, Endpoint())
        self.bodies: list[dict] = []
        self.avoided: list[Replica | None] = []

    async def pick(self, failed_on: Replica | None = None) -> Replica:
        self.avoided.append(failed_on)
        return self.replica

    async def post(self, replica: Replica, client: object, body: bytes, page: str = "") -> Answer:
        self.bodies.append(json.loads(body))
        reply = self.script.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def attempt(
    tmp_path: Path, routing: Routing, cell: object, module: str = "nanonets_ocr2"
) -> tuple[Page, Tally, PageLife]:
    facts, settings = recipe(module)
    life, members, _ = life_of(tmp_path)
    tally = Tally()
    attempts = PageAttempts(members, routing, facts, rules_of(facts, settings), life, tally)

    async def main() -> Page:
        with ThreadPoolExecutor(1) as prep:
            return await attempts.complete(RowInput(0, "train-0", cell), None, prep)

    return asyncio.run(main()), tally, life


def answer(text: str = "page text", finish_reason: str = "stop") -> Answer:
    return Answer(text, finish_reason, 10, 3)


def test_an_answered_page_names_its_writer_and_its_first_send(tmp_path):
    routing = Routing(answer())
    page, tally, _ = attempt(tmp_path, routing, {"bytes": png(), "path": None})
    assert page.answered and page.result.text == "page text" and page.result.error is None
    assert page.writer is routing.replica and page.first_sent is not None
    assert json.loads(page.result.server)["server"] == URL
    assert tally.whole_at == page.first_sent


def test_a_retried_page_keeps_its_first_send_and_avoids_the_replica_it_failed_on(tmp_path):
    routing = Routing(Retryable("503 overloaded"), answer())
    page, _, life = attempt(tmp_path, routing, {"bytes": png(), "path": None})
    assert page.result.attempts == 2 and page.answered
    assert routing.avoided == [None, routing.replica]
    assert life.failing == set()


def test_a_looping_answer_is_resampled_once_at_the_retry_temperature(tmp_path):
    facts, settings = recipe("lighton_ocr3")
    routing = Routing(answer("# Survey\n\n" + "<td>0</td>" * 300, "length"), answer())
    page, _, _ = attempt(tmp_path, routing, {"bytes": png(), "path": None}, "lighton_ocr3")
    assert page.result.text == "page text" and page.result.attempts == 2 and page.result.error is None
    assert [body["temperature"] for body in routing.bodies] == [settings.temperature, facts.retry_temperature]
    assert (page.result.prompt_tokens, page.result.completion_tokens) == (20, 6)


def test_a_refused_page_is_its_error_row_and_counts_as_answered(tmp_path):
    page, _, _ = attempt(tmp_path, Routing(RowFailed("400: the image is too large")), {"bytes": png(), "path": None})
    assert page.answered and page.result.error == "400: the image is too large" and page.writer is None


def test_an_image_that_cannot_be_read_is_never_sent(tmp_path):
    routing = Routing()
    page, _, _ = attempt(tmp_path, routing, {"bytes": b"not an image", "path": None})
    assert not page.answered and page.result.error and routing.bodies == []
    assert page.first_sent is None


# ---- admission.py: the window kept full ----


class Shown:
    def __init__(self) -> None:
        self.shown: list[tuple[int, int]] = []

    def show(self, in_flight: int, window: int) -> None:
        self.shown.append((in_flight, window))


class CountingWindow(Window):
    """A window that remembers, per freed slot, whether a server answered the page."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit, limit)
        self.acknowledged: list[bool] = []

    async def release(self, waiting: float | None, running: float | None = None, acknowledged: bool = True) -> None:
        self.acknowledged.append(acknowledged)
        await super().release(waiting, running, acknowledged)


def rows(count: int) -> list[RowInput]:
    return [RowInput(index, f"train-{index}", None) for index in range(count)]


def test_admission_keeps_at_most_the_window_in_flight_and_records_every_page():
    window, held, recorded = CountingWindow(2), Held(), []
    admission = Admission(window, held, SimpleNamespace(waiting=None, running=None), Shown(), recorded.append)
    most = [0]

    async def complete(row: RowInput) -> Page:
        most[0] = max(most[0], held.open)
        await asyncio.sleep(0)
        return Page(RowResult(row.index, row.row_id), answered=row.index % 2 == 0)

    asyncio.run(admission.feed(iter(rows(7)), complete))
    assert most[0] == 2 and window.peak_in_flight == 2
    assert sorted(page.result.row_id for page in recorded) == [f"train-{index}" for index in range(7)]
    assert sorted(window.acknowledged) == [False] * 3 + [True] * 4
    assert held.fed_all and held.open == 0 and window.in_flight == 0


def test_a_page_that_fails_the_job_stops_admission_at_once():
    """Window of one: the row after the failing page is never admitted, and the failure is the loop's."""
    window, recorded, started = Window(1, 1), [], []
    admission = Admission(window, Held(), SimpleNamespace(waiting=None, running=None), Shown(), recorded.append)

    async def complete(row: RowInput) -> Page:
        started.append(row.row_id)
        if row.index == 1:
            raise JobFailed("the servers are gone")
        return Page(RowResult(row.index, row.row_id))

    with pytest.raises(JobFailed, match="the servers are gone"):
        asyncio.run(admission.feed(iter(rows(5)), complete))
    assert started == ["train-0", "train-1"]
    assert [page.result.row_id for page in recorded] == ["train-0"]


def test_a_freed_slot_hands_the_queue_gauges_to_an_adaptive_window():
    """A long queue on the servers narrows the window as answered pages free their slots (without the gauges it
    would widen: an empty queue is read where there are none)."""
    window = Window(4, 8, adaptive=True)
    gauges = SimpleNamespace(waiting=20.0, running=0.0)
    admission = Admission(window, Held(), gauges, Shown(), lambda page: None)

    async def complete(row: RowInput) -> Page:
        return Page(RowResult(row.index, row.row_id), answered=True)

    asyncio.run(admission.feed(iter(rows(6)), complete))
    assert window.limit == 1


# ---- watches.py ----


class Metrics:
    def __init__(self, text: str) -> None:
        self.text = text
        self.model = "m"

    async def metrics(self, client: object) -> str:
        return self.text


def test_the_queue_gauges_sum_every_server_and_are_none_without_them():
    text = (
        'vllm:num_requests_waiting{engine="0"} 2.0\nvllm:num_requests_waiting{engine="1"} 3.0\n'
        'vllm:num_requests_running{engine="0"} 4.0\nvllm:other 9.0\n'
    )
    gauges = QueueGauges(Metrics(text))
    asyncio.run(gauges.read(None))
    assert (gauges.waiting, gauges.running) == (5.0, 4.0)
    bare = QueueGauges(Metrics("# no gauges\n"))
    asyncio.run(bare.read(None))
    assert (bare.waiting, bare.running) == (None, None)


class Guard:
    def __init__(self, cap: int) -> None:
        self.next_cap = cap
        self.asked: list[int] = []

    def cap(self, in_flight: int) -> tuple[int, str]:
        self.asked.append(in_flight)
        return self.next_cap, "memory"


def test_the_memory_watch_moves_the_cap_and_says_so_only_for_a_large_move(capsys):
    window = Window(16, 64)
    guard = Guard(8)
    watch = MemoryWatch(guard, window)
    asyncio.run(watch.follow())
    assert window.cap == 8 and window.limit == 8
    guard.next_cap = 7
    asyncio.run(watch.follow())
    assert window.cap == 7
    said = capsys.readouterr().err
    assert said.count("window cap") == 1 and "window cap 64 -> 8: memory" in said


class FakeCanary:
    def __init__(self, clears_after: int) -> None:
        self.seen: list[str] = []
        self.clears_after = clears_after
        self.concluded = False

    def record(self, result: RowResult) -> None:
        self.seen.append(result.row_id)

    @property
    def cleared(self) -> bool:
        return len(self.seen) >= self.clears_after

    def conclude(self) -> None:
        self.concluded = True


def test_each_replica_has_its_own_canary_made_at_its_first_answer():
    made: dict[int, FakeCanary] = {}

    def make(replica: Replica) -> FakeCanary:
        made[replica.index] = FakeCanary(clears_after=2)
        return made[replica.index]

    first, second = Replica(0, Endpoint()), Replica(1, Endpoint())
    canaries = ReplicaCanaries(make)
    canaries.judge(None, RowResult(9, "train-9"))
    for index, writer in enumerate([first, second, first]):
        canaries.judge(writer, RowResult(index, f"train-{index}"))
    assert made[0].seen == ["train-0", "train-2"] and made[1].seen == ["train-1"]
    assert (first.judged, second.judged) == (2, 1)
    assert first.cleared and not second.cleared
    canaries.conclude()
    assert made[0].concluded and made[1].concluded


def test_without_a_canary_no_page_is_judged():
    writer = Replica(0, Endpoint())
    canaries = ReplicaCanaries(None)
    canaries.judge(writer, RowResult(0, "train-0"))
    canaries.conclude()
    assert writer.judged == 0 and canaries.canaries == {}


def test_the_tail_probe_builds_its_page_once_and_reads_a_refusal_as_an_answer(monkeypatch):
    built = []
    monkeypatch.setattr(watches_module, "probe_body", lambda *args: built.append(args) or b"{}")
    facts, _ = recipe()
    statuses = [503, 400]

    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(statuses.pop(0), json={"error": {"message": "no"}})

    probe = TailProbe(Metrics(""), Routing(), facts, {})

    async def main() -> list[bool]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
            return [await probe.answered(client) for _ in range(2)]

    assert asyncio.run(main()) == [False, True]
    assert len(built) == 1
