"""bench/front_end_cpu.py's server layouts: how the pixel tensors reach the engine core (`+shm`: torch_shm), how
the engine core starts (`+fork`), the warm-up's dummy image (`+page`) and vLLM's Rust front end (`+rust`), read from
the command line into the `vllm serve` command and environment the bench starts, with vLLM's own refusal (torch_shm
only with a spawned engine core) said before any server starts; and the start's phases the bench reads from the
server's log."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.testbed.env import REPO_ROOT


@pytest.fixture(scope="module")
def front_end():
    """bench/front_end_cpu.py imports its siblings by plain name and `bench.gpu` as a package; a test worker that
    imported bench/gpu/bench.py as `bench` first holds that name, so it is set aside while this module loads."""
    shadow = sys.modules.get("bench")
    if shadow is not None and not hasattr(shadow, "__path__"):
        del sys.modules["bench"]
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    try:
        yield importlib.import_module("front_end_cpu")
    finally:
        sys.path.remove(str(REPO_ROOT / "bench"))
        if shadow is not None and not hasattr(shadow, "__path__"):
            sys.modules["bench"] = shadow


def test_a_layout_names_its_hand_off_and_its_start(front_end):
    assert front_end.layout_of("2x1") == front_end.Layout(2, 1)
    assert front_end.layout_of("2x1+shm").name == "api2-renderer1-shm"
    assert front_end.layout_of("1x2+fork").name == "api1-renderer2-fork"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("2x1+shm+fork", "refuses torch_shm unless the engine core is spawned"),
        ("2x1+gpu", "+shm, +fork, +page and +rust only"),
    ],
)
def test_a_layout_vllm_would_refuse_or_the_bench_cannot_read_stops_the_bench(front_end, spec, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        front_end.layout_of(spec)


def test_the_serve_command_sends_tensors_and_starts_the_engine_core_as_the_layout_says(front_end):
    pages = Path("/pages")
    shm, shm_env = front_end.serve_command(Path("/m"), 9, pages, front_end.layout_of("2x1+shm"))
    fork, fork_env = front_end.serve_command(Path("/m"), 9, pages, front_end.layout_of("2x2+fork"))
    assert shm[-2:] == ["--mm-tensor-ipc", "torch_shm"] and shm_env == {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    assert "--mm-tensor-ipc" not in fork and fork_env == {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}
    assert fork[fork.index("--api-server-count") + 1] == "2" and fork[fork.index("--renderer-num-workers") + 1] == "2"


def test_a_page_layout_warms_up_on_a_dummy_image_of_the_largest_page(front_end):
    """vLLM's dummy options size the image each API server's warm-up processes: without them it is the
    processor's largest (16,777,216 px for Qwen3.5), four times a 2048 px page."""
    plain, _ = front_end.serve_command(Path("/m"), 9, Path("/pages"), front_end.layout_of("1x1"))
    page, _ = front_end.serve_command(Path("/m"), 9, Path("/pages"), front_end.layout_of("1x1+page"))
    assert json.loads(plain[plain.index("--limit-mm-per-prompt") + 1]) == {"image": 1}
    limit = json.loads(page[page.index("--limit-mm-per-prompt") + 1])
    assert limit == {"image": {"count": 1, "width": 2048, "height": 2048}}
    assert page.count("--limit-mm-per-prompt") == 1
    assert front_end.layout_of("2x1+fork+page").name == "api2-renderer1-fork-page"


def test_the_start_phases_are_read_from_the_servers_log(front_end):
    log = (
        "(ApiServer_0 pid=7591) INFO 12-06 15:28:19 [base.py:236] Multi-modal warmup completed in 9.719s\n"
        "(EngineCore pid=7590) INFO 12-06 15:28:08 [core.py:340] init engine (profile, create kv cache, warmup "
        "model) took 13.51 s (compilation: 3.18 s)\n"
        "(ApiServer_1 pid=7592) INFO 12-06 15:28:20 [base.py:236] Multi-modal warmup completed in 10.411s\n"
    )
    assert front_end.start_phases(log) == {"mm_warmup_s": [9.719, 10.411], "engine_init_s": 13.51}
    assert front_end.start_phases("") == {"mm_warmup_s": [], "engine_init_s": None}


def test_a_rust_layout_serves_through_vllm_rs_with_the_engines_flags_after_the_separator(front_end):
    """vLLM's Rust front end is one process that launches the Python engine headless; the engine's flags go after
    `--`. The CPU build ships no `vllm-rs`, so a Rust layout without the binary stops before any server starts."""
    layout = front_end.layout_of("1x1+rust")
    assert layout.name == "api1-renderer1-rust"
    command, env = front_end.serve_command(Path("/m"), 9, Path("/pages"), layout, Path("/bin/vllm-rs"))
    assert command[:3] == ["/bin/vllm-rs", "serve", "/m"] and env == {}
    engine = command[command.index("--") + 1 :]
    assert engine[: len(front_end.SERVE_FLAGS)] == front_end.SERVE_FLAGS and "--limit-mm-per-prompt" in engine
    assert "--api-server-count" not in command
    with pytest.raises(SystemExit, match=re.escape("needs --rust-frontend PATH")):
        front_end.serve_command(Path("/m"), 9, Path("/pages"), layout)


@pytest.mark.parametrize("spec", ["2x1+rust", "1x2+rust", "1x1+rust+page"])
def test_a_rust_layout_takes_no_api_servers_threads_or_options_of_vllm_serve(front_end, spec):
    with pytest.raises(SystemExit, match=re.escape("1x1+rust")):
        front_end.layout_of(spec)


def test_a_servers_cpu_counts_the_processes_it_started_in_sessions_of_their_own(front_end, tmp_path):
    """`vllm-rs serve` starts vLLM's Python engine in a process group of its own: the first Rust run counted no
    engine core at all. A server's processes are its group and every descendant of its leader."""
    proc_cpu = importlib.import_module("proc_cpu")
    ready = tmp_path / "child.pid"
    leader_code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        f"open({str(ready)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", leader_code], start_new_session=True)
    try:
        for _ in range(200):
            if ready.exists() and ready.read_text():
                break
            time.sleep(0.05)
        child = int(ready.read_text())
        found = proc_cpu.cpu_by_role(leader.pid, 1)
        assert leader.pid in found and found[leader.pid][0] == "api_server"
        assert child in found, "the child in a session of its own is the server's too"
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        if ready.exists() and ready.read_text():
            os.kill(int(ready.read_text()), signal.SIGKILL)
        leader.wait()
