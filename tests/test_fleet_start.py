"""How a spawned fleet starts: replicas together where the plan says that is safe, else one after another; each
replica that joins widens a fixed window by its engine's batch.

Fake handles stand in for `vllm serve`: a start is a pause in a worker thread, recorded with its times, so the
overlap of starts is measured, not assumed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import threading
import time

import pytest

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.errors import CommandError
from ocr_core.planning.engine_plan import EnginePlan, ReplicaLaunch, plan_engine
from ocr_core.planning.plan_records import engine_request, window_policy
from ocr_core.planning.scale import Gpu, Machine
from ocr_core.serving.fleet import Fleet
from ocr_core.serving.handle import Target
from ocr_core.serving.hostmem import GIB, MemoryGuard
from ocr_core.serving.ports import free_ports
from ocr_core.serving.replica import SERVING, Replica
from ocr_core.shapes import served as run_server
from ocr_core.shapes.served import replica_window
from tests.test_pump_faults import recipe

H200 = Gpu("0", "NVIDIA H200", 143771)
START_S = 0.3


class FakeHandle:
    """A replica's server: `spawn` takes START_S and records when it ran; nothing answers before a start."""

    def __init__(self, index: int, spans: list[tuple[int, float, float]], answering: bool = False) -> None:
        self.url = f"http://127.0.0.1:{8010 + index}"
        self.index = index
        self.headers: dict[str, str] = {}
        self.launch = ReplicaLaunch("0", (), {})
        self.spawned: object | None = None
        self.generation = 0
        self.restarts = 0
        self.spans = spans
        self.already = answering
        self.closed = False
        self.lock = threading.Lock()

    def answering(self) -> bool:
        return self.already

    def spawn(self) -> None:
        began = time.monotonic()
        time.sleep(START_S)
        with self.lock:
            self.spans.append((self.index, began, time.monotonic()))
        self.spawned = object()

    async def open(self) -> Target:
        if not self.already:
            await asyncio.to_thread(self.spawn)
        return Target(self.url, "m", {})

    def close(self) -> None:
        self.closed = True


def plan_for(version: str | None) -> EnginePlan:
    facts, settings = recipe()
    request = dataclasses.replace(engine_request(facts, settings), params_b=0.8)
    return plan_engine(request, Machine((H200,), 16), version)


def start_fleet(plan: EnginePlan, answering: bool = False) -> tuple[Fleet, list[tuple[int, float, float]], list[int]]:
    """Opens the fleet and brings in the rest, as run_server does; returns the start spans and, per join, the
    number of replicas serving then."""
    spans: list[tuple[int, float, float]] = []
    handles = [FakeHandle(index, spans, answering and index == 0) for index in range(plan.scale.replicas)]
    fleet = Fleet([Replica(index, handle) for index, handle in enumerate(handles)], plan)
    joins: list[int] = []

    async def joined() -> None:
        joins.append(len(fleet.serving()))

    async def scenario() -> None:
        await fleet.open()
        fleet.joined = joined
        await fleet.joining.start_rest()

    asyncio.run(scenario())
    return fleet, spans, joins


def test_replicas_with_their_kv_cache_in_bytes_start_together():
    fleet, spans, joins = start_fleet(plan_for("0.30.0"))
    assert len(spans) == 3
    last_began = max(began for _, began, _ in spans)
    first_ended = min(ended for _, _, ended in spans)
    assert last_began < first_ended, f"the starts did not overlap: {spans}"
    assert [replica.state for replica in fleet.replicas] == [SERVING] * 3
    assert sorted(joins) == [2, 3]


def test_replicas_that_would_profile_one_gpu_together_start_one_after_another():
    _, spans, joins = start_fleet(plan_for("0.10.2"))
    ordered = sorted(spans, key=lambda span: span[1])
    assert [index for index, _, _ in ordered] == [0, 1, 2]
    assert all(later[1] >= earlier[2] for earlier, later in itertools.pairwise(ordered)), spans
    assert joins == [2, 3]


def test_a_server_already_answering_stops_the_replicas_started_beside_it():
    fleet, _, joins = start_fleet(plan_for("0.30.0"), answering=True)
    assert len(fleet.replicas) == 1
    assert fleet.replicas[0].handle.spawned is None
    assert joins == []


def test_the_fixed_window_per_replica_is_its_engines_batch():
    """A spawned H200 replica whose KV cache holds 435 full-length sequences: 435 of vLLM's 1024; a server this
    run did not start: at most vLLM's smaller default, 256; no cache size published: 32."""
    plan = plan_for("0.30.0")
    fleet, _, _ = start_fleet(plan)
    fleet.replicas[1].state = fleet.replicas[2].state = "starting"
    assert replica_window(plan, fleet, capacity=435) == 435
    fleet.replicas[1].state = SERVING
    assert replica_window(plan, fleet, capacity=2 * 3000) == 1024
    fleet.replicas[0].handle.spawned = None
    assert replica_window(plan, fleet, capacity=2 * 3000) == 256
    assert replica_window(plan, fleet, capacity=None) == 32


def test_the_fixed_window_stays_within_host_memory(monkeypatch):
    """Every page in flight holds its image in host memory (and, beside a local server, its processed pixels):
    OvisOCR2's 3 x 308-page window sat at 923 in flight with the GPU 31 % busy (H200, 2026-12-01), so the engines'
    batch is bounded by what half the host's free memory holds, as the adaptive window is."""
    _, settings = recipe()
    monkeypatch.setattr(
        run_server, "MemoryGuard", functools.partial(MemoryGuard, reading=lambda: 10 * GIB)
    )  # 50 pages at the 0.1 GiB prior
    window, guard = run_server.make_window(window_policy(settings, "server"), True, 3, 924, fixed=308, full=924)
    assert (window.limit, window.cap, guard) == (50, 50, None)
    monkeypatch.setattr(run_server, "MemoryGuard", functools.partial(MemoryGuard, reading=lambda: 1000 * GIB))
    roomy, _ = run_server.make_window(window_policy(settings, "server"), True, 3, 924, fixed=308, full=924)
    assert (roomy.limit, roomy.cap) == (308, 924)


def test_the_adaptive_window_opens_to_the_kv_caches_of_the_replicas_that_join(monkeypatch):
    """Before: the adaptive window opened at the KV caches of the replicas serving when the first one answered and
    grew only by a page per page returned while no page waited anywhere, which pages held in the API servers'
    preprocessing never allow. On an H100 the recipe's three replicas, started together, opened it at 120 (one
    replica's cache) and ran 113-182 pages in flight the whole job, 43 running a engine, where the same replicas fed
    330-550 ran 92 each and 8 % more pages (bench/results/h100-mps-gil-2026-12-06.json). Now each joining replica
    opens it to at least what the caches of the replicas then serving hold; the memory cap still bounds it."""
    assert adaptive_window_over_joins(monkeypatch, memory_gib=1000) == (120, 360)
    assert adaptive_window_over_joins(monkeypatch, memory_gib=50) == (120, 250), "beyond half the host's memory"


def adaptive_window_over_joins(monkeypatch: pytest.MonkeyPatch, memory_gib: int) -> tuple[int, int]:
    """The adaptive window of three replicas, each with a KV cache of 120 full-length sequences, when the first
    serves and once the other two have joined."""
    monkeypatch.setattr(run_server, "MemoryGuard", functools.partial(MemoryGuard, reading=lambda: memory_gib * GIB))
    plan = plan_for("0.30.0")
    _, settings = recipe()
    fleet = Fleet([Replica(index, FakeHandle(index, [])) for index in range(plan.scale.replicas)], plan)

    async def capacity_now() -> int:
        return 120 * len(fleet.serving())

    async def scenario() -> tuple[int, int]:
        await fleet.open()
        window, _ = await run_server.open_window(window_policy(settings, "saturate"), plan, fleet, capacity_now, True)
        opened = window.limit
        await fleet.joining.start_rest()
        return opened, window.limit

    return asyncio.run(scenario())


def test_no_replica_port_is_planned_past_65535():
    """Before: `--server http://127.0.0.1:65535 --replicas 2` looked for a port above 65535 and ended in an
    OverflowError, reported as an internal error (exit 1)."""
    with pytest.raises(CommandError, match="no free port above 65535") as refused:
        free_ports(65535, 1)
    assert "--server http://127.0.0.1:8000" in str(refused.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:65536", "http://gpu-box:70000,http://other:8000"])
def test_a_server_port_past_65535_is_a_command_error(url, capsys):
    facts, _ = recipe()
    with pytest.raises(SystemExit) as refused:
        parse_arguments(build_parser("recipe.py", facts, "server"), ["in", "./out", "--server", url])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--server" in err and "port" in err and "65535" in err
