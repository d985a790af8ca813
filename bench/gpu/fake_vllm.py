"""A stand-in for `vllm serve`, to check the bench's plumbing on a machine without a GPU (BENCH_FAKE=1).

    python3 bench/gpu/fake_vllm.py serve MODEL [...] --port 8001

Answers /health, /v1/models, /version, /metrics, /v1/chat/completions (max_tokens distinct filler words after
a short sleep, FAKE_VLLM_SECONDS) and /start_profile and /stop_profile (200; the stop writes a trace without
kernels where --profiler-config says), so recipes, the hand driver and a torch-profiler window run end to end. It
measures nothing. It counts the requests in progress as running and names itself like an engine core
(`VLLM::EngineCor`), so the bench's role split and its py-spy target (pyspy.py) find it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# A KV cache of 32,768 blocks of 16 tokens: 64 sequences of 8,192 tokens, so the recipe's window sizes itself from
# the replicas serving and widens as the later ones join, as it does on a real engine.
FAKE_KV_BLOCKS = 32768
STATE = {"model": "model", "done": 0, "running": 0, "tokens": 0, "lock": threading.Lock()}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self.reply(200, b"")
        elif self.path == "/v1/models":
            self.reply(200, json.dumps({"data": [{"id": STATE["model"]}]}).encode())
        elif self.path == "/version":
            self.reply(200, b'{"version": "fake"}')
        elif self.path == "/metrics":
            text = (
                f'vllm:num_requests_running{{engine="0"}} {STATE["running"]}\n'
                'vllm:num_requests_waiting{engine="0"} 0\n'
                f"vllm:request_success_total {STATE['done']}\n"
                f'vllm:generation_tokens_total{{engine="0"}} {STATE["tokens"]}\n'
                f'vllm:cache_config_info{{block_size="16",engine="0",num_gpu_blocks="{FAKE_KV_BLOCKS}"}} 1.0\n'
            )
            self.reply(200, text.encode(), "text/plain")
        else:
            self.reply(404, b"{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path in ("/start_profile", "/stop_profile"):  # a profiler window (profiling.py): no request
            if self.path == "/stop_profile" and STATE.get("profile_dir"):
                (Path(STATE["profile_dir"]) / "fake.pt.trace.json").write_text('{"traceEvents": []}')
            self.reply(200, b"")
            return
        tokens = int(body.get("max_tokens") or 16)
        with STATE["lock"]:
            STATE["running"] += 1
        time.sleep(float(os.environ.get("FAKE_VLLM_SECONDS", "0.2")))
        with STATE["lock"]:
            STATE["done"] += 1
            STATE["running"] -= 1
            STATE["tokens"] += tokens
        text = " ".join(f"w{i}" for i in range(tokens))
        answer = {
            "id": "fake",
            "object": "chat.completion",
            "model": STATE["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3921, "completion_tokens": tokens, "total_tokens": 3921 + tokens},
        }
        self.reply(200, json.dumps(answer).encode())

    def log_message(self, *args: object) -> None:
        pass


class Server(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


def name_process(name: str) -> None:
    """Sets /proc/self/comm (prctl PR_SET_NAME), where the bench reads a process's role."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode(), 0, 0, 0)


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv[0] != "serve":
        print("fake vllm: only `serve MODEL ... --port P` is supported", file=sys.stderr)
        sys.exit(2)
    STATE["model"] = argv[1]
    name_process("VLLM::EngineCor")
    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 8000
    if "--profiler-config" in argv:
        STATE["profile_dir"] = json.loads(argv[argv.index("--profiler-config") + 1])["torch_profiler_dir"]
    time.sleep(2)
    print(f"fake vllm serving {argv[1]} on {port}", flush=True)
    Server(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
