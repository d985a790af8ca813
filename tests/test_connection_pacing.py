"""New connections to one server open CONNECTION_GAP_S apart (issue 41, item 2).

The API server processes of one `vllm serve` share a listening socket and the first to wake accepts every
connection waiting, so a burst of new connections put 294 of 384 requests on one of four processes (H200,
2026-12-02). The fleet spaces the requests that need a new connection; requests that reuse one go at once.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import httpx

from ocr_core.planning.engine_plan import ReplicaLaunch
from ocr_core.serving.fleet import Fleet
from ocr_core.serving.replica import CONNECTION_GAP_S, SERVING, Replica

ANSWER = {"choices": [{"message": {"content": "text"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 1}}


class Endpoint:
    url = "http://127.0.0.1:8000"
    headers: ClassVar[dict[str, str]] = {}
    launch = ReplicaLaunch(None, (), {})
    spawned = None
    generation = 0
    restarts = 0


def wave(fleet: Fleet, client: httpx.AsyncClient, count: int) -> list:
    replica = fleet.replicas[0]
    return [fleet.routing.post(replica, client, b"{}", f"page-{index}") for index in range(count)]


def test_a_burst_of_new_connections_to_one_server_opens_them_apart():
    arrivals: list[float] = []

    async def main() -> tuple[list[float], int]:
        release = asyncio.Event()

        async def handler(request: httpx.Request) -> httpx.Response:
            arrivals.append(asyncio.get_running_loop().time())
            await release.wait()
            return httpx.Response(200, json=ANSWER)

        fleet = Fleet([Replica(0, Endpoint())])
        fleet.replicas[0].state = SERVING
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            first = [asyncio.ensure_future(post) for post in wave(fleet, client, 12)]
            while len(arrivals) < 12:
                await asyncio.sleep(0.005)
            release.set()
            await asyncio.gather(*first)
            return arrivals[:], fleet.replicas[0].connections

    times, connections = asyncio.run(main())
    assert times[-1] - times[0] >= 10 * CONNECTION_GAP_S, times  # 11 gaps, one spared for the arrivals' jitter
    assert connections == 12


def test_requests_that_reuse_a_connection_are_not_held_back():
    """Once 8 connections were opened, 8 more requests at a time need none: the replica's high-water mark stays,
    and no second round of spacing begins (the second wave takes less than the first's spacing)."""

    async def main() -> tuple[float, float, int]:
        async def handler(request: httpx.Request) -> httpx.Response:
            await asyncio.sleep(0.05)
            return httpx.Response(200, json=ANSWER)

        fleet = Fleet([Replica(0, Endpoint())])
        fleet.replicas[0].state = SERVING
        loop = asyncio.get_running_loop()
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            began = loop.time()
            await asyncio.gather(*wave(fleet, client, 8))
            first = loop.time() - began
            began = loop.time()
            await asyncio.gather(*wave(fleet, client, 8))
            second = loop.time() - began
        return first, second, fleet.replicas[0].connections

    first, second, connections = asyncio.run(main())
    assert connections == 8
    assert first >= 0.05 + 7 * CONNECTION_GAP_S * 0.99
    assert second < first
