"""Issue 41: each pinned server recipe, started on its own pinned vLLM with the front end the machine plan gives it on
HF's h200 flavor, serves a burst of pages, and the server's log shows each front-end flag at work.

The plan's front end (tests/pinned/flagcheck.py: 23 cores, one H200) for these 0.8B models is 3 API servers and
32768-token steps, with 2 renderer threads each on 0.22.1 (0.30.0 runs the image processor on a thread of its own,
and the plan gives it none); the pixels stay on vLLM's engine socket. It goes in through --extra-serve-args, as a
user's flags would; the plan itself gives a CPU server none of it. What the log (at DEBUG) shows for each flag, seen
on both pins (2026-12-02):
- --api-server-count: "Started 3 API server processes", and requests answered by more than one of them. Before the
  driver waited for every API server's start (spawn.API_SERVER_UP), 0.22.1's other two came up 7 s after the first
  on this 2-core machine, and all 10 pages went to the first.
- the pixels on the socket: no "Using tensor IPC queue" (what `--mm-tensor-ipc torch_shm` logs), which the plan no
  longer passes.
- --max-num-batched-tokens: the scheduler config the engine core is given says "max_num_batched_tokens=32768".
- --renderer-num-workers: no line names the renderer's thread pool, so what is checked is that the release took the
  value (its non-default args) beside the processor cache the recipes turn off, and served every page with it.

`--skip-mm-profiling` (beside the tier's flags) skips the engine's encoder profile, which sizes GPU memory: with
32768-token steps 0.22.1 profiles two images of OvisOCR2's largest size, 95 s on this CPU.
"""

from __future__ import annotations

import re

import pytest

from ocr_core.planning.serve_flags import flag_value
from ocr_core.serving.spawn import serve_command
from tests.pinned.flagcheck import h200_plan
from tests.pinned.runs import (
    COMMON,
    MAX_MODEL_LEN,
    TEST_SERVE_ARGS,
    TWINS,
    extra_serve_args,
    load,
    results,
    run,
    small_pages,
    spawned_argv,
)
from tests.testbed.server import free_port

pytestmark = pytest.mark.pinned

# Enough pages at once that each of the API servers gets connections; small, as the CPU engine is slow.
PAGES = 10
PAGE_SIDE = (280, 200)
CPU_ONLY_ARGS = ["--skip-mm-profiling"]
# 0.30.0 (LightOn's pin) runs the image processor on a thread of its own, so the plan gives it no renderer threads.
FRONT_END_FLAGS = {
    "lighton_ocr3": ["--api-server-count", "--max-num-batched-tokens"],
    "ovis_ocr2": ["--api-server-count", "--renderer-num-workers", "--max-num-batched-tokens"],
}
# uvicorn's access line, written once per request by the API server that answered it (bench/gpu/procs.py reads the
# same lines). vLLM puts a process's "(ApiServer_N pid=P) " before a line only when that process's previous write
# ended one, and several processes append to one file: a busy machine once left one of ten lines without its prefix.
# So requests are counted by the access text alone, and the answering processes from the lines that name theirs.
ACCESS = '"POST /v1/chat/completions HTTP/1.1" 200'
REQUEST_LINE = re.compile(r"\((?:APIServer|ApiServer_\d+) pid=(\d+)\).*\"POST /v1/chat/completions")


@pytest.mark.heavy
@pytest.mark.parametrize("twins", TWINS, ids=[twins.module for twins in TWINS])
def test_the_planned_front_end_serves_on_the_pinned_vllm(twins, pinned_model, tmp_path, short_tmp):
    front_end = h200_plan(twins.facts, twins.facts.vllm_pin).front_end.serve_args()
    assert [flag for flag in front_end if flag.startswith("--")] == FRONT_END_FLAGS[twins.module]
    pages = small_pages(tmp_path, [PAGE_SIDE] * PAGES)
    port = free_port()

    served = run(
        twins, twins.server, str(pages), str(tmp_path / "out"), "--model", str(pinned_model), *COMMON,
        extra_serve_args(*CPU_ONLY_ARGS, *front_end), "--server", f"http://127.0.0.1:{port}",
        "--max-inflight", str(PAGES), tmp=short_tmp, env={"VLLM_LOGGING_LEVEL": "DEBUG"},
    )  # fmt: skip
    assert served.returncode == 0, served.stderr[-4000:]
    flags = [*twins.facts.serve_args, "--max-model-len", str(MAX_MODEL_LEN), *TEST_SERVE_ARGS, *CPU_ONLY_ARGS]
    assert spawned_argv(served.stderr) == serve_command(str(pinned_model), [*flags, *front_end], port)

    rows = load(tmp_path / "out")
    assert rows["page_id"] == [f"p{index}" for index in range(PAGES)]
    assert rows["ocr_error"] == [None] * PAGES
    assert all(rows["markdown"])
    assert len(results(tmp_path / "out")) == PAGES

    log = (short_tmp / f"vllm-serve-{port}.log").read_text(errors="replace")
    api_servers = int(flag_value(front_end, "--api-server-count"))
    assert f"Started {api_servers} API server processes" in log
    assert "API servers logged their start" not in served.stderr  # the driver waited for all of them
    assert log.count(ACCESS) == PAGES, [line for line in log.splitlines() if "POST /v1/" in line]
    answered_by = REQUEST_LINE.findall(log)
    assert len(set(answered_by)) > 1, f"every page went to one of {api_servers} API servers"

    assert "Using tensor IPC queue" not in log

    batched = flag_value(front_end, "--max-num-batched-tokens")
    assert f"Chunked prefill is enabled with max_num_batched_tokens={batched}." in log
    workers = flag_value(front_end, "--renderer-num-workers")
    if workers is None:
        assert not re.search(r"non-default args: .*'renderer_num_workers'", log)
    else:
        assert re.search(rf"non-default args: .*'renderer_num_workers': {workers}\b", log)
