"""One page's way through the servers: prepared in the prep threads, sent to the least busy serving replica until
it has an outcome, and its answer judged.

Each attempt goes to the least busy serving replica, so a page whose server died is retried on another; between
attempts the page's life (page_life.py) decides its pause, its strikes and whether it is set aside. An answer that
loops is resampled once at the retry temperature. An exception nobody expected while preparing, sending or parsing
a page becomes that page's error.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from ..errors import JobFailed, internal_error
from ..facts import ModelFacts
from ..inputs.images import BadImage, placeholder_part, with_note
from ..inputs.pdf import prepare_page
from ..inputs.source import RowInput
from ..judging.answers import judge
from ..planning.page_rules import PageRules
from ..serving.chat import Answer, Retryable, RowFailed, chat_body
from ..serving.hostmem import MemoryGuard
from ..serving.membership import Membership
from ..serving.replica import Replica
from ..serving.routing import PageRouting
from ..store.progress import RowResult
from .page_life import PageLife
from .page_requests import PageRequest, Sent, Streak
from .tally import Tally


@dataclass
class Page:
    """One page's end as the pump records it: its row's result, whether a server answered it (which is what may
    widen the window), when its first request went (its send time for the sustained rate, rates.py) and the
    replica that wrote its text (whose canary judges it)."""

    result: RowResult
    answered: bool = False
    first_sent: float | None = None
    writer: Replica | None = None


class PageAttempts:
    """Sends pages over the fleet's `routing` to the `members` serving the model; `tally` learns each page's send
    time, and `guard` (when host memory caps the window) each page's size."""

    def __init__(
        self,
        members: Membership,
        routing: PageRouting,
        facts: ModelFacts,
        rules: PageRules,
        life: PageLife,
        tally: Tally,
        guard: MemoryGuard | None = None,
    ) -> None:
        self.members = members
        self.routing = routing
        self.facts = facts
        self.rules = rules
        self.sampling = dict(rules.sampling)
        self.life = life
        self.tally = tally
        self.guard = guard

    async def complete(self, row: RowInput, client: httpx.AsyncClient, prep: ThreadPoolExecutor) -> Page:
        """The row's outcome; the page fails no longer once it has one (or the run ends meanwhile)."""
        try:
            return await self.prepare_and_ask(row, client, prep)
        finally:
            self.life.clear(row.row_id)

    async def prepare_and_ask(self, row: RowInput, client: httpx.AsyncClient, prep: ThreadPoolExecutor) -> Page:
        started = time.monotonic()
        page = Page(RowResult(row.index, row.row_id))
        result = page.result
        try:
            request = await asyncio.get_running_loop().run_in_executor(prep, self.build_request, row.cell)
        except BadImage as exc:
            result.error = f"{exc.kind}: {exc}"
            return page
        except Exception as exc:
            result.error = internal_error("preparing the page", exc)
            return page
        if self.guard is not None:
            self.guard.observe(len(request.encoded), request.image.width * request.image.height)
        page.answered = await self.ask(request, client, page)
        if result.text is not None:
            result.error = with_note(result.error, request.image.note)
        result.seconds = time.monotonic() - started
        return page

    def build_request(self, cell: object) -> PageRequest:
        """Runs in the prep threads: reading, checking, rendering (a PDF page) and encoding is the driver's CPU cost."""
        image = prepare_page(cell, self.facts.max_side, self.facts.max_pixels)
        body = chat_body(
            self.members.model,
            self.facts.build_content(placeholder_part()),
            self.sampling,
            self.facts.request_extras,
        )
        return PageRequest(image, body, image.json_with_image(body))

    async def ask(self, request: PageRequest, client: httpx.AsyncClient, page: Page) -> bool:
        """Sends until the page has an outcome; fills its result; True once a server answered it.

        A run that ends meanwhile (the last server gone, a stop) still records the deaths the page was in flight at.
        """
        try:
            return await self.attempts(request, client, page)
        except (JobFailed, asyncio.CancelledError):
            self.life.count_deaths(page.result)
            raise

    async def attempts(self, request: PageRequest, client: httpx.AsyncClient, page: Page) -> bool:
        result = page.result
        resampled = False
        encoded = request.encoded
        streak: Streak | None = None
        failed_on = None
        while True:
            if await self.life.set_aside(result):
                return False
            result.attempts += 1
            try:
                sent = await self.send(page, client, encoded, failed_on)
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
                streak = await self.life.pause(sent, result, streak, client)
                failed_on = sent.replica
                continue
            streak = None
            self.life.clear(result.row_id)
            try:
                if self.take_answer(sent.answer, result, resampled):
                    result.server = sent.replica.provenance()
                    page.writer = sent.replica
                    return True
            except Exception as exc:
                result.error = internal_error("parsing the answer", exc)
                return True
            resampled = True
            encoded = request.image.json_with_image({**request.body, "temperature": self.facts.retry_temperature})

    async def send(self, page: Page, client: httpx.AsyncClient, encoded: bytes, failed_on: Replica | None) -> Sent:
        """One request, once the page's turn comes (page_life.py). A page's first request is its send time for the
        sustained rate (rates.py): work on it started then."""
        row_id = page.result.row_id
        struck = await self.life.take_turn(row_id)
        answered = False
        try:
            replica = await self.routing.pick(failed_on)
            if page.first_sent is None:
                page.first_sent = now = time.monotonic()
                self.tally.mark_sent(now, self.members.full())
            sent = Sent(replica, replica.handle.generation)
            try:
                sent.answer = await self.routing.post(replica, client, encoded, row_id)
            except Retryable as exc:
                sent.retry = exc
            except RowFailed:
                answered = True
                raise
            answered = sent.answer is not None
            return sent
        finally:
            await self.life.end_turn(struck, answered)

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
