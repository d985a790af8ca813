"""The bench kit's per-process figures (bench/gpu/procs.py, pyspy.py): the CPU a role used and the engines'
queues over the sustained interval alone, and the share of a py-spy profile by thread and frame.

Issue 41's first H200 figures divided each process's CPU seconds by the whole arm (start-up included), which read
as 0.6 core per API server while those processes were near a core and a half each while serving; these tests pin
the windowed figures with samples whose answer is known.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.testbed.env import REPO_ROOT


@pytest.fixture(scope="module")
def kit():
    sys.path.insert(0, str(REPO_ROOT / "bench" / "gpu"))
    try:
        yield importlib.import_module("procs"), importlib.import_module("pyspy")
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "gpu"))


def record(series: dict[int, list[tuple[float, int]]], names: dict[int, str]) -> dict:
    return {
        "names": {str(pid): name for pid, name in names.items()},
        "series": {str(pid): [list(row) for row in rows] for pid, rows in series.items()},
    }


def test_cpu_over_the_sustained_interval_leaves_out_the_start_up(kit):
    """An API server that burns 40 CPU s importing and compiling, then 1.5 cores while serving: over the arm it
    reads far below what it used while serving; over the interval, 1.5 cores."""
    procs, _ = kit
    api = [(0.0, 0), (100.0, 4000)] + [(100.0 + t, 4000 + 150 * t) for t in range(1, 101)]
    engine = [(float(t), 100 * t) for t in range(0, 201)]
    samples = record({11: api, 12: engine}, {11: "VLLM::APIServe", 12: "VLLM::EngineCor"})
    whole = procs.cpu_report(samples, None, 200.0)
    windowed = procs.cpu_report(samples, [120.0, 180.0], 60.0)
    assert whole["cores_by_role"]["api_server"] == 0.95
    assert windowed["cores_by_role"] == {"api_server": 1.5, "engine_core": 1.0}
    assert windowed["cpu_s_per_process"][0] == {"pid": 11, "name": "VLLM::APIServe", "cpu_s": 90.0, "cores": 1.5}


def test_a_process_with_fewer_than_two_samples_in_the_interval_counts_nothing(kit):
    procs, _ = kit
    samples = record({5: [(0.0, 0), (10.0, 500)], 6: [(0.0, 0), (30.0, 3000), (40.0, 4000)]}, {5: "x", 6: "y"})
    report = procs.cpu_report(samples, [25.0, 45.0], 20.0)
    assert [row["pid"] for row in report["cpu_s_per_process"]] == [6]
    assert report["cores_total"] == 0.5


def test_the_busiest_process_of_a_role_is_judged_on_recent_samples(kit):
    """py-spy's target: the API server busiest now, not the one that was busiest at start-up."""
    procs, _ = kit
    sampler = procs.CpuSampler()
    sampler.series = {1: [(0.0, 0), (50.0, 5000), (60.0, 5100)], 2: [(0.0, 0), (50.0, 1000), (60.0, 1900)]}
    sampler.names = {1: "VLLM::APIServe", 2: "VLLM::APIServe"}
    assert sampler.busiest("api_server", 10) == 2
    assert sampler.busiest("engine_core", 10) is None


def test_queues_over_the_interval_count_every_sample_inside_it(kit):
    procs, _ = kit
    samples = {"8010": [[0.0, 0, 0], [10.0, 100, 20], [20.0, 50, 0], [30.0, 0, 0]]}
    assert procs.queue_report(samples, [5.0, 25.0]) == {
        "8010": {"running_mean": 75.0, "waiting_mean": 10.0, "samples": 2}
    }
    assert procs.queue_report(samples)["8010"]["samples"] == 2, "without an interval: the samples with requests"


def test_a_folded_profile_is_shared_by_thread_innermost_frame_and_frame_on_stack(kit, tmp_path):
    _, pyspy = kit
    folded = tmp_path / "engine_core-7.txt"
    folded.write_text(
        "Thread 7 (idle);run (core.py:10);step (core.py:20);forward (model.py:5) 6\n"
        "Thread 7 (idle);run (core.py:10);step (core.py:21);schedule (sched.py:9) 3\n"
        "Thread 9;loop (io.py:3);recv (io.py:4) 1\n"
        "not a folded line\n"
    )
    summary = pyspy.summarize(folded)
    assert summary["samples"] == 10
    assert summary["threads"] == [["Thread 7 (idle)", 0.9], ["Thread 9", 0.1]]
    assert summary["innermost"][0] == ["forward (model.py)", 0.6]
    assert dict(map(tuple, summary["on_stack"]))["step (core.py)"] == 0.9, "two lines of one function are one frame"
    assert pyspy.summarize_folder(tmp_path / "absent") == []


@pytest.fixture(scope="module")
def figures():
    sys.path.insert(0, str(REPO_ROOT / "bench" / "gpu"))
    try:
        yield importlib.import_module("sustained"), importlib.import_module("machine_cpu")
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "gpu"))


def test_cpu_per_page_is_each_role_s_cores_over_the_sustained_rate_with_the_flavors_projected(figures):
    """10 busy cores at 10 pages/s is one core-second a page; 23 vCPUs at 0.75 of a core each feed 17.2 pages/s
    at that cost (a projection, stated as one)."""
    sustained, _ = figures
    held = {"cores_by_role": {"client": 1.0, "api_server": 5.0, "engine_core": 3.0, "other": 1.0}}
    page = sustained.per_page(held, 10.0)
    assert page["core_s_per_page"] == 1.0
    assert page["core_s_per_page_by_role"] == {"api_server": 0.5, "client": 0.1, "engine_core": 0.3, "other": 0.1}
    assert page["cpu_ceiling_projection"]["h200"] == 17.2 and page["cpu_ceiling_projection"]["l4x1"] == 6.0
    assert sustained.per_page(held, None) == {}, "no sustained interval, no figure per page"
    assert sustained.per_page({"cores_by_role": {"client": 0.0}}, 10.0) == {}, "no process sampled twice in it"


def test_the_sustained_figures_count_the_client_as_its_own_role_and_the_serving_threads_waits(figures):
    """A recipe process (the client) at half a core, an engine core whose main thread ran 0.9 s and waited 0.3 s
    each second, an API server: over the interval the client is a role of its own and the engine core's main thread
    waited a quarter of the time it wanted a CPU."""
    sustained, _ = figures
    ticks = {pid: [(float(t), rate * t) for t in range(0, 101)] for pid, rate in ((1, 50), (2, 100), (3, 150))}
    ns = [[float(t), int(0.9e9 * t), int(0.3e9 * t)] for t in range(0, 101)]
    names = {"1": "python3", "2": "VLLM::EngineCor", "3": "VLLM::APIServe"}
    stats = {
        "cpu_samples": {"names": names, "clients": [1], "series": {str(p): rows for p, rows in ticks.items()}},
        "sched_samples": {"names": {"2": names["2"]}, "series": {"2": {"main": ns, "all": ns}}},
    }
    summary = {"sustained_unix": [20.0, 80.0], "sustained_pages_per_s": 6.0}
    held = sustained.sustained_figures(stats, summary)
    assert held["cpu_sustained"]["cores_by_role"] == {"client": 0.5, "engine_core": 1.0, "api_server": 1.5}
    assert held["cpu_per_page"]["core_s_per_page"] == 0.5
    (engine,) = held["sched_sustained"]
    assert engine["role"] == "engine_core" and engine["main_thread"]["wait_share"] == 0.25
    assert engine["main_thread"]["on_cpu_cores"] == 0.9 and engine["main_thread"]["waiting_cores"] == 0.3


def test_cpu_per_page_counts_the_work_the_engines_did_in_the_interval_not_the_pages_sent_in_it(figures):
    """Two engines making 4,000 output tokens a second each at 800 a page do 10 pages' worth a second, pages in
    flight at both ends included, where the sustained page count read 6: the CPU per page divides by the work."""
    sustained, _ = figures
    ticks = {3: [(float(t), 500 * t) for t in range(0, 101)]}
    engines = {port: [[float(t), 120.0, 0.0, 4000.0 * t] for t in range(0, 101)] for port in ("8020", "8021")}
    stats = {
        "cpu_samples": {"names": {"3": "VLLM::APIServe"}, "clients": [], "series": {"3": ticks[3]}},
        "queue_samples": engines,
    }
    summary = {
        "sustained_unix": [20.0, 80.0],
        "sustained_pages_per_s": 6.0,
        "pages_per_s": 9.0,
        "output_tokens_per_s": 7200.0,
    }
    held = sustained.sustained_figures(stats, summary)
    assert held["engine_queues_sustained"]["8020"]["output_tokens_per_s"] == 4000.0
    assert held["work_pages_per_s"] == 10.0
    assert held["cpu_per_page"]["per_page_of"] == "output tokens"
    assert held["cpu_per_page"]["core_s_per_page"] == 0.5
    old = {**stats, "queue_samples": {"8020": [row[:3] for row in engines["8020"]]}}
    before = sustained.sustained_figures(old, summary)
    assert before["work_pages_per_s"] is None, "a record without the counter"
    assert before["cpu_per_page"]["per_page_of"] == "sustained pages"
    assert before["cpu_per_page"]["core_s_per_page"] == round(5.0 / 6.0, 3)


def test_a_process_counts_in_the_role_of_its_latest_sample(kit):
    """A driver's child is a copy of the driver (a client) between its fork and its exec of `vllm serve`: once it
    serves, its CPU is the server's."""
    procs, _ = kit
    sampler = procs.CpuSampler()
    sampler.sample([os.getpid()], 1.0, {os.getpid()})
    sampler.sample([os.getpid()], 2.0, set())
    assert sampler.record()["clients"] == []


def test_the_client_is_the_arm_s_command_tree_without_the_servers_it_started(kit, tmp_path):
    """A driver whose own arguments say `--serve vllm serve ...` stays the client; the `vllm serve` it started and
    that server's children are not."""
    procs, _ = kit
    server = tmp_path / "fake_vllm.py"
    server.write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    driver = tmp_path / "driver.py"
    driver.write_text(
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(server)!r}, 'serve'])\ntime.sleep(60)\n"
    )
    started = subprocess.Popen([sys.executable, str(driver), "--serve", "vllm", "serve", "m"])
    lone = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    try:
        tree: list[int] = []
        for _ in range(100):
            tree = descendants(started.pid)
            if len(tree) == 3:
                break
            time.sleep(0.1)
        assert len(tree) == 3
        assert procs.client_pids(tree) == {started.pid}
        assert procs.client_pids([lone.pid]) == {lone.pid}, "a command line of one word"
    finally:
        for pid in reversed(tree):
            os.kill(pid, signal.SIGKILL)
        started.wait()
        lone.kill()
        lone.wait()


def test_a_vllm_serve_that_serves_the_api_itself_counts_as_the_api_server(kit, tmp_path):
    """With `--api-server-count 1` the `vllm serve` process is the API server, under its untitled name: its CPU is
    the API server's, not "other". Where the tree has titled API servers it is their supervisor, also after they end
    (a fleet's teardown)."""
    procs, _ = kit
    serve = tmp_path / "vllm"
    serve.write_text("import sys, time\nprint('up', flush=True)\ntime.sleep(60)\n")
    titled = (
        "import ctypes, time\nctypes.CDLL(None).prctl(15, b'VLLM::APIServer', 0, 0, 0)\n"
        "print('up', flush=True)\ntime.sleep(60)\n"
    )
    server = subprocess.Popen([sys.executable, str(serve), "serve", "m"], stdout=subprocess.PIPE)
    api = subprocess.Popen([sys.executable, "-c", titled], stdout=subprocess.PIPE)
    try:
        server.stdout.readline(), api.stdout.readline()
        alone = procs.CpuSampler()
        alone.sample([server.pid], 1.0)
        assert procs.role(alone.names[server.pid]) == "api_server"
        beside = procs.CpuSampler()
        beside.sample([server.pid, api.pid], 1.0)
        assert procs.role(beside.names[server.pid]) == "other"
        assert procs.role(beside.names[api.pid]) == "api_server"
        beside.sample([server.pid], 2.0)
        assert procs.role(beside.names[server.pid]) == "other", "a supervisor stays one once its API servers end"
    finally:
        for each in (server, api):
            each.kill()
            each.wait()


def test_a_server_that_is_ending_keeps_the_role_it_served_in(kit, tmp_path):
    """A fleet's teardown samples each `vllm serve` once more while it exits: its command line reads empty then, so
    it no longer looks like a server. The one-API lease's one-a counted such an API server (255 CPU s) as the client
    for the whole run, from that one last sample: a process seen serving stays a server, in name and role."""
    procs, _ = kit
    serve = tmp_path / "vllm"
    serve.write_text("import sys, time\nprint('up', flush=True)\ntime.sleep(60)\n")
    server = subprocess.Popen([sys.executable, str(serve), "serve", "m"], stdout=subprocess.PIPE)
    try:
        server.stdout.readline()
        sampler = procs.CpuSampler()
        sampler.sample([server.pid], 1.0, procs.client_pids([server.pid]))
        assert procs.role(sampler.names[server.pid]) == "api_server" and sampler.record()["clients"] == []
        server.kill()
        for _ in range(100):  # the exited, unreaped server: its /proc entry stays, its command line is empty
            if not Path(f"/proc/{server.pid}/cmdline").read_bytes():
                break
            time.sleep(0.05)
        assert not procs.is_server(server.pid)
        sampler.sample([server.pid], 2.0, procs.client_pids([server.pid]))
        assert sampler.record()["clients"] == [], "the ending server is not the client"
        assert procs.role(sampler.names[server.pid]) == "api_server"
    finally:
        server.kill()
        server.wait()


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def test_the_machine_s_cpu_over_the_interval_says_busy_stolen_and_throttled(figures, tmp_path):
    """The serving threads waited to run while their processes' own CPU showed idle vCPUs (an H100 lease: 8.6 of
    16 busy, every main thread waiting): the whole machine's /proc/stat and its cgroup's cpu.stat say where the
    rest went. Sampled from files laid out as /proc and /sys/fs/cgroup are, one second apart."""
    _, machine_cpu = figures
    hz = machine_cpu.HZ
    (tmp_path / "proc").mkdir()
    cgroup = tmp_path / "sys" / "fs" / "cgroup"
    cgroup.mkdir(parents=True)
    (cgroup / "cpu.max").write_text("1600000 100000\n")
    sampler = machine_cpu.MachineSampler(root=str(tmp_path))
    for second in range(0, 11):
        # each second: 8 vCPUs of user, 2 of system, 1 of softirq, 3 stolen, 2 idle; 0.5 s throttled
        user, system, softirq, steal, idle = (n * hz * second for n in (8, 2, 1, 3, 2))
        stat = f"cpu  {user} 0 {system} {idle} 0 0 {softirq} {steal} 0 0\ncpu0 1 2 3\n"
        (tmp_path / "proc" / "stat").write_text(stat)
        throttled = f"nr_throttled {second * 10}\nthrottled_usec {second * 500000}\n"
        (cgroup / "cpu.stat").write_text("usage_usec 1\n" + throttled)
        sampler.sample(100.0 + second)
    report = machine_cpu.machine_report(sampler.record(), [102.0, 108.0])
    assert report["busy_cores"] == 11.0 and report["cores"]["steal"] == 3.0 and report["cores"]["idle"] == 2.0
    assert report["throttled_s"] == 3.0 and report["throttled_periods"] == 60 and report["quota_cores"] == 16.0
    assert machine_cpu.machine_report(sampler.record(), [200.0, 300.0]) == {}, "no samples inside, no figure"
    assert machine_cpu.quota("max 100000") is None and machine_cpu.throttling("usage_usec 5") is None
