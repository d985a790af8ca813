"""How many pages may be in flight at once.

Continuous batching only stays full when the server always has more pages than it is decoding, so the driver
keeps a window of requests open. A fixed window is predictable; the adaptive one widens like TCP slow start while
pages come back and the server's queue is empty, and stops at a cap set by host memory (every page in flight
holds its image in RAM on both sides).

The fixed window is sized per engine from what the engine reports, so that it fills the engine's batch: the
scheduler runs at most max_num_seqs sequences, and fewer when its KV cache holds fewer full-length sequences. It
grows by that much as each replica of the fleet joins, within what host memory holds, and does not adapt otherwise.
The adaptive window opens at what the KV caches of the replicas serving hold, and again to at least that as each
later replica joins: its own growth stops while the API servers hold pages, so it would keep one replica's share.
"""

from __future__ import annotations

import asyncio


class Window:
    """An asyncio gate whose limit can move while pages are in flight."""

    def __init__(self, limit: int, cap: int, adaptive: bool = False, target_waiting: int = 4) -> None:
        self.cap = max(1, cap)
        self.limit = max(1, min(limit, self.cap))
        self.adaptive = adaptive
        self.target_waiting = target_waiting
        self.in_flight = 0
        self.peak_in_flight = 0
        self.peak_limit = self.limit
        self._changed = asyncio.Condition()

    async def acquire(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < self.limit)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    async def release(self, waiting: float | None, running: float | None = None, acknowledged: bool = True) -> None:
        """Frees a slot; an acknowledged page (a result came back) may move the limit."""
        async with self._changed:
            self.in_flight -= 1
            if acknowledged:
                self._adapt(waiting, running)
            self._changed.notify_all()

    def _adapt(self, waiting: float | None, running: float | None) -> None:
        """Grows by one per returned page (doubling per round trip) while the engine takes every page it gets.

        Two signs say more pages would only queue: pages waiting in the engine's scheduler, and pages in flight
        that the engine has not even seen yet (held up in the API server's image preprocessing, the usual limit
        on fast GPUs). A short queue holds the limit; a long one shrinks it. `waiting` is None when the server
        exposes no gauges: then only the cap bounds growth.
        """
        if not self.adaptive:
            return
        if waiting is None:
            backlog = 0.0
        else:
            unseen = self.in_flight - waiting - running if running is not None else 0.0
            backlog = waiting + max(0.0, unseen)
        tolerance = max(self.target_waiting, self.limit // 8)
        if backlog == 0:
            self.limit = min(self.cap, self.limit + 1)
        elif backlog > 2 * tolerance:
            self.limit = max(1, self.limit - 1)
        self.peak_limit = max(self.peak_limit, self.limit)

    async def resize(self, size: int) -> None:
        """A fixed window's new size (a replica joined the fleet), within its cap: admits at once up to it."""
        async with self._changed:
            self.limit = max(1, min(size, self.cap))
            self.peak_limit = max(self.peak_limit, self.limit)
            self._changed.notify_all()

    async def widen(self, size: int) -> int:
        """An adaptive window opened to at least `size` (a replica joined: what the engines serving now can run at
        once), within its cap; it never narrows here, and admits at once up to it. Returns the limit it had."""
        async with self._changed:
            before = self.limit
            self.limit = max(self.limit, min(size, self.cap))
            self.peak_limit = max(self.peak_limit, self.limit)
            self._changed.notify_all()
            return before

    async def set_cap(self, cap: int) -> None:
        """A lower cap stops admissions until pages in flight drain below it; nothing in flight is cancelled."""
        async with self._changed:
            self.cap = max(1, cap)
            self.limit = min(self.limit, self.cap)
            self._changed.notify_all()


def engine_window(capacity: int | None, max_num_seqs: int, fallback: int) -> int:
    """Pages one engine can decode at once: its scheduler's max_num_seqs, or fewer when its KV cache holds fewer
    full-length sequences; `fallback` where the server publishes no cache size (its batch is unknown)."""
    return max(1, min(max_num_seqs, capacity)) if capacity else fallback
