"""The server shape's fault suite: every answer a server can give, and what the pump makes of it.

A fake server (httpx.MockTransport) stands in for vLLM, so status codes, bodies, timeouts and refused connections
are exact and cost nothing; the pump is driven as the served driver drives it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from PIL import Image

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.errors import JobFailed
from ocr_core.facts import ModelFacts, default_parse
from ocr_core.inputs.source import RowInput
from ocr_core.judging.canary import Canary, CanaryContext
from ocr_core.planning.engine_plan import ReplicaLaunch
from ocr_core.planning.plan_records import rules_of
from ocr_core.serving.chat import Retryable, RowFailed, post_chat
from ocr_core.serving.fleet import Fleet
from ocr_core.serving.replica import SERVING, STARTING, Replica
from ocr_core.settings import Settings
from ocr_core.shapes import page_attempts as attempts_module
from ocr_core.shapes import page_life as life_module
from ocr_core.shapes import page_requests as requests_module
from ocr_core.shapes.page_requests import retry_delay
from ocr_core.shapes.pump import Pump
from ocr_core.shapes.tally import ProgressBar
from ocr_core.shapes.window import Window
from ocr_core.store.progress import ResultLog, read_results
from ocr_core.summary_line import RunFacts, process_seconds
from tests.testbed.recipes import model_facts

URL = "http://vllm.test"
Handler = Callable[[httpx.Request], httpx.Response]


def page_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(buffer, format="PNG")
    return buffer.getvalue()


PAGE = page_png()


def answer(text: str = "page text", finish_reason: str = "stop") -> httpx.Response:
    body = {
        "choices": [{"message": {"content": text}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    }
    return httpx.Response(200, json=body)


def refusal(status: int, message: str = "no", headers: dict | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message}}, headers=headers)


class FakeServer:
    """Answers chat requests in turn from `script` (then with `rest`), and 404 to anything else."""

    def __init__(self, script: list[httpx.Response | Exception], rest: Handler = lambda request: answer()) -> None:
        self.script = list(script)
        self.rest = rest
        self.times: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        self.times.append(time.monotonic())
        if not self.script:
            return self.rest(request)
        reply = self.script.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def recipe(module="nanonets_ocr2", *argv: str) -> tuple[ModelFacts, Settings]:
    facts = model_facts(module)
    return facts, parse_arguments(build_parser("recipe.py", facts, "server"), ["in", "./out", *argv])


def rows(count: int, page: bytes = PAGE) -> list[RowInput]:
    return [RowInput(index, f"train-{index}", {"bytes": page, "path": None}) for index in range(count)]


@dataclasses.dataclass
class Outcome:
    results: dict[str, dict]
    progress: ProgressBar
    failure: JobFailed | None
    recovered: list[Retryable]


class FakeEndpoint:
    """What the fleet asks of one server: its address, its generation, and a recovery that records the error and,
    with `restarts`, reports a restarted engine (a new generation), as a spawned server's does."""

    def __init__(self, url: str = URL, restarts: bool = False, stalls_fail: bool = False) -> None:
        self.url = url
        self.headers: dict[str, str] = {}
        self.launch = ReplicaLaunch(None, (), {})
        self.spawned = None
        self.generation = 0
        self.restarts = 0
        self.restarting = restarts
        self.stalls_fail = stalls_fail
        self.recovered: list[Retryable] = []
        self.closed = False

    async def recover(self, error: Retryable, generation: int) -> int:
        self.recovered.append(error)
        if self.restarting and generation == self.generation:
            self.generation += 1
            self.restarts += 1
        return self.generation

    async def stalled(self, reason: str, generation: int) -> None:
        if self.stalls_fail:
            raise JobFailed(f"{self.url} hung: {reason}")
        self.generation += 1

    def close(self) -> None:
        self.closed = True


def fleet_of(*endpoints: FakeEndpoint) -> Fleet:
    """Serving replicas of the fake endpoints. Their requests go at once: a fake endpoint has no API server
    processes to spread connections over, and its deaths are timed in milliseconds (tests/test_connection_pacing.py
    covers the spacing)."""
    fleet = Fleet([Replica(index, endpoint) for index, endpoint in enumerate(endpoints)])
    fleet.members.model = "m"
    for replica in fleet.replicas:
        replica.state = SERVING
        replica.connection_gap = 0.0
    return fleet


def run_pump(
    folder: Path,
    server: Handler,
    count: int = 4,
    facts: ModelFacts | None = None,
    args: Settings | None = None,
    retry_budget: float = 30.0,
    page: bytes = PAGE,
    restarts: bool = False,
    fleet: Fleet | None = None,
    window: int = 1,
) -> Outcome:
    """Pumps `count` pages through a window of one (so the fake server sees them in order), by default to one
    fake endpoint (`restarts`: its recoveries restart the engine)."""
    default_facts, default_args = recipe()
    facts, args = facts or default_facts, args or default_args
    fleet = fleet or fleet_of(FakeEndpoint(restarts=restarts))
    settings = dataclasses.replace(args, request_timeout=5.0, retry_budget=retry_budget)
    log = ResultLog(folder, "20260101T000000Z-aaaaaa", flush_rows=1000)
    progress = ProgressBar(count, 0)
    pump = Pump(
        fleet,
        facts,
        rules_of(facts, settings),
        Window(window, window),
        log,
        progress,
        transport=httpx.MockTransport(server),
    )
    failure = None
    try:
        asyncio.run(pump.run(iter(rows(count, page))))
    except JobFailed as exc:
        failure = exc
    results = {row["row_id"]: row for row in read_results(folder).to_pylist()}
    recovered = [error for replica in fleet.replicas for error in replica.handle.recovered]
    return Outcome(results, progress, failure, recovered)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    """Backoff of milliseconds: the retry decisions are the point here, not the pauses."""
    monkeypatch.setattr(requests_module, "BACKOFF_BASE_S", 0.001)


# ---- one request: the status-to-outcome map ----


async def post_once(reply: httpx.Response | Exception):
    async with httpx.AsyncClient(transport=httpx.MockTransport(FakeServer([reply]))) as client:
        return await post_chat(client, URL, b"{}")


def outcome_of(reply: httpx.Response | Exception) -> BaseException | object:
    try:
        return asyncio.run(post_once(reply))
    except (Retryable, RowFailed, JobFailed) as exc:
        return exc


def request() -> httpx.Request:
    return httpx.Request("POST", f"{URL}/v1/chat/completions")


def test_answer_is_read():
    read = outcome_of(answer("hello", "length"))
    assert (read.text, read.finish_reason, read.prompt_tokens, read.completion_tokens) == ("hello", "length", 10, 3)


@pytest.mark.parametrize(
    ("reply", "kind", "words"),
    [
        (httpx.Response(200, text="<html>proxy</html>"), RowFailed, "internal error while reading the answer"),
        (httpx.Response(200, json={"object": "error"}), RowFailed, "internal error while reading the answer"),
        (httpx.Response(200, json={"choices": []}), RowFailed, "internal error while reading the answer"),
        (refusal(400, "image input not supported"), RowFailed, "server rejected the page (400): image input"),
        (refusal(413, "too large"), RowFailed, "server rejected the page (413)"),
        (refusal(401), JobFailed, "API key"),
        (refusal(403), JobFailed, "API key"),
        (refusal(404, "model m does not exist"), JobFailed, "--model"),
        (refusal(408), Retryable, "408"),
        (refusal(425), Retryable, "425"),
        (refusal(429), Retryable, "429"),
        (refusal(500), Retryable, "500"),
        (refusal(503), Retryable, "503"),
        (httpx.ReadTimeout("slow", request=request()), Retryable, "--request-timeout"),
        (httpx.ConnectError("refused", request=request()), Retryable, "connection failed"),
    ],
    ids=lambda value: None if isinstance(value, (str, type)) else type(value).__name__,
)
def test_status_to_outcome(reply, kind, words):
    outcome = outcome_of(reply)
    assert isinstance(outcome, kind), outcome
    assert words in str(outcome)


@pytest.mark.parametrize(
    ("reply", "kind", "words"),
    [
        (httpx.Response(502, text="<html>Bad Gateway</html>"), Retryable, "502: <html>Bad Gateway</html>"),
        (refusal(422, "prompt too long"), RowFailed, "server rejected the page (422): prompt too long"),
        (httpx.Response(400, json={"message": "flat error"}), RowFailed, "(400): flat error"),
        (httpx.Response(200, json={"choices": [{"message": {"content": ["a"]}}]}), RowFailed, "not text"),
    ],
    ids=["html-502", "422", "flat-400", "list-content"],
)
def test_odd_bodies_keep_their_outcome_and_reason(reply, kind, words):
    outcome = outcome_of(reply)
    assert isinstance(outcome, kind), outcome
    assert words in str(outcome)


def test_an_answer_without_content_is_empty_text():
    body = {"choices": [{"message": {"content": None}, "finish_reason": "stop"}]}
    read = outcome_of(httpx.Response(200, json=body))
    assert (read.text, read.prompt_tokens, read.completion_tokens) == ("", 0, 0)


@pytest.mark.parametrize(
    ("reply", "engine_dead"),
    [
        (refusal(500), True),
        (refusal(503), True),
        (httpx.ConnectError("refused", request=request()), True),
        (refusal(408), False),
        (refusal(429), False),
        (httpx.ReadTimeout("slow", request=request()), False),
        (httpx.ConnectTimeout("unreachable", request=request()), True),
    ],
    ids=["500", "503", "refused", "408", "429", "timeout", "connect-timeout"],
)
def test_only_server_errors_and_refused_connections_ask_for_a_health_check(reply, engine_dead):
    outcome = outcome_of(reply)
    assert isinstance(outcome, Retryable)
    assert outcome.engine_dead is engine_dead


def test_retry_after_in_seconds_is_kept():
    outcome = outcome_of(refusal(429, headers={"Retry-After": "7"}))
    assert isinstance(outcome, Retryable) and outcome.retry_after == 7.0
    assert outcome_of(refusal(503)).retry_after is None


def test_retry_after_as_an_http_date_becomes_seconds():
    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=40), usegmt=True)
    outcome = outcome_of(refusal(503, headers={"Retry-After": when}))
    assert 30.0 <= outcome.retry_after <= 40.0


def test_retry_after_is_bounded_and_never_negative():
    assert outcome_of(refusal(429, headers={"Retry-After": "86400"})).retry_after <= 600.0
    past = format_datetime(datetime.now(timezone.utc) - timedelta(hours=1), usegmt=True)
    assert outcome_of(refusal(429, headers={"Retry-After": past})).retry_after == 0.0
    assert outcome_of(refusal(429, headers={"Retry-After": "soon"})).retry_after is None


def test_retry_delay_grows_is_capped_and_honours_retry_after():
    delays = [retry_delay(attempt) for attempt in range(1, 60)]
    assert delays[0] <= 2 * requests_module.BACKOFF_BASE_S
    assert max(delays) <= requests_module.BACKOFF_CAP_S
    assert min(retry_delay(2, retry_after=20.0) for _ in range(50)) >= 20.0


# ---- the pump: transient failures are retried, never a row's outcome ----


def test_a_few_503s_then_answers_finish_every_page(tmp_path):
    server = FakeServer([refusal(503), refusal(503), refusal(503)])
    outcome = run_pump(tmp_path, server, count=3)
    assert outcome.failure is None
    assert [row["error"] for row in outcome.results.values()] == [None] * 3
    assert outcome.results["train-0"]["attempts"] == 4
    assert len(outcome.recovered) == 3


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried(tmp_path, status):
    outcome = run_pump(tmp_path, FakeServer([refusal(status)]), count=2)
    assert outcome.failure is None
    assert [row["error"] for row in outcome.results.values()] == [None, None]


def test_timeouts_and_refused_connections_are_retried(tmp_path):
    script = [httpx.ReadTimeout("slow", request=request()), httpx.ConnectError("refused", request=request())]
    outcome = run_pump(tmp_path, FakeServer(script), count=2)
    assert outcome.failure is None
    assert outcome.results["train-0"]["attempts"] == 3
    assert [row["error"] for row in outcome.results.values()] == [None, None]


def test_past_its_retry_budget_the_job_stops_and_keeps_finished_rows(tmp_path):
    server = FakeServer([answer("first page")], rest=lambda request: refusal(503, "overloaded"))
    outcome = run_pump(tmp_path, server, count=3, retry_budget=0.3)
    assert outcome.failure is not None
    message = str(outcome.failure)
    assert "503" in message and "overloaded" in message and "--retry-budget" in message
    assert list(outcome.results) == ["train-0"]
    assert outcome.results["train-0"]["text"] == "first page"


def test_retry_after_is_waited_for(tmp_path):
    server = FakeServer([refusal(429, headers={"Retry-After": "1"})])
    outcome = run_pump(tmp_path, server, count=1)
    assert outcome.failure is None
    assert server.times[1] - server.times[0] >= 1.0


def test_an_api_key_refused_mid_run_stops_the_job_at_once(tmp_path):
    server = FakeServer([answer("first page"), refusal(401)])
    outcome = run_pump(tmp_path, server, count=3)
    assert isinstance(outcome.failure, JobFailed) and "API key" in str(outcome.failure)
    assert len(server.times) == 2
    assert list(outcome.results) == ["train-0"]


@pytest.fixture
def request_clock(monkeypatch) -> list[float]:
    """The pump's clock, moved only by the fake server: every failing request takes ten seconds."""
    now = [100.0]
    for module in (life_module, attempts_module):
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def slow_failures(now: list[float], failures: int) -> FakeServer:
    """The first `failures` requests are 503s of ten seconds each on the pump's clock; the rest are answered."""

    def reply(request: httpx.Request) -> httpx.Response:
        if len(server.times) > failures:
            return answer("late page")
        now[0] += 10.0
        return refusal(503, "overloaded")

    server = FakeServer([], rest=reply)
    return server


def test_a_page_failing_past_its_budget_stops_the_job_after_a_counted_number_of_attempts(tmp_path, request_clock):
    server = slow_failures(request_clock, failures=6)
    outcome = run_pump(tmp_path, server, count=2, retry_budget=25.0)
    assert outcome.failure is not None
    assert "page train-0 kept failing for 30 s over 4 attempts (--retry-budget 25 s)" in str(outcome.failure)
    assert len(server.times) == 4
    assert outcome.results == {}


class RestartsAtThirdFailure(FakeEndpoint):
    """An engine found dead once, at the page's third failure (more deaths with it in flight would set it aside)."""

    async def recover(self, error: Retryable, generation: int) -> int:
        self.recovered.append(error)
        if len(self.recovered) == 3:
            self.generation += 1
        return self.generation


def test_a_restarted_engine_gives_the_page_a_fresh_budget(tmp_path, request_clock):
    """Failures at 110, 120, 130 (20 s: within the budget of 25), a restart, then 140-160: a fresh budget."""
    server = slow_failures(request_clock, failures=6)
    fleet = fleet_of(RestartsAtThirdFailure())
    outcome = run_pump(tmp_path, server, count=2, retry_budget=25.0, fleet=fleet)
    assert outcome.failure is None
    assert outcome.results["train-0"]["attempts"] == 7
    assert outcome.results["train-0"]["text"] == "late page"
    assert len(outcome.recovered) == 6


# ---- a repetition loop: one resample at the card's retry temperature, then flagged and trimmed ----

LOOPING_PAGE = "# Survey\n\n" + "<td>0</td>" * 300


def chat_bodies(replies: list[httpx.Response]) -> tuple[FakeServer, list[dict]]:
    """A fake server answering `replies` in turn, and the chat bodies it was sent."""
    bodies: list[dict] = []

    def reply(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return replies[len(bodies) - 1]

    return FakeServer([], rest=reply), bodies


def test_a_loop_is_resampled_once_at_the_retry_temperature_then_flagged_and_trimmed(tmp_path):
    facts, args = recipe("lighton_ocr3")
    server, bodies = chat_bodies([answer(LOOPING_PAGE, "length")] * 2)
    outcome = run_pump(tmp_path, server, count=1, facts=facts, args=args)
    assert [body["temperature"] for body in bodies] == [args.temperature, facts.retry_temperature]
    assert args.temperature != facts.retry_temperature
    row = outcome.results["train-0"]
    assert row["attempts"] == 2
    assert row["error"].startswith("repetition loop") and "after 2 attempt(s)" in row["error"]
    assert row["text"] == "# Survey\n\n<td>0</td>"
    assert (row["prompt_tokens"], row["completion_tokens"]) == (20, 6)
    assert (outcome.progress.tally.loops, outcome.progress.tally.errors) == (1, 1)


def test_a_resample_that_finishes_is_a_clean_row(tmp_path):
    facts, args = recipe("lighton_ocr3")
    server, bodies = chat_bodies([answer(LOOPING_PAGE, "length"), answer("# Survey", "stop")])
    outcome = run_pump(tmp_path, server, count=1, facts=facts, args=args)
    row = outcome.results["train-0"]
    assert (row["text"], row["error"], row["attempts"]) == ("# Survey", None, 2)
    assert len(bodies) == 2


def test_a_card_without_a_retry_temperature_flags_the_loop_without_resampling(tmp_path):
    server, bodies = chat_bodies([answer(LOOPING_PAGE, "length")])
    outcome = run_pump(tmp_path, server, count=1)
    row = outcome.results["train-0"]
    assert len(bodies) == 1 and row["attempts"] == 1
    assert row["error"].startswith("repetition loop") and row["text"] == "# Survey\n\n<td>0</td>"


# ---- one odd page is one error row, and the run goes on ----


def test_answers_the_driver_cannot_read_fail_their_row_only(tmp_path):
    script = [answer("zero"), httpx.Response(200, text="not json"), httpx.Response(200, json={"object": "x"})]
    outcome = run_pump(tmp_path, FakeServer(script), count=4)
    assert outcome.failure is None
    errors = [row["error"] for row in outcome.results.values()]
    assert errors[0] is None and errors[3] is None
    assert errors[1].startswith("internal error while reading the answer: JSONDecodeError")
    assert errors[2].startswith("internal error while reading the answer: KeyError")
    assert outcome.results["train-3"]["text"] == "page text"


def test_a_failing_build_content_hook_fails_its_row_only(tmp_path, monkeypatch):
    facts, args = recipe()
    calls = []

    def build_content(self: ModelFacts, image_part: dict) -> list[dict]:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("prompt template broke")
        return [image_part]

    monkeypatch.setattr(ModelFacts, "build_content", build_content)  # a message that cannot be built for one page

    outcome = run_pump(tmp_path, FakeServer([]), 3, facts, args)
    assert outcome.failure is None
    assert (
        outcome.results["train-1"]["error"]
        == "internal error while preparing the page: RuntimeError: prompt template broke"
    )
    assert outcome.results["train-0"]["error"] is None and outcome.results["train-2"]["error"] is None


def test_a_failing_parse_hook_fails_its_row_only(tmp_path):
    facts, args = recipe()

    def parse(text: str, options: Mapping[str, Any]):
        if text == "poison":
            raise ValueError("cannot parse")
        return default_parse(text, options)

    server = FakeServer([answer("ok"), answer("poison")])
    outcome = run_pump(tmp_path, server, 3, dataclasses.replace(facts, parse=parse), args)
    assert outcome.failure is None
    assert outcome.results["train-1"]["error"] == "internal error while parsing the answer: ValueError: cannot parse"
    assert [outcome.results[f"train-{i}"]["text"] for i in (0, 2)] == ["ok", "page text"]


def test_hpd_answer_with_an_absurd_bbox_is_one_error_row(tmp_path):
    facts, args = recipe("hpd_parsing")
    huge = f"<BLOCK>text [0, 0, {'9' * 400}, 10]<CHILD>Words"
    outcome = run_pump(tmp_path, FakeServer([answer(huge)]), 2, facts, args)
    assert outcome.failure is None
    assert "cannot be stored in column hpd_blocks" in outcome.results["train-0"]["error"]
    assert outcome.results["train-0"]["text"] == "Words"
    assert outcome.results["train-1"]["error"] is None


# ---- outcomes the run reports ----


def test_truncated_pages_are_flagged_and_counted(tmp_path):
    server = FakeServer([answer("half a pa", "length")])
    outcome = run_pump(tmp_path, server, count=2)
    assert outcome.results["train-0"]["text"] == "half a pa"
    assert outcome.results["train-0"]["error"].startswith("truncated:")
    assert outcome.results["train-1"]["error"] is None
    assert (outcome.progress.tally.truncated, outcome.progress.tally.errors) == (1, 1)


def test_every_page_refused_stops_the_job_with_the_cause(tmp_path):
    server = FakeServer([], rest=lambda request: refusal(400, "this model does not take images"))
    outcome = run_pump(tmp_path, server, count=40)
    assert outcome.failure is not None
    message = str(outcome.failure)
    assert "server rejected the page" in message and "vision-language" in message and "--retry-errors" in message
    assert len(outcome.results) == 8
    assert all(row["error"].startswith("server rejected the page (400)") for row in outcome.results.values())


def test_a_multi_frame_page_keeps_its_text_and_says_what_was_not_read(tmp_path):
    frames = [Image.new("L", (64, 48), shade) for shade in (255, 128, 0)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="TIFF", save_all=True, append_images=frames[1:])
    outcome = run_pump(tmp_path, FakeServer([]), count=1, page=buffer.getvalue())
    row = outcome.results["train-0"]
    assert row["text"] == "page text"
    assert row["error"].startswith("only frame 1 of 3")


# ---- several replicas: the least busy takes the page, a failing one hands its pages to the others ----

OTHER = "http://other.test"


def by_host(handlers: Mapping[str, Callable[[httpx.Request], Any]]) -> Callable[[httpx.Request], Any]:
    """A transport handler that answers each replica's requests with its own handler (async ones are awaited)."""

    def handle(request: httpx.Request) -> Any:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        return handlers[f"{request.url.scheme}://{request.url.host}"](request)

    return handle


def two_replicas(first: FakeEndpoint | None = None, second: FakeEndpoint | None = None) -> Fleet:
    return fleet_of(first or FakeEndpoint(URL), second or FakeEndpoint(OTHER))


def answered(fleet: Fleet) -> list[int]:
    return [replica.answered for replica in fleet.replicas]


def test_the_replica_with_fewest_requests_outstanding_takes_the_next_page(tmp_path):
    """Replica 0 holds every request until the other has answered all the rest: round robin would have sent it
    every other page; least-outstanding sends it a page only while the other is as busy (at most half the window)."""
    fleet = two_replicas()
    count, window = 12, 4

    async def held(request: httpx.Request) -> httpx.Response:
        """Answers once every page is either answered by the other replica or held here (bounded, not to hang)."""
        for _ in range(1000):
            if sum(answered(fleet)) + fleet.replicas[0].outstanding >= count:
                break
            await asyncio.sleep(0.01)
        return answer()

    def quick(request: httpx.Request) -> httpx.Response:
        return answer()

    outcome = run_pump(tmp_path, by_host({URL: held, OTHER: quick}), count=count, fleet=fleet, window=window)
    assert outcome.failure is None
    slow, quick_pages = answered(fleet)
    assert 1 <= slow <= window // 2 and slow + quick_pages == count
    assert [row["error"] for row in outcome.results.values()] == [None] * count


def test_a_dead_replica_hands_its_pages_to_the_other(tmp_path):
    fleet = two_replicas()

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    outcome = run_pump(tmp_path, by_host({URL: refused, OTHER: lambda request: answer()}), count=6, fleet=fleet)
    assert outcome.failure is None
    assert [row["error"] for row in outcome.results.values()] == [None] * 6
    assert answered(fleet) == [0, 6]
    assert outcome.recovered, "the dead replica was never asked to recover"


def test_the_fleet_description_counts_pages_and_servers_apart(tmp_path):
    """Before: 12 pages from 2 servers read "2 server(s) given with --server, 2 answered pages" in the summary,
    the card and inference_info: the servers that answered, counted as pages."""
    fleet = two_replicas()
    fleet.members.given = True
    outcome = run_pump(tmp_path, lambda request: answer(), count=12, fleet=fleet, window=4)
    assert outcome.failure is None
    assert fleet.describe() == "2 server(s) given with --server, 2 of them answered 12 page(s)"
    first, _ = answered(fleet)
    fleet.replicas[1].answered = 0
    assert fleet.describe().endswith(f", 1 of them answered {first} page(s)")


class Unreachable(FakeEndpoint):
    """A server this run did not start that nothing reaches: its recovery looks at /health, which answers once
    `reachable` is set (never, unless a test sets it)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.reachable = asyncio.Event()

    async def recover(self, error: Retryable, generation: int) -> int:
        self.recovered.append(error)
        await self.reachable.wait()
        return self.generation


def test_an_unreachable_replica_is_taken_out_and_its_pages_go_to_the_others(tmp_path):
    """Before: a connect timeout counted as a slow page, so the unreachable member stayed in the fleet and, with the
    fewest requests outstanding, took the first attempt of every page (27 of 67 in the review's reproduction)."""
    fleet = two_replicas(Unreachable(URL))
    tried: list[str] = []

    def unreachable(request: httpx.Request) -> httpx.Response:
        tried.append(str(request.url))
        raise httpx.ConnectTimeout("timed out connecting", request=request)

    outcome = run_pump(tmp_path, by_host({URL: unreachable, OTHER: lambda request: answer()}), count=6, fleet=fleet)
    assert outcome.failure is None
    assert [row["error"] for row in outcome.results.values()] == [None] * 6
    assert len(tried) == 1, "pages kept going to the unreachable replica"
    assert answered(fleet) == [0, 6] and len(outcome.recovered) == 1
    assert fleet.replicas[0].state == "recovering"


def test_an_unreachable_replica_rejoins_once_it_answers(tmp_path):
    member = Unreachable(URL)
    fleet = two_replicas(member)

    def first(request: httpx.Request) -> httpx.Response:
        if not member.reachable.is_set():
            raise httpx.ConnectTimeout("timed out connecting", request=request)
        return answer()

    def other(request: httpx.Request) -> httpx.Response:
        if fleet.replicas[1].answered == 2:
            member.reachable.set()
        return answer()

    outcome = run_pump(tmp_path, by_host({URL: first, OTHER: other}), count=8, fleet=fleet)
    assert outcome.failure is None
    assert [row["error"] for row in outcome.results.values()] == [None] * 8
    assert fleet.replicas[0].state == "serving" and answered(fleet)[0] > 0


def test_each_server_of_a_fleet_passes_its_own_canary(tmp_path):
    """Before: with B on a vLLM build on which the model writes "!!!!", A's answers cleared the run's one canary and
    B's pages were published as "!!!!" with exit 0. Now each server has its own canary, judged on its own answers
    (at the end of the run when it answered fewer than the canary's pages), and every row names its server."""
    fleet = two_replicas()
    fleet.replicas[0].version, fleet.replicas[1].version = "0.10.2", "0.11.0"
    log = ResultLog(tmp_path, "20260101T000000Z-aaaaaa", flush_rows=1000)
    facts, args = recipe()
    settings = dataclasses.replace(args, request_timeout=5.0)
    server = by_host({URL: lambda request: answer(), OTHER: lambda request: answer("!" * 200)})

    def canary(replica: Replica) -> Canary:
        context = CanaryContext("m", "image:v0.10.2", "the job command", f"vLLM {replica.version}", replica.url)
        return Canary(log, context, 8)

    transport = httpx.MockTransport(server)
    pump = Pump(
        fleet,
        facts,
        rules_of(facts, settings),
        Window(4, 4),
        log,
        ProgressBar(12, 0),
        transport=transport,
        canary=canary,
    )
    with pytest.raises(JobFailed) as stopped:
        asyncio.run(pump.run(iter(rows(12))))
    message = str(stopped.value)
    assert f"at {OTHER}" in message and "vLLM 0.11.0" in message
    results = read_results(tmp_path).to_pylist()
    by_other = [row for row in results if json.loads(row["server"])["server"] == OTHER]
    by_first = [row for row in results if json.loads(row["server"])["server"] == URL]
    assert by_other and by_first and len(by_other) + len(by_first) == len(results)
    assert all(row["error"].startswith("degenerate answer") for row in by_other)
    assert all(row["error"] is None for row in by_first)
    assert {json.loads(row["server"])["vllm_version"] for row in by_other} == {"0.11.0"}


def test_a_given_server_on_trial_gets_no_more_than_its_canary_pages_until_a_real_answer(tmp_path):
    """A server the user gave is on trial until its canary sees one real answer: the one writing "!!!!" gets its
    canary's 3 pages and no more, however wide the window, and the job stops on its canary."""
    fleet = two_replicas()
    fleet.members.given, fleet.trial_pages = True, 3
    log = ResultLog(tmp_path, "20260101T000000Z-aaaaaa", flush_rows=1000)
    facts, args = recipe()
    sent = {URL: 0, OTHER: 0}

    def server(request: httpx.Request) -> httpx.Response:
        host = f"{request.url.scheme}://{request.url.host}"
        sent[host] += 1
        return answer("!" * 200 if host == OTHER else "page text")

    def canary(replica: Replica) -> Canary:
        return Canary(log, CanaryContext("m", "image", "the job command", None, replica.url), 3)

    pump = Pump(fleet, facts, rules_of(facts, dataclasses.replace(args, request_timeout=5.0)), Window(16, 16), log,
                ProgressBar(40, 0), transport=httpx.MockTransport(by_host({URL: server, OTHER: server})),
                canary=canary)  # fmt: skip
    with pytest.raises(JobFailed, match=f"at {OTHER}"):
        asyncio.run(pump.run(iter(rows(40))))
    assert sent[OTHER] == 3
    assert fleet.replicas[0].cleared and not fleet.replicas[1].cleared


class BudgetSpent(FakeEndpoint):
    """A spawned server already restarted --max-restarts times: its recovery ends it."""

    async def recover(self, error: Retryable, generation: int) -> int:
        self.recovered.append(error)
        raise JobFailed(f"the vLLM server is down ({error}), and was already restarted 3 time(s)")


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("refused", request=request)


def test_a_replica_past_its_restart_budget_leaves_and_the_run_goes_on(tmp_path):
    fleet = two_replicas(BudgetSpent(URL))
    outcome = run_pump(tmp_path, by_host({URL: refused, OTHER: lambda request: answer()}), count=5, fleet=fleet)
    assert outcome.failure is None
    assert [replica.state for replica in fleet.replicas] == ["gone", "serving"]
    assert fleet.replicas[0].handle.closed
    assert answered(fleet) == [0, 5]


def test_the_run_fails_only_when_every_replica_is_gone(tmp_path):
    fleet = two_replicas(BudgetSpent(URL), BudgetSpent(OTHER))
    outcome = run_pump(tmp_path, by_host({URL: refused, OTHER: refused}), count=3, fleet=fleet)
    assert isinstance(outcome.failure, JobFailed)
    message = str(outcome.failure)
    assert "no vLLM server is left" in message and URL in message and OTHER in message
    assert outcome.results == {}


def test_a_hung_replica_hands_its_pages_back_at_once_when_its_stall_is_reported(tmp_path):
    """The hung request never returns by itself: only the hand-back lets the run finish."""
    fleet = two_replicas()
    hung: list[int] = []

    async def hangs_once(request: httpx.Request) -> httpx.Response:
        if not hung:
            hung.append(1)
            reported = fleet.supervision.stalled(fleet.replicas[0], "made no progress for 300 s", 0)
            asyncio.get_running_loop().call_later(0.05, asyncio.ensure_future, reported)
            await asyncio.Event().wait()
        return answer()

    outcome = run_pump(tmp_path, by_host({URL: hangs_once, OTHER: lambda request: answer()}), count=4, fleet=fleet)
    assert outcome.failure is None
    assert outcome.results["train-0"]["attempts"] == 2
    assert fleet.replicas[0].handle.generation == 1, "the hung replica was not restarted"
    assert sum(answered(fleet)) == 4


def test_a_stalled_server_this_run_did_not_start_leaves_unless_it_is_the_last():
    fleet = two_replicas(FakeEndpoint(URL, stalls_fail=True), FakeEndpoint(OTHER, stalls_fail=True))

    async def scenario() -> None:
        await fleet.supervision.stalled(fleet.replicas[0], "made no progress for 300 s", 0)
        assert [replica.state for replica in fleet.replicas] == ["gone", "serving"]
        with pytest.raises(JobFailed, match="hung"):
            await fleet.supervision.stalled(fleet.replicas[1], "made no progress for 300 s", 0)

    asyncio.run(scenario())


# ---- a poison page: one page that never gets an answer is set aside after a bounded number of strikes ----

POISON = "train-1"


def poison_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (72, 40), "white").save(buffer, format="PNG")
    return buffer.getvalue()


POISON_PAGE = poison_png()
POISON_MARK = base64.b64encode(POISON_PAGE)[:40]


def is_poison(request: httpx.Request) -> bool:
    return POISON_MARK in request.content


def poisoned_rows(count: int) -> list[RowInput]:
    """`count` pages of which train-1 is the poison page (an image no other page has)."""
    return [
        RowInput(index, f"train-{index}", {"bytes": POISON_PAGE if index == 1 else PAGE, "path": None})
        for index in range(count)
    ]


def pump_rows(
    folder: Path, server: Handler, rows_in: list[RowInput], fleet: Fleet, window: int = 4, retry_budget: float = 30.0
) -> Outcome:
    """Like run_pump, over the given rows (the fleet's recoveries decide what a death costs)."""
    facts, args = recipe()
    settings = dataclasses.replace(args, request_timeout=5.0, retry_budget=retry_budget)
    log = ResultLog(folder, f"20260101T000000Z-{time.monotonic_ns() % 10**6:06d}", flush_rows=1000)
    progress = ProgressBar(len(rows_in), 0)
    pump = Pump(
        fleet,
        facts,
        rules_of(facts, settings),
        Window(window, window),
        log,
        progress,
        transport=httpx.MockTransport(server),
    )
    failure = None
    try:
        asyncio.run(pump.run(iter(rows_in)))
    except JobFailed as exc:
        failure = exc
    results = {row["row_id"]: row for row in read_results(folder).to_pylist()}
    return Outcome(results, progress, failure, [])


def strike_records(folder: Path) -> dict[str, int]:
    """The failed-attempt records in the progress parts, newest per page (read raw, not through the store)."""
    tables = [pq.read_table(part) for part in sorted(folder.glob("*.parquet"))]
    rows = sorted((row for table in tables for row in table.to_pylist()), key=lambda row: row["recorded_at"])
    newest = {row["row_id"]: row for row in rows}
    return {row_id: row["strikes"] for row_id, row in newest.items() if row["strikes"] is not None}


def timing_out(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("slow", request=request)


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        (lambda request: refusal(500, "CUDA error: an illegal memory access"), "server answered 500: CUDA error"),
        (timing_out, "request timed out"),
    ],
    ids=["5xx", "timeout"],
)
def test_a_page_that_always_fails_becomes_one_error_row_and_the_rest_finishes(tmp_path, failure, words):
    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        return failure(request) if is_poison(request) else answer()

    outcome = pump_rows(tmp_path, server, poisoned_rows(6), fleet_of(FakeEndpoint()), retry_budget=0.2)
    assert outcome.failure is None, outcome.failure
    row = outcome.results[POISON]
    assert row["text"] is None
    assert row["error"].startswith("failed every attempt: 3 attempts got no answer")
    assert "--retry-errors" in row["error"]
    assert words in row["error"] and "kept failing for" in row["error"]
    assert [outcome.results[f"train-{i}"]["error"] for i in (0, 2, 3, 4, 5)] == [None] * 5


def test_each_strike_is_on_disk_before_the_page_is_sent_again(tmp_path):
    """A kill -9 (the OOM killer, a preemption) after a strike must not lose it: the rerun counts on from there."""
    on_disk_when_sent: list[int] = []

    def server(request: httpx.Request) -> httpx.Response:
        if not is_poison(request):
            return answer()
        on_disk_when_sent.append(strike_records(tmp_path).get(POISON, 0))
        return refusal(500, "CUDA error: an illegal memory access")

    outcome = pump_rows(tmp_path, server, poisoned_rows(6), fleet_of(FakeEndpoint()), retry_budget=0.2)
    assert outcome.results[POISON]["error"].startswith("failed every attempt: 3 attempts")
    assert sorted(set(on_disk_when_sent)) == [0, 1, 2], "a strike sat in the buffer while its page was sent again"


def test_every_page_failing_still_stops_the_run_after_the_budget_without_condemning_pages(tmp_path):
    outcome = pump_rows(
        tmp_path, lambda request: refusal(500, "boom"), poisoned_rows(40), fleet_of(FakeEndpoint()), retry_budget=0.2
    )
    assert outcome.failure is not None and "--retry-budget" in str(outcome.failure)
    assert outcome.results == {}


def answers_then_fails(answers: int, failure: Handler) -> Handler:
    """Answers the first `answers` chat requests, then fails every request with `failure` (an outage)."""
    seen: list[int] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        seen.append(1)
        return answer() if len(seen) <= answers else failure(request)

    return server


@pytest.mark.parametrize("failure", [lambda request: refusal(500, "boom"), timing_out], ids=["5xx", "timeout"])
def test_an_outage_in_the_last_window_stops_the_run_and_strikes_no_page(tmp_path, failure):
    """Four rows are answered; the outage starts once the last two rows are admitted, so nothing else is left to
    ask. That is the servers, as it is mid-run: the job stops (a rerun retries them) and no page is set aside."""
    outcome = pump_rows(tmp_path, answers_then_fails(4, failure), rows(6), fleet_of(FakeEndpoint()), retry_budget=0.2)
    assert outcome.failure is not None and "--retry-budget" in str(outcome.failure)
    # Which four rows were answered is up to the order the pump's requests reach the server, not the test's.
    assert len(outcome.results) == 4 and all(result["error"] is None for result in outcome.results.values())
    assert strike_records(tmp_path) == {}


def test_a_page_failing_alone_at_the_end_is_set_aside_while_the_servers_answer_a_blank_page(tmp_path):
    """The poison page is the last and alone: nothing else is answered meanwhile, but the servers answer the blank
    probe page, so the failures are the page's own."""

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        return refusal(500, "boom") if is_poison(request) else answer()

    outcome = pump_rows(tmp_path, server, poisoned_rows(2), fleet_of(FakeEndpoint()), window=1, retry_budget=0.1)
    assert outcome.failure is None, outcome.failure
    assert outcome.results[POISON]["error"].startswith("failed every attempt: 3 attempts got no answer")
    assert outcome.results["train-0"]["error"] is None


class KillableEngine(FakeEndpoint):
    """A spawned engine that the poison page kills: every request in flight then fails, later ones are refused
    until the recovery restarts it; past `max_restarts` its recovery ends it, as --max-restarts does."""

    def __init__(self, max_restarts: int = 3, hang: bool = False) -> None:
        super().__init__(URL, restarts=True)
        self.max_restarts = max_restarts
        self.hang = hang
        self.died = asyncio.Event()
        self.deaths = 0
        self.all_poison = False
        self.fleet: Fleet | None = None

    def kill(self) -> None:
        if not self.died.is_set():
            self.deaths += 1
            self.died.set()
            if self.hang:
                reported = self.fleet.supervision.stalled(
                    self.fleet.replicas[0], "made no progress for 300 s", self.generation
                )
                asyncio.get_running_loop().call_later(0.02, asyncio.ensure_future, reported)

    def revive(self) -> None:
        if self.restarts >= self.max_restarts:
            raise JobFailed(f"the vLLM server is down, and was already restarted {self.restarts} time(s)")
        self.restarts += 1
        self.generation += 1
        self.died = asyncio.Event()

    async def recover(self, error: Retryable, generation: int) -> int:
        if self.died.is_set() and generation == self.generation:
            self.revive()
        return self.generation

    async def stalled(self, reason: str, generation: int) -> None:
        if generation == self.generation:
            self.revive()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        if self.died.is_set() and not self.hang:
            raise httpx.ConnectError("refused", request=request)
        died = self.died
        if is_poison(request) or self.all_poison:
            self.kill()
        try:
            await asyncio.wait_for(died.wait(), 0.05)
        except asyncio.TimeoutError:
            return answer()
        if self.hang:
            await asyncio.Event().wait()
        raise httpx.RemoteProtocolError("server disconnected without sending a response", request=request)


def killer_fleet(engine: KillableEngine) -> Fleet:
    fleet = fleet_of(engine)
    engine.fleet = fleet
    return fleet


@pytest.mark.parametrize("hang", [False, True], ids=["dies", "hangs"])
def test_a_page_that_kills_the_engine_is_set_aside_within_the_restart_budget(tmp_path, hang):
    engine = KillableEngine(max_restarts=3, hang=hang)
    outcome = pump_rows(tmp_path, engine, poisoned_rows(12), killer_fleet(engine), window=4)
    assert outcome.failure is None, outcome.failure
    row = outcome.results[POISON]
    assert row["error"].startswith("failed every attempt: 3 attempts got no answer")
    assert ("hung" if hang else "died") in row["error"]
    assert engine.deaths == 3 and engine.restarts == 3
    others = [outcome.results[f"train-{index}"] for index in range(12) if index != 1]
    assert [other["error"] for other in others] == [None] * 11, "a page that only shared a death was condemned"


def test_strikes_outlive_a_run_that_the_poison_page_ended_and_the_rerun_sets_it_aside(tmp_path):
    first = KillableEngine(max_restarts=1)
    stopped = pump_rows(tmp_path, first, poisoned_rows(12), killer_fleet(first), window=4)
    assert stopped.failure is not None and POISON not in stopped.results
    assert strike_records(tmp_path)[POISON] == 2

    second = KillableEngine(max_restarts=1)
    outcome = pump_rows(tmp_path, second, poisoned_rows(12), killer_fleet(second), window=4)
    assert outcome.failure is None, outcome.failure
    assert second.deaths == 1
    error = outcome.results[POISON]["error"]
    assert error.startswith("failed every attempt: 3 attempts got no answer, 2 of them in earlier runs")
    assert len(outcome.results) == 12
    assert strike_records(tmp_path) == {}


def test_a_fresh_count_after_the_page_was_set_aside(tmp_path):
    """What --retry-errors redoes: the set-aside row is an outcome, so its strikes start again from none."""

    def server(request: httpx.Request) -> httpx.Response:
        return refusal(500, "boom") if is_poison(request) else answer()

    fleet = fleet_of(FakeEndpoint())
    first = pump_rows(tmp_path, by_host({URL: server}), poisoned_rows(3), fleet, retry_budget=0.1)
    assert first.results[POISON]["error"].startswith("failed every attempt: 3 attempts")
    again = pump_rows(tmp_path, by_host({URL: server}), poisoned_rows(3)[1:2], fleet, retry_budget=0.1)
    assert again.results[POISON]["error"].startswith("failed every attempt: 3 attempts got no answer (")
    healed = pump_rows(tmp_path, by_host({URL: lambda request: answer()}), poisoned_rows(3)[1:2], fleet)
    assert healed.results[POISON]["error"] is None and healed.results[POISON]["text"] == "page text"


def test_a_dataset_of_engine_killers_stops_when_the_restart_budget_is_spent(tmp_path):
    engine = KillableEngine(max_restarts=3)
    engine.all_poison = True
    outcome = pump_rows(tmp_path, engine, poisoned_rows(40), killer_fleet(engine), window=4)
    assert outcome.failure is not None and "no vLLM server is left" in str(outcome.failure)
    assert engine.deaths == 4
    assert len(outcome.results) <= 2


def test_a_fleet_serving_from_the_start_is_sustained_from_the_first_page_sent(tmp_path):
    """With every replica serving before the first page, the sustained interval opens when the first page is sent,
    not at its answer: the engine works on the pages in flight before it answers any (a mark at the first answer
    put one H200 replica's 768 pages at 22.4 pages/s when it ran at 8.0)."""
    sent: list[float] = []

    async def slow(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        sent.append(time.monotonic())
        await asyncio.sleep(0.2)
        return answer()

    outcome = run_pump(tmp_path, slow, count=3)
    tally = outcome.progress.tally
    assert len(outcome.results) == 3 and outcome.failure is None
    assert tally.whole_at is not None and tally.whole_at <= sent[0]
    assert tally.last_sent is not None and sent[-1] - 0.05 <= tally.last_sent <= sent[-1]


class OnePageAtATime:
    """A server of known speed: one page at a time, `seconds` each, so it does 1/seconds pages/s however many
    wait; it remembers when each request came."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.busy = asyncio.Lock()
        self.arrived: list[float] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrived.append(time.monotonic())
        async with self.busy:
            await asyncio.sleep(self.seconds)
        return answer()


def test_the_summary_rates_count_only_what_the_whole_fleet_did_in_its_window(tmp_path):
    """Two replicas of 20 pages/s each, the second joining 0.5 s in (as `start_rest` brings it in): the sustained
    rate opens at the first page sent after the join, so it reads the two replicas' 40 pages/s (a lower bound by
    about one page's wait over the interval), never more; the rate over inference mixes in the half-speed start and
    the drain; billed divides the rows by the process's whole life."""
    first, second = OnePageAtATime(0.05), OnePageAtATime(0.05)
    fleet = fleet_of(FakeEndpoint(URL), FakeEndpoint(OTHER))
    fleet.replicas[1].state = STARTING
    joined: list[float] = []

    async def join_later(request: httpx.Request) -> httpx.Response:
        if not joined:
            joined.append(time.monotonic())
            asyncio.get_running_loop().call_later(
                0.5, lambda: asyncio.ensure_future(fleet.members.set_state(fleet.replicas[1], SERVING))
            )
        return await first(request)

    outcome = run_pump(tmp_path, by_host({URL: join_later, OTHER: second}), count=80, fleet=fleet, window=6)
    assert outcome.failure is None and len(outcome.results) == 80
    tally = outcome.progress.tally
    figures = tally.sustained()
    assert second.arrived and tally.whole_at is not None
    assert tally.whole_at <= second.arrived[0] and tally.whole_at >= joined[0] + 0.5
    assert figures["sustained_pages"] <= 80 - len([t for t in first.arrived if t < tally.whole_at])
    assert 0.7 * 40 <= figures["sustained_pages_per_s"] <= 40 * 1.05
    assert tally.pages_per_s() < figures["sustained_pages_per_s"]
    start, end = figures["sustained_unix"]
    assert end - start == pytest.approx(figures["sustained_s"], abs=0.02)
    assert abs(end - time.time()) < 5, "the interval is given in Unix seconds, to line up with GPU samples"
    facts = RunFacts(
        output="o", rows=80, done_this_run=80, resumed=0, shard=None, errors=0, errors_this_run=0, truncated=0,
        loops_this_run=0, truncated_this_run=0, missing=0, pages_per_s=tally.pages_per_s(),
        output_tokens_per_s=tally.tokens_per_s(), inference_s=tally.seconds(), wall_s=1.0, flavor="f", window=6,
        peak_in_flight=6, peak_window=6, interrupted=False, failure=None, **figures,
    )  # fmt: skip
    facts.bill(process_seconds())
    assert facts.billed_s is not None and facts.billed_s > tally.seconds()
    # the summary gives the rate to 3 decimals: a test worker that has lived 30 minutes bills 80 rows at 0.043/s,
    # where a rounding of 0.0004 is more than 1 % (a busy run of 2026-12-02)
    assert facts.billed_pages_per_s == pytest.approx(80 / facts.billed_s, rel=0.01, abs=0.0006)
