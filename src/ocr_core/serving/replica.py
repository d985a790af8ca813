"""One endpoint of the fleet, with what the driver counts of it: pages outstanding and answered, and its state."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from .chat import Answer, post_chat
from .handle import ServerHandle

STARTING, SERVING, RECOVERING, GONE = "starting", "serving", "recovering", "gone"
# The least time between two new connections to one server. The API server processes of one `vllm serve` share one
# listening socket, and the process that wakes first accepts every connection waiting (asyncio drains the backlog),
# so a burst of new connections lands on one process, which then decodes and processes most pages alone: 294 of 384
# requests on one of four processes (H200, 2026-12-02). Connections opened apart go to whichever process is free.
CONNECTION_GAP_S = 0.01
# How long a connection idles before the fleet takes it for closed: a little under the 5 s after which the pump's
# client (httpx's default keepalive_expiry) and vLLM's API server (VLLM_HTTP_TIMEOUT_KEEP_ALIVE) close it. One taken
# for closed too early costs one paced request, one taken for open too long a burst.
KEEPALIVE_EXPIRY_S = 4.0


@dataclass(eq=False)
class Replica:
    """One endpoint of the fleet, with what the driver counts of it."""

    index: int
    handle: ServerHandle
    state: str = STARTING
    outstanding: int = 0
    answered: int = 0
    why_gone: str | None = None
    handback: asyncio.Event = field(default_factory=asyncio.Event)
    handback_reason: str = ""
    in_flight: set[str] = field(default_factory=set)
    unanswered: dict[str, int] = field(default_factory=dict)
    clock: itertools.count = field(default_factory=itertools.count)
    version: str | None = None
    judged: int = 0
    cleared: bool = False
    connections: int = 0
    connection_gap: float = CONNECTION_GAP_S
    opened_at: float = float("-inf")
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)
    keepalive_expiry: float = KEEPALIVE_EXPIRY_S
    monotonic: Callable[[], float] = time.monotonic
    # When the k-th of the `connections` was last busy (k requests outstanding at once), and the engine's generation
    # they were opened to: a restarted server closed them all.
    last_busy: list[float] = field(default_factory=list)
    connected_generation: int = 0

    @property
    def url(self) -> str:
        return self.handle.url

    def opens_connection(self) -> bool:
        """Whether the request just counted in `outstanding` needs a new connection: more requests are outstanding
        here than the client holds connections to this server. It holds as many as were busy at once since the
        engine last (re)started, less those idle past `keepalive_expiry`, which the client and the server close
        (the client reuses its oldest idle connection first, so the connections past the level in use idle out)."""
        if self.handle.generation != self.connected_generation:
            self.connected_generation, self.connections, self.last_busy = self.handle.generation, 0, []
        level, now = self.outstanding, self.monotonic()
        if level <= self.connections and now - self.last_busy[level - 1] > self.keepalive_expiry:
            self.connections = level - 1
        if level <= self.connections:
            return False
        self.last_busy = [*self.last_busy[: self.connections], *[now] * (level - self.connections)]
        self.connections = level
        return True

    def busy_until_now(self) -> None:
        """A request ends: the connections of every level outstanding were in use until now."""
        levels = min(self.outstanding, len(self.last_busy))
        self.last_busy[:levels] = [self.monotonic()] * levels

    async def admit(self) -> None:
        """Waits until `connection_gap` (CONNECTION_GAP_S) after the last new connection to this server."""
        async with self.opening:
            loop = asyncio.get_running_loop()
            wait = self.opened_at + self.connection_gap - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self.opened_at = loop.time()

    async def paced_post(self, client: httpx.AsyncClient, body: bytes, opens: bool) -> Answer:
        """The request, once its new connection (`opens`) may open."""
        if opens:
            await self.admit()
        try:
            return await post_chat(client, self.url, body, self.handle.headers)
        finally:
            self.busy_until_now()

    def provenance(self) -> str:
        """What a row this replica answered records of where its text came from (progress.RowResult.server)."""
        return json.dumps({"server": self.url, "vllm_version": self.version})

    def hand_back(self, reason: str) -> None:
        """The pages in flight here go back to the pump at once (the server is hung or gone); later ones wait anew."""
        self.handback_reason = reason
        self.handback.set()
        self.handback = asyncio.Event()

    def answered_after(self, sent: int) -> None:
        """An answer to a request sent at `sent`: the engine outlived every failure before it, so none of those
        pages was in flight at a death."""
        self.unanswered = {page: failed for page, failed in self.unanswered.items() if failed > sent}

    def witnesses(self) -> set[str]:
        """The pages in flight here, and those that failed here since the engine last proved alive."""
        pages = self.in_flight | set(self.unanswered)
        self.unanswered = {}
        return pages

    def report(self) -> dict:
        """This replica's line of the summary: where it ran, how many pages it answered, its restarts, and where
        the start of a server this run spawned went (startup_log.py)."""
        return {
            "url": self.url,
            "gpu": self.handle.launch.gpu if self.handle.launch is not None else None,
            "pages": self.answered,
            "restarts": self.handle.restarts,
            "state": self.state,
            "startup": self.handle.startup,
        }
