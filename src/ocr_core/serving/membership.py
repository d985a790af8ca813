"""Which replicas belong to the fleet and where each stands (starting, serving, recovering, gone): the one place a
replica's state changes, so that a page waiting for a serving replica wakes as soon as one serves. The fleet's
totals (restarts, pages answered) and its /metrics are read over the members here too."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx

from ..errors import JobFailed
from .handle import Target, metrics_page
from .replica import GONE, SERVING, STARTING, Replica


class Membership:
    """`given`: the user named these servers (several --server URLs), so none is started, only waited for.
    `model`: the name the fleet's servers serve the model under, known once the first one opens."""

    def __init__(self, replicas: Sequence[Replica], given: bool = False) -> None:
        self.replicas = list(replicas)
        self.given = given
        self.model = ""
        self.changed = asyncio.Condition()

    @property
    def restarts(self) -> int:
        """Restarts completed over the whole fleet: a page failing since before one gets a fresh retry budget."""
        return sum(replica.handle.generation for replica in self.replicas)

    @property
    def answered(self) -> int:
        """Pages answered over the whole fleet: a page failing while this grows fails on its own account."""
        return sum(replica.answered for replica in self.replicas)

    def target(self, replica: Replica) -> Target:
        return Target(replica.url, self.model, replica.handle.headers)

    def serving(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.state == SERVING]

    def staying(self) -> int:
        """How many replicas have not left the fleet: the last one's failure is the run's."""
        return len([replica for replica in self.replicas if replica.state != GONE])

    def full(self) -> bool:
        """Every replica has started (or left): from here on the fleet runs at the rate a long job sees."""
        return all(replica.state != STARTING for replica in self.replicas)

    def all_gone(self) -> bool:
        return all(replica.state == GONE for replica in self.replicas)

    def gone_message(self) -> str:
        reasons = "; ".join(f"{replica.url} {replica.why_gone}" for replica in self.replicas)
        return f"no vLLM server is left to send pages to: {reasons}"

    def urls(self) -> str:
        return ", ".join(replica.url for replica in self.replicas)

    async def set_state(self, replica: Replica, state: str) -> None:
        """Moves a replica that has not left to `state` and wakes whoever waits on the fleet; one gone stays gone."""
        async with self.changed:
            if replica.state != GONE:
                replica.state = state
            self.changed.notify_all()

    async def wait_serving(self) -> list[Replica]:
        """The serving replicas, once there is one; waits while every replica recovers or starts (a death's
        `deaths` are counted before its replica serves again)."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.serving() or self.all_gone())
            serving = self.serving()
            if not serving:
                raise JobFailed(self.gone_message())
            return serving

    async def metrics(self, client: httpx.AsyncClient) -> str:
        """The Prometheus pages of every serving replica, one after another: summed, they describe the fleet."""
        pages = await asyncio.gather(*(metrics_page(client, self.target(replica)) for replica in self.serving()))
        return "\n".join(pages)

    def report(self) -> list[dict]:
        return [replica.report() for replica in self.replicas]
