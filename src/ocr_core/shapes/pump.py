"""The pump: keeps one window of pages in flight over the fleet's servers until every row has an outcome.

One asyncio task per page in flight; image preparation runs in a thread pool so the event loop only moves bytes.
Whatever happens to a page, exactly one result row is logged for it, except pages still in flight when the run is
stopped: those are redone by the next run (at most one window). A transient failure is never a row's outcome: the
page is retried with backoff until its retry budget is spent; then, when nothing else was answered meanwhile, the
job stops so that a rerun retries it (the servers are down), and otherwise the page has a strike; at the tail of
a run, where no other page is left to ask, a blank probe page is the witness (probe.py). A page with
MAX_STRIKES strikes, this run's and earlier runs', is set aside as an error row (poison.py). An exception nobody
expected while preparing, sending or parsing a page becomes that page's error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx

from ..console import say
from ..errors import JobFailed, internal_error
from ..facts import ModelFacts
from ..inputs.images import BadImage, placeholder_part, with_note
from ..inputs.pdf import PREP_THREADS, prepare_page
from ..inputs.source import RowInput
from ..judging.answers import judge
from ..judging.breaker import Breaker
from ..judging.canary import Canary
from ..judging.poison import Lane, Strikes, fault_of_the_page
from ..planning.page_rules import PageRules
from ..serving.chat import Answer, Retryable, RowFailed, chat_body
from ..serving.fleet import Fleet
from ..serving.hostmem import MemoryGuard
from ..serving.probe import probe_body, servers_answer
from ..serving.replica import Replica
from ..serving.spawn import parse_metrics
from ..store.progress import ResultLog, RowResult, read_strikes
from .page_requests import PageRequest, Sent, Streak, retry_delay
from .tally import ProgressBar
from .window import Window

QUEUE_GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running")
METRICS_INTERVAL_S = 1.0
CAP_LOG_GAP_S = 30.0


class Pump:
    def __init__(
        self,
        fleet: Fleet,
        facts: ModelFacts,
        rules: PageRules,
        window: Window,
        log: ResultLog,
        progress: ProgressBar,
        guard: MemoryGuard | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        canary: Callable[[Replica], Canary | None] | None = None,
    ) -> None:
        """`transport` replaces the network (tests pass an httpx.MockTransport). The strikes earlier runs left in
        the log's folder count on here. `canary` makes each replica's own canary: in a fleet of mixed builds, one
        server's good answers must not clear another's."""
        self.fleet = fleet
        self.facts = facts
        self.rules = rules
        self.sampling = dict(rules.sampling)
        self.window = window
        self.log = log
        self.progress = progress
        self.guard = guard
        self.transport = transport
        self.breaker = Breaker(rules.max_error_rate, image=facts.image)
        self.canary = canary
        self.canaries: dict[Replica, Canary | None] = {}
        self.writers: dict[str, Replica] = {}
        self.cap_logged = 0.0
        self.waiting: float | None = None
        self.running: float | None = None
        self.failure: Exception | None = None
        self.strikes = Strikes(read_strikes(log.folder))
        self.lane = Lane()
        self.open = 0
        self.failing: set[str] = set()
        self.fed_all = False
        self.first_sent: dict[str, float] = {}
        self.probe_body: bytes | None = None

    async def run(self, rows: Iterator[RowInput]) -> None:
        """Pumps every row."""
        connections = (self.guard.ceiling if self.guard else self.window.cap) + 8
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        timeout = httpx.Timeout(self.rules.request_timeout, connect=30.0, pool=None)
        tasks: set[asyncio.Task] = set()
        with ThreadPoolExecutor(PREP_THREADS, thread_name_prefix="prep") as prep:
            async with httpx.AsyncClient(limits=limits, timeout=timeout, transport=self.transport) as client:
                watcher = asyncio.create_task(self.watch_queue(client))
                try:
                    await self.feed(rows, client, prep, tasks)
                finally:
                    watcher.cancel()
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(watcher, *tasks, return_exceptions=True)
                    self.log.flush()

    async def feed(
        self,
        rows: Iterator[RowInput],
        client: httpx.AsyncClient,
        prep: ThreadPoolExecutor,
        tasks: set[asyncio.Task],
    ) -> None:
        """Admits one page per free slot; a page task that fails the job stops admission at once."""
        for row in rows:
            await self.window.acquire()
            if self.failure is not None:
                raise self.failure
            task = asyncio.create_task(self.process(row, client, prep))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        self.fed_all = True
        while tasks and self.failure is None:
            await asyncio.wait(set(tasks), return_when=asyncio.FIRST_COMPLETED)
        if self.failure is not None:
            raise self.failure
        for canary in self.canaries.values():
            if canary is not None:
                canary.conclude()

    async def process(self, row: RowInput, client: httpx.AsyncClient, prep: ThreadPoolExecutor) -> None:
        """Logs the page's outcome and frees its slot.

        An exception that fails the job is kept in `failure` before the slot is freed: the freed slot wakes `feed`
        before this task's completion would, and `feed` must not admit another page then.
        """
        acknowledged = False
        self.open += 1
        try:
            result, acknowledged = await self.complete(row, client, prep)
            self.log.add(result)
            if result.error is not None and self.rules.verbose:
                say(f"{row.row_id}: {result.error}")
            self.progress.record(result.error, result.completion_tokens, self.first_sent.pop(row.row_id, None))
            self.judge_writer(row.row_id, result)
            self.breaker.record(result.error)
        except Exception as exc:
            self.failure = self.failure or exc
        finally:
            self.open -= 1
            self.failing.discard(row.row_id)
            self.first_sent.pop(row.row_id, None)
            await self.window.release(self.waiting, self.running, acknowledged)
            self.progress.show(self.window.in_flight, self.window.limit)

    async def complete(
        self, row: RowInput, client: httpx.AsyncClient, prep: ThreadPoolExecutor
    ) -> tuple[RowResult, bool]:
        """The row's result, and whether the server answered (which is what may widen the window)."""
        started = time.monotonic()
        result = RowResult(row.index, row.row_id)
        try:
            request = await asyncio.get_running_loop().run_in_executor(prep, self.build_request, row.cell)
        except BadImage as exc:
            result.error = f"{exc.kind}: {exc}"
            return result, False
        except Exception as exc:
            result.error = internal_error("preparing the page", exc)
            return result, False
        if self.guard is not None:
            self.guard.observe(len(request.encoded), request.image.width * request.image.height)
        answered = await self.ask(request, client, result)
        if result.text is not None:
            result.error = with_note(result.error, request.image.note)
        result.seconds = time.monotonic() - started
        return result, answered

    def judge_writer(self, row_id: str, result: RowResult) -> None:
        """Hands an answered page to the canary of the replica that wrote it."""
        writer = self.writers.pop(row_id, None)
        if writer is None or self.canary is None:
            return
        if writer not in self.canaries:
            self.canaries[writer] = self.canary(writer)
        canary = self.canaries[writer]
        if canary is not None:
            writer.judged += 1
            canary.record(result)
            writer.cleared = writer.cleared or canary.cleared

    def build_request(self, cell: object) -> PageRequest:
        """Runs in the prep threads: reading, checking, rendering (a PDF page) and encoding is the driver's CPU cost."""
        image = prepare_page(cell, self.facts.max_side, self.facts.max_pixels)
        body = chat_body(
            self.fleet.model,
            self.facts.build_content(placeholder_part()),
            self.sampling,
            self.facts.request_extras,
        )
        return PageRequest(image, body, image.json_with_image(body))

    async def ask(self, request: PageRequest, client: httpx.AsyncClient, result: RowResult) -> bool:
        """Sends until the page has an outcome; fills `result`; True once a server answered it.

        Each attempt goes to the least busy serving replica, so a page whose server died is retried on another.
        A run that ends meanwhile (the last server gone, a stop) still records the deaths the page was in flight at.
        """
        try:
            return await self.attempts(request, client, result)
        except (JobFailed, asyncio.CancelledError):
            self.count_deaths(result)
            raise

    async def attempts(self, request: PageRequest, client: httpx.AsyncClient, result: RowResult) -> bool:
        resampled = False
        encoded = request.encoded
        streak: Streak | None = None
        failed_on = None
        while True:
            if await self.set_aside(result):
                return False
            result.attempts += 1
            try:
                sent = await self.send(result.row_id, client, encoded, failed_on)
            except RowFailed as exc:
                result.error = str(exc)
                return True
            except JobFailed:
                raise
            except Exception as exc:
                result.error = internal_error("sending the page", exc)
                return False
            failed_on = None
            if sent.retry is not None:
                streak = await self.pause(sent, result, streak, client)
                failed_on = sent.replica
                continue
            streak = None
            self.failing.discard(result.row_id)
            try:
                if self.take_answer(sent.answer, result, resampled):
                    result.server = sent.replica.provenance()
                    self.writers[result.row_id] = sent.replica
                    return True
            except Exception as exc:
                result.error = internal_error("parsing the answer", exc)
                return True
            resampled = True
            encoded = request.image.json_with_image({**request.body, "temperature": self.facts.retry_temperature})

    async def set_aside(self, result: RowResult) -> bool:
        """Whether the page is out of strikes, counted once a replica serves (a death is counted before its
        replica serves again); then its error says why and it is not sent again."""
        try:
            await self.fleet.wait_serving()
        finally:
            self.count_deaths(result)
        if not self.strikes.condemned(result.row_id):
            return False
        result.error = self.strikes.reason(result.row_id)
        say(f"{result.row_id}: {result.error}")
        return True

    async def send(self, row_id: str, client: httpx.AsyncClient, encoded: bytes, failed_on: Replica | None) -> Sent:
        """One request; a page with a strike waits its turn in the struck pages' lane (poison.py). A page's first
        request is its send time for the sustained rate (rates.py): work on it started then."""
        suspect = self.strikes.count(row_id) > 0
        if suspect:
            await self.lane.enter(self.strikes.last_chance(row_id))
        answered = False
        try:
            replica = await self.fleet.pick(failed_on)
            if row_id not in self.first_sent:
                self.first_sent[row_id] = now = time.monotonic()
                self.progress.tally.mark_sent(now, self.fleet.full())
            sent = Sent(replica, replica.handle.generation)
            try:
                sent.answer = await self.fleet.post(replica, client, encoded, row_id)
            except Retryable as exc:
                sent.retry = exc
            except RowFailed:
                answered = True
                raise
            answered = sent.answer is not None
            return sent
        finally:
            if suspect:
                await self.lane.leave(answered)

    async def pause(self, sent: Sent, result: RowResult, streak: Streak | None, client: httpx.AsyncClient) -> Streak:
        """Lets the replica recover (out of the fleet meanwhile), then waits before the next attempt; returns the
        page's failing streak. Past the retry budget the page has a strike when other pages were answered meanwhile
        (or, with none left to ask, a blank probe page was), else the job stops. A restart anywhere in the fleet
        gives the page a fresh budget: restarts are bounded by --max-restarts."""
        error, now, budget = sent.retry, time.monotonic(), self.rules.retry_budget
        self.failing.add(result.row_id)
        if streak is None or self.fleet.restarts != streak.restarts:
            streak = Streak(now, self.fleet.restarts, self.fleet.answered)
        failing_for = now - streak.since
        if failing_for >= budget:
            answered_since = self.fleet.answered > streak.answered
            others_left = not self.fed_all or len(self.failing) < self.open
            probe_answered = not (answered_since or others_left) and await self.probe(client)
            if not fault_of_the_page(answered_since, others_left, probe_answered):
                raise JobFailed(
                    f"page {result.row_id} kept failing for {failing_for:.0f} s over {result.attempts} attempts "
                    f"(--retry-budget {budget:.0f} s); last failure: {error}. The server is overloaded, restarting "
                    "or unreachable: check it (its log, /health), then rerun the same command: finished rows are "
                    "kept and these pages are retried. Raise --retry-budget to wait longer."
                )
            self.strike(result, f"kept failing for {failing_for:.0f} s over {result.attempts} requests: {error}")
            streak, failing_for = Streak(now, self.fleet.restarts, self.fleet.answered), 0.0
        self.fleet.trouble(sent.replica, error, sent.generation)
        await asyncio.sleep(min(retry_delay(result.attempts, error.retry_after), budget - failing_for))
        return streak

    async def probe(self, client: httpx.AsyncClient) -> bool:
        """Whether the servers answer a blank page (probe.py): the witness a failing page lacks at the tail."""
        if self.probe_body is None:
            self.probe_body = probe_body(self.facts, self.fleet.model, self.sampling)
        return await servers_answer(self.fleet, client, self.probe_body)

    def count_deaths(self, result: RowResult) -> None:
        """The engine deaths and hangs the fleet saw with this page in flight that it has not counted yet."""
        row_id = result.row_id
        deaths = self.fleet.deaths[row_id]
        if deaths and self.strikes.add_deaths(row_id, deaths, self.fleet.death_causes[row_id]):
            self.lane.narrow()
            self.record_strike(result)

    def strike(self, result: RowResult, cause: str) -> None:
        self.strikes.add(result.row_id, cause)
        self.record_strike(result)

    def record_strike(self, result: RowResult) -> None:
        """Writes the page's strikes through to disk before the page is sent again, so a rerun on any machine counts
        on from them even after a kill -9 (the page's outcome, when it comes, replaces the record). Strikes are
        rare, so a part of their own each costs little."""
        row_id = result.row_id
        count = self.strikes.count(row_id)
        cause = self.strikes.causes[row_id]
        self.log.add(RowResult(result.row_index, row_id, error=cause, attempts=result.attempts, strikes=count))
        self.log.flush()
        if self.rules.verbose:
            say(f"{row_id}: no answer ({count} of {self.strikes.bound} strikes): {cause}")

    def take_answer(self, answer: Answer, result: RowResult, resampled: bool) -> bool:
        """Parses an answer into `result`; False asks for one resampled attempt of a repetition loop."""
        result.finish_reason = answer.finish_reason
        result.prompt_tokens += answer.prompt_tokens
        result.completion_tokens += answer.completion_tokens
        verdict = judge(answer.text, answer.finish_reason, self.facts, self.rules.answers, resampled, result.attempts)
        if verdict.resample:
            return False
        result.text, result.extra, result.error = verdict.text, verdict.extra, verdict.error
        return True

    async def watch_queue(self, client: httpx.AsyncClient) -> None:
        """Keeps `waiting` current from the fleet's /metrics (None while no server has such gauges) and the cap
        current."""
        while True:
            gauges = parse_metrics(await self.fleet.metrics(client), QUEUE_GAUGES)
            self.waiting = gauges.get("vllm:num_requests_waiting")
            self.running = gauges.get("vllm:num_requests_running")
            if self.guard is not None:
                await self.follow_memory()
            await asyncio.sleep(METRICS_INTERVAL_S)

    async def follow_memory(self) -> None:
        """Moves the window's cap with host memory; says so when it moves by a tenth or more."""
        cap, why = self.guard.cap(self.window.in_flight)
        previous = self.window.cap
        if cap == previous:
            return
        await self.window.set_cap(cap)
        if abs(cap - previous) >= max(2, previous // 10) and time.monotonic() - self.cap_logged > CAP_LOG_GAP_S:
            self.cap_logged = time.monotonic()
            say(f"window cap {previous} -> {cap}: {why}")
