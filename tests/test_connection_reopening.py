"""New connections to a server are paced again when the client's connections to it are gone (issue 41's pacing).

The fleet spaces only the requests that need a new connection, and counts the connections the client holds as the
most requests ever outstanding at one server. A server that restarted closed every connection, and httpx (like the
server) closes a connection idle past its keep-alive expiry: either way the client holds fewer than the count, and the
next wave would open its connections in one burst, which lands on one API server process.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import httpx

from ocr_core.planning.engine_plan import ReplicaLaunch
from ocr_core.serving.fleet import Fleet
from ocr_core.serving.replica import SERVING, Replica

ANSWER = {"choices": [{"message": {"content": "text"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 1}}


class Endpoint:
    url = "http://127.0.0.1:8000"
    headers: ClassVar[dict[str, str]] = {}
    launch = ReplicaLaunch(None, (), {})
    spawned = None
    restarts = 0

    def __init__(self) -> None:
        self.generation = 0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class PacedFleet:
    """One serving replica under a clock of the test, that counts the requests paced as new connections."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.replica = Replica(0, Endpoint(), connection_gap=0.0)
        self.replica.monotonic = self.clock
        self.replica.state = SERVING
        self.fleet = Fleet([self.replica])
        self.paced = 0
        admit = self.replica.admit

        async def counted_admit() -> None:
            self.paced += 1
            await admit()

        self.replica.admit = counted_admit

    async def wave(self, client: httpx.AsyncClient, count: int) -> int:
        """`count` requests at once; how many of them were paced."""
        before = self.paced
        await asyncio.gather(*(self.fleet.routing.post(self.replica, client, b"{}", f"p{i}") for i in range(count)))
        return self.paced - before


def waves(steps) -> list[int]:
    """Runs `steps` (a wave's size, or a callable that changes the world between waves) on one client."""

    async def main() -> list[int]:
        paced = PacedFleet()
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json=ANSWER))
        counts = []
        async with httpx.AsyncClient(transport=transport) as client:
            for step in steps:
                if callable(step):
                    step(paced)
                else:
                    counts.append(await paced.wave(client, step))
        return counts

    return asyncio.run(main())


def later(seconds: float):
    def advance(paced: PacedFleet) -> None:
        paced.clock.now += seconds

    return advance


def restart(paced: PacedFleet) -> None:
    paced.replica.handle.generation += 1


def test_a_restarted_server_gets_its_new_connections_paced_again():
    assert waves([4, restart, 4]) == [4, 4]


def test_connections_in_use_within_the_keep_alive_expiry_are_reused_unpaced():
    assert waves([4, later(1.0), 4, later(3.0), 4]) == [4, 0, 0]


def test_connections_idle_past_the_keep_alive_expiry_are_paced_again():
    assert waves([4, later(6.0), 4]) == [4, 4]


def test_only_the_connections_that_stayed_idle_are_paced_again():
    """Two requests at a time kept two connections alive while six of the eight idled out."""
    assert waves([8, later(3.0), 2, later(3.0), 2, later(1.0), 8]) == [8, 0, 0, 6]
