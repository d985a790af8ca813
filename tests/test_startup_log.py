"""Where a replica's start goes, read from its `vllm serve` log (issue 42): the phases of a GPU-like log written
in vLLM 0.30's words, of a log the CPU test bed wrote, and of logs that lack milestones or hold an earlier start.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import pytest

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.facts import ModelFacts
from ocr_core.serving.ports import free_ports
from ocr_core.serving.replica import Replica
from ocr_core.serving.startup_log import describe_timeline, startup_timeline
from tests.test_engine_cache import fake_vllm
from tests.testbed.handles import handle_for

FACTS = ModelFacts(
    model="org/model", image="vllm/vllm-openai:v0", serve_args=(), sampling={"max_tokens": 100}, max_model_len=4096
)


def at(clock: str) -> float:
    """Epoch seconds of a local time on 2026-12-02, as vLLM stamps its lines."""
    return time.mktime(time.strptime(f"2026-12-02 {clock}", "%Y-%m-%d %H:%M:%S"))


# The shape of the 2026-12-02 H200 start of issue 42, in the words vLLM 0.30 logs (v1/worker/gpu_model_runner.py,
# compilation/monitor.py and backends.py, v1/engine/core.py): launch at 10:00:00, healthy at 10:03:58.
GPU_LOG = """\
(APIServer pid=101) INFO 12-02 10:00:21 [utils.py:253] non-default args: {'model_tag': 'lightonai/LightOnOCR-3'}
(EngineCore pid=230) INFO 12-02 10:00:48 [core.py:93] Initializing a V1 LLM engine (v0.30.0) with config: ...
(EngineCore pid=230) INFO 12-02 10:00:55 [gpu_model_runner.py:5318] Starting to load model lightonai/LightOnOCR-3...
(EngineCore pid=230) INFO 12-02 10:01:08 [default_loader.py:291] Loading weights took 1.62 seconds
(EngineCore pid=230) INFO 12-02 10:01:10 [gpu_model_runner.py:5417] Model loading took 1.9 GiB memory and 3.1 seconds
(EngineCore pid=230) INFO 12-02 10:01:19 [backends.py:1156] Dynamo bytecode transform time: 9.41 s
(EngineCore pid=230) INFO 12-02 10:01:44 [backends.py:394] Compiling a graph for compile range (1, 16384) takes 24.0
(EngineCore pid=230) INFO 12-02 10:01:48 [monitor.py:50] torch.compile takes 37.9 s in total
(EngineCore pid=230) INFO 12-02 10:03:12 [monitor.py:82] Initial profiling/warmup run took 84.02 s
(EngineCore pid=230) INFO 12-02 10:03:14 [kv_cache_utils.py:1290] GPU KV cache size: 1,210,432 tokens
(EngineCore pid=230) INFO 12-02 10:03:20 [backends.py:394] Compiling a graph for compile range (8, 8) takes 1.20 s
(EngineCore pid=230) INFO 12-02 10:03:24 [gpu_model_runner.py:6930] Graph capturing finished in 7 secs, took 0.4 GiB
(EngineCore pid=230) INFO 12-02 10:03:25 [core.py:380] init engine (profile, create kv cache, warmup model) took 144.5 s
(APIServer pid=101) INFO 12-02 10:03:40 [api_server.py:1893] Starting vLLM API server 0 on http://127.0.0.1:8000
INFO:     Application startup complete.
"""

# Lines of a start on the CPU test bed (vLLM 0.32.0 CPU, tiny model, no --enforce-eager), 2026-12-02, verbatim but
# for long lines cut short: launch at 16:38:42, healthy at 16:45:23 on two shared cores.
CPU_LOG = """\
==== vllm serve /work/.testbed/models/tiny-llava-c284635aacbd --max-model-len 2048
Triton is installed, but doesn't include CPU backend. Disabling Triton.
(APIServer pid=21549) INFO 12-02 16:39:43 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=21549) INFO 12-02 16:40:45 [model.py:733] Resolved architecture: LlavaForConditionalGeneration
(EngineCore pid=23273) INFO 12-02 16:42:05 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model=
(Worker pid=24158) INFO 12-02 16:43:16 [cpu_model_runner.py:68] Starting to load model /work/.testbed/models/tiny-llava
(Worker pid=24158) INFO 12-02 16:43:17 [base_loader.py:82] Initializing model took 0.924162 seconds
(Worker pid=24158) INFO 12-02 16:43:17 [default_loader.py:501] Loading weights took 0.04 seconds
(Worker pid=24158) INFO 12-02 16:43:20 [cpu_model_runner.py:87] Warming up model for the compilation...
(EngineCore pid=23273) INFO 12-02 16:44:22 [shm_broadcast.py:871] No available shared memory broadcast block found in
(Worker pid=24158) INFO 12-02 16:45:04 [decorators.py:743] [backbone] saved AOT compiled function to /tmp/cache/vllm/
(Worker pid=24158) INFO 12-02 16:45:04 [monitor.py:91] [backbone] Initial profiling/warmup run took 0.06 s
(Worker pid=24158) INFO 12-02 16:45:06 [cpu_model_runner.py:91] Warming up done.
(EngineCore pid=23273) INFO 12-02 16:45:11 [core.py:402] init engine (profile, create kv cache, warmup model) took 110.2
(APIServer pid=21549) INFO 12-02 16:45:21 [entry.py:140] Starting vLLM server on http://127.0.0.1:40333
INFO:     Application startup complete.
INFO:     127.0.0.1:55030 - "GET /health HTTP/1.1" 200 OK
"""


PHASES = ("imports", "processes", "setup", "load", "compile", "warmup", "kv_cache_and_graphs", "api_up")


@pytest.mark.parametrize(
    ("log", "launched", "healthy", "seconds"),
    [
        (GPU_LOG, "10:00:00", "10:03:58", (21.0, 27.0, 7.0, 15.0, 38.0, 84.0, 13.0, 33.0)),
        (CPU_LOG, "16:38:42", "16:45:23", (None, 203.0, 71.0, 1.0, 107.0, 0.0, 7.0, 12.0)),
    ],
    ids=["gpu", "cpu-bed"],
)
def test_a_start_splits_into_its_phases_which_add_up_to_launch_to_healthy(log, launched, healthy, seconds):
    """Before the model loads: the `vllm` command's own imports (until it logs its arguments), the API server and
    engine core processes it spawns (until the engine core logs its config: their imports), and the engine's set-up
    (tokenizer, processor, distributed init). On the H200 of 2026-12-02 those were 18, 25 and 7 s of a warm start's
    49-53 s "start", which the summary did not split."""
    timeline = startup_timeline(log, at(launched), at(healthy))
    assert timeline["phases_s"] == dict(zip(PHASES, seconds))
    assert timeline["total_s"] == at(healthy) - at(launched) == sum(value for value in seconds if value is not None)


def test_a_phase_the_log_does_not_show_is_none_and_its_time_goes_to_the_next():
    eager = "\n".join(line for line in GPU_LOG.splitlines() if "backends.py" not in line and "monitor.py" not in line)
    phases = startup_timeline(eager, at("10:00:00"), at("10:03:58"))["phases_s"]
    assert phases["compile"] is None and phases["warmup"] is None
    assert phases["kv_cache_and_graphs"] == 38.0 + 84.0 + 13.0
    assert sum(value for value in phases.values() if value is not None) == 238.0


def test_a_log_with_no_vllm_line_is_all_serving_time_and_nothing_is_negative():
    timeline = startup_timeline("Traceback (most recent call last):\n  boom\n", at("10:00:00"), at("10:00:30"))
    assert timeline["phases_s"]["api_up"] == 30.0
    assert [value for value in timeline["phases_s"].values() if value is not None] == [30.0]
    late = startup_timeline(GPU_LOG, at("10:00:00"), at("10:02:00"))
    assert all(value >= 0 for value in late["phases_s"].values() if value is not None)
    assert sum(value for value in late["phases_s"].values() if value is not None) == 120.0


def test_coloured_lines_are_read_and_the_line_says_each_phase():
    coloured = GPU_LOG.replace(" INFO ", " \x1b[32mINFO\x1b[0m ")
    timeline = startup_timeline(coloured, at("10:00:00"), at("10:03:58"))
    assert timeline["phases_s"]["warmup"] == 84.0
    line = describe_timeline({"waited_s": 12.0, **timeline})
    assert "warmup 84 s" in line and "kv cache and graphs 13 s" in line and "238 s from launch" in line
    assert "12 s waiting" in line


# A start that logs two milestones in vLLM's format before it serves.
LOGS_A_START = """
for message in ("Starting to load model org/model...", "Model loading took 0.1 GiB memory and 0.2 seconds"):
    print(f"(EngineCore pid=1) INFO {time.strftime('%m-%d %H:%M:%S')} [x.py:1] {message}", flush=True)
"""


def test_a_spawned_replica_reports_its_own_start_not_an_earlier_one_in_the_same_log(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    fake_vllm(bin_dir, sys.executable, LOGS_A_START)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    port = free_ports(18700, 1)[0]
    (tmp_path / f"vllm-serve-{port}.log").write_text(GPU_LOG)  # an earlier run's start on the same port
    argv = ["IN", "./OUT", "--startup-timeout", "60"]
    settings = parse_arguments(build_parser("x-server.py", FACTS, "server"), argv)
    handle = handle_for(f"http://127.0.0.1:{port}", settings, FACTS)
    try:
        handle.spawn()
    finally:
        handle.close()
    report = Replica(0, handle).report()["startup"]
    phases = report["phases_s"]
    assert phases["setup"] is not None and phases["load"] is not None
    assert phases["compile"] is None and phases["warmup"] is None, "the earlier start's milestones were counted"
    assert report["total_s"] < 60 and report["waited_s"] >= 0
