"""bench/front_end_cpu.py's server layouts: how the pixel tensors reach the engine core (`+shm`: torch_shm), how
the engine core starts (`+fork`) and the warm-up's dummy image (`+page`), read from the command line into the `vllm
serve` command and environment the bench starts, with vLLM's own refusal (torch_shm only with a spawned engine core)
said before any server starts; and the start's phases the bench reads from the server's log."""

from __future__ import annotations

import importlib
import json
import re
import sys
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
        ("2x1+gpu", "+shm, +fork and +page only"),
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
