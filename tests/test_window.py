"""The window: fixed stays put; adaptive grows only on returned pages while nothing waits, within its cap."""

from __future__ import annotations

import asyncio

from ocr_core.hostmem import GIB, memory_cap
from ocr_core.window import Window


def run(coroutine):
    return asyncio.run(coroutine)


def test_fixed_window_never_moves():
    async def scenario():
        window = Window(4, 4)
        for _ in range(4):
            await window.acquire()
        for _ in range(4):
            await window.release(waiting=0)
        return window

    window = run(scenario())
    assert window.limit == 4
    assert window.peak_in_flight == 4


def test_adaptive_window_does_not_grow_before_a_result():
    async def scenario():
        window = Window(2, 100, adaptive=True)
        for _ in range(2):
            await window.acquire()
        third = asyncio.create_task(window.acquire())
        await asyncio.sleep(0.01)
        blocked = not third.done()
        await window.release(waiting=0, acknowledged=False)
        await asyncio.wait_for(third, 1)
        return window, blocked

    window, blocked = run(scenario())
    assert blocked
    assert window.limit == 2


def test_adaptive_window_grows_while_queue_is_empty_and_stops_at_cap():
    async def scenario():
        window = Window(2, 6, adaptive=True)
        for _ in range(10):
            await window.acquire()
            await window.release(waiting=0)
        return window

    assert run(scenario()).limit == 6


def test_adaptive_window_holds_on_short_queue_and_shrinks_on_long():
    async def scenario():
        window = Window(32, 64, adaptive=True, target_waiting=4)
        await window.acquire()
        await window.release(waiting=3)
        held = window.limit
        await window.acquire()
        await window.release(waiting=40)
        return held, window.limit

    held, shrunk = run(scenario())
    assert held == 32
    assert shrunk == 31


def test_memory_cap_follows_available_memory():
    cap, why = memory_cap(per_page=int(0.1 * GIB), available=2 * GIB, share=0.5)
    assert cap == 10
    assert "2.0 GiB available" in why
    assert memory_cap(available=0)[0] == 1
