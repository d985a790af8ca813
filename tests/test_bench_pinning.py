"""The levers' A/B kit: the pinned layout (bench/gpu/pinning.py), each engine core's step loop on a CPU of its own,
every other thread of the fleet and the client on the CPUs left, and every CPU back afterwards, on real processes;
and the comparison of a lever's texts with the reference run's (same_pages.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_bench import gpu_module

ENGINE = """
import ctypes, threading, time
ctypes.CDLL(None).prctl(15, b"VLLM::EngineCor", 0, 0, 0)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture(scope="module")
def pinning():
    return gpu_module("pinning")


def test_engine_cpus_come_from_the_top_a_physical_core_apart_while_the_topology_allows(pinning):
    pairs = {cpu: frozenset({cpu % 8, cpu % 8 + 8}) for cpu in range(16)}  # 8 cores, two threads each
    mine, rest = pinning.choose(range(16), pairs, 3)
    assert mine == [15, 14, 13] and rest == list(range(13))
    mine, _ = pinning.choose(range(4), {cpu: frozenset({cpu % 2, cpu % 2 + 2}) for cpu in range(4)}, 3)
    assert mine[:2] == [3, 2] and len(set(mine)) == 3, "two cores for three engines: the third shares one"
    with pytest.raises(ValueError, match="need 4 CPUs"):
        pinning.choose(range(3), {}, 3)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_a_pinned_run_gives_the_step_loop_its_cpu_alone_and_every_cpu_back_after(pinning):
    everything = os.sched_getaffinity(0)
    engine = subprocess.Popen([sys.executable, "-c", ENGINE], stdout=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        assert engine.stdout.readline().strip() == "ready"
        helper = next(int(tid) for tid in os.listdir(f"/proc/{engine.pid}/task") if int(tid) != engine.pid)
        with pinning.pinned([engine.pid], lines.append) as layout:
            (cpu,) = layout["engine_cpus"].values()
            assert layout["engine_cpus"] == {str(engine.pid): max(everything)}
            assert os.sched_getaffinity(engine.pid) == {cpu}, "the step loop alone on its CPU"
            assert cpu not in os.sched_getaffinity(helper), "the engine's other threads go with the rest"
            assert os.sched_getaffinity(0) == set(layout["rest"]), "the client, started from here, too"
        assert os.sched_getaffinity(engine.pid) == everything and os.sched_getaffinity(helper) == everything
        assert os.sched_getaffinity(0) == everything
        assert lines[0].startswith("pinned ") and lines[-1].startswith("unpinned ")
    finally:
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait()


def test_a_fleet_without_an_engine_core_runs_unpinned_and_says_so(pinning):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    lines: list[str] = []
    try:
        time.sleep(0.2)
        with pinning.pinned([sleeper.pid], lines.append) as layout:
            assert layout is None
        assert lines == ["not pinned: no engine core process (VLLM::EngineCor) under the replicas"]
    finally:
        os.killpg(sleeper.pid, signal.SIGKILL)
        sleeper.wait()


def test_a_lever_s_texts_are_compared_with_the_reference_s_page_by_page(tmp_path):
    """same_pages.py: the share of pages both runs wrote with the same text, and how many texts the reference had
    (one text repeated would make any comparison pass)."""
    same_pages = gpu_module("same_pages")

    def output(name: str, parts: list[list[str]]) -> None:
        (tmp_path / name / "data").mkdir(parents=True)
        for index, texts in enumerate(parts):
            path = tmp_path / name / "data" / f"train-00000-of-00001-{index:05d}.parquet"
            pq.write_table(pa.table({"markdown": texts}), path)

    output("base-a", [["a", "b"], ["c", "d"]])
    output("lever-a", [["a", "x", "c"]])
    found = same_pages.agreement(tmp_path / "base-a", tmp_path / "lever-a")
    assert found == {"reference": "base-a", "pages": 3, "same_text": 2, "share": 0.6667, "distinct": 3}
    (tmp_path / "empty" / "data").mkdir(parents=True)
    assert same_pages.agreement(tmp_path / "base-a", tmp_path / "empty") is None
    rows = [{"arm": "base-a", "ok": True}, {"arm": "lever-a", "ok": True}, {"arm": "failed-a", "ok": False}]
    same_pages.compare(rows, tmp_path, "base-a")
    assert rows[1]["same_text_as_reference"] == found
    assert "same_text_as_reference" not in rows[0] and "same_text_as_reference" not in rows[2]
