"""The window: fixed stays put; adaptive grows only on returned pages while nothing waits, within its cap."""

from __future__ import annotations

import asyncio

from ocr_core.serving.hostmem import GIB, MemoryGuard
from ocr_core.shapes.window import Window, engine_window


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


async def filled_with_one_more_waiting(window: Window) -> tuple[asyncio.Task, bool]:
    """Takes every slot of the window, then asks for one more: that request's task, and whether it waits."""
    for _ in range(window.limit):
        await window.acquire()
    more = asyncio.create_task(window.acquire())
    await asyncio.sleep(0.01)
    return more, not more.done()


def test_adaptive_window_does_not_grow_before_a_result():
    async def scenario():
        window = Window(2, 100, adaptive=True)
        third, blocked = await filled_with_one_more_waiting(window)
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


def test_pages_held_before_the_engine_stop_growth():
    """The engine runs 10 of 40 pages and queues none: 30 sit in the API server's preprocessing."""

    async def scenario():
        window = Window(40, 512, adaptive=True)
        for _ in range(41):
            if window.in_flight < window.limit:
                await window.acquire()
        await window.release(waiting=0, running=10)
        return window.limit

    assert run(scenario()) == 39


def test_memory_guard_starts_from_the_prior_then_measures():
    guard = MemoryGuard(ceiling=500, local_server=False, reading=lambda: 2 * GIB)
    cap, why = guard.cap(in_flight=0)
    assert cap == 10
    assert "2.0 GiB available" in why and "assumed" in why
    guard.observe(body_bytes=1_000_000, pixels=3_000_000)
    cap, why = guard.cap(in_flight=0)
    assert cap == 500
    assert "measured" in why


def test_a_local_server_makes_each_page_cost_more():
    remote = MemoryGuard(ceiling=10_000, local_server=False, reading=lambda: 8 * GIB)
    local = MemoryGuard(ceiling=10_000, local_server=True, reading=lambda: 8 * GIB)
    for guard in (remote, local):
        guard.observe(body_bytes=1_400_000, pixels=3_080_000)
    assert local.cap(0)[0] < remote.cap(0)[0] / 10


def test_window_never_exceeds_the_cap_when_memory_is_small():
    """An adaptive window that wants to grow, while available memory shrinks as pages enter flight."""
    total = 3 * GIB

    async def scenario():
        window = Window(32, 512, adaptive=True)
        guard = MemoryGuard(
            ceiling=512, local_server=True, reading=lambda: max(0, total - window.in_flight * GIB // 10)
        )
        await window.set_cap(guard.cap(window.in_flight)[0])
        seen = []
        for step in range(300):
            await window.acquire()
            guard.observe(body_bytes=1_400_000, pixels=3_080_000)
            if step % 3 == 0:
                await window.release(waiting=0)
            await window.set_cap(guard.cap(window.in_flight)[0])
            seen.append((window.limit, window.cap, window.in_flight))
            while window.in_flight >= window.limit:
                await window.release(waiting=0)
        return seen

    seen = run(asyncio.wait_for(scenario(), 10))
    assert all(limit <= cap for limit, cap, _ in seen)
    assert max(cap for _, cap, _ in seen) < 40


def test_the_fixed_window_fills_the_engines_batch_not_32():
    """One engine decodes at most max_num_seqs pages, fewer when its KV cache holds fewer full-length sequences;
    32 only where the server does not say how large its cache is."""
    assert engine_window(capacity=435, max_num_seqs=1024, fallback=32) == 435
    assert engine_window(capacity=3000, max_num_seqs=1024, fallback=32) == 1024
    assert engine_window(capacity=None, max_num_seqs=1024, fallback=32) == 32


def test_a_fixed_window_resized_for_a_joining_replica_admits_at_once_within_its_cap():
    async def scenario():
        window = Window(2, 4)
        third, blocked = await filled_with_one_more_waiting(window)
        await window.resize(6)
        await asyncio.wait_for(third, 1.0)
        return blocked, window

    blocked, window = run(scenario())
    assert blocked
    assert (window.limit, window.cap, window.in_flight, window.peak_limit) == (4, 4, 3, 4)


def test_an_adaptive_window_widened_for_a_joining_replica_never_narrows_and_admits_at_once():
    async def scenario():
        window = Window(2, 10, adaptive=True)
        third, blocked = await filled_with_one_more_waiting(window)
        had = await window.widen(5)
        await asyncio.wait_for(third, 1.0)
        await window.widen(3)
        widened = window.limit
        await window.widen(40)
        return blocked, had, widened, window

    blocked, had, widened, window = run(scenario())
    assert blocked and (had, widened) == (2, 5)
    assert (window.limit, window.cap, window.in_flight, window.peak_limit) == (10, 10, 3, 10)
