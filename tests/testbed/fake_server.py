"""A stand-in for `vllm serve` for tests where the engine's behaviour is not the point (resume, publishing).

It answers /health, /v1/models, /version, /metrics and /v1/chat/completions in a thread of the test process. Each
answer is a pure function of the request (page bytes, prompt, temperature, max_tokens), so two runs with the same
settings write the same text and a run with other settings writes other text: tests can see settings mix. A fixed
`text` instead answers every page alike, as a model on the wrong vLLM build does ("!!!!!!!!"). `poison` makes the
first page it is sent fail with a 500 every time it comes again (a poison page), until it is turned off.
`page_tokens` is how long every page's answer is: a request whose max_tokens is lower is cut off ("length"), as a
real model's answer is by too low a --max-tokens.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class FakeState:
    model: str
    delay_s: float = 0.0
    finish_reason: str = "stop"
    text: str | None = None
    poison: bool = False
    poisoned: str | None = None
    page_tokens: int | None = None
    answered: int = 0
    before_answer: Callable[[int], None] | None = None
    """Called with the count of pages answered so far before each answer: a test holds the pages there until it
    has seen what it waits for."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def answer_text(body: dict) -> str:
    """Words derived from everything in the request that decides a real model's text."""
    content = json.dumps(body.get("messages"), sort_keys=True)
    settings = f"{body.get('temperature')}|{body.get('max_tokens')}"
    digest = hashlib.sha256(f"{content}|{settings}".encode()).hexdigest()
    return " ".join(digest[i : i + 6] for i in range(0, 48, 6))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: FakeState

    def reply(self, code: int, payload: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        routes = {
            "/health": b"",
            "/v1/models": json.dumps({"data": [{"id": self.state.model, "max_model_len": 4096}]}).encode(),
            "/version": b'{"version": "fake"}',
            "/metrics": f"vllm:request_success_total {self.state.answered}\n".encode(),
        }
        if self.path in routes:
            self.reply(200, routes[self.path])
        else:
            self.reply(404, b"{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.poisoned(body):
            self.reply(500, b'{"error": {"message": "EngineCore encountered an issue"}}')
            return
        time.sleep(self.state.delay_s)
        if self.state.before_answer is not None:
            self.state.before_answer(self.state.answered)
        with self.state.lock:
            self.state.answered += 1
        answer = {
            "object": "chat.completion",
            "model": self.state.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.state.text or answer_text(body)},
                    "finish_reason": self.finish_reason(body),
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 8, "total_tokens": 108},
        }
        self.reply(200, json.dumps(answer).encode())

    def finish_reason(self, body: dict) -> str:
        needed = self.state.page_tokens
        if needed is not None and (body.get("max_tokens") or needed) < needed:
            return "length"
        return self.state.finish_reason

    def poisoned(self, body: dict) -> bool:
        if not self.state.poison:
            return False
        page = json.dumps(body.get("messages"), sort_keys=True)
        with self.state.lock:
            self.state.poisoned = self.state.poisoned or page
        return page == self.state.poisoned

    def log_message(self, *args: object) -> None:
        pass

    def handle(self) -> None:
        """A client that hangs up (a stopped run) is not the fake server's problem."""
        with suppress(BrokenPipeError, ConnectionResetError):
            super().handle()


@dataclass
class FakeServer:
    url: str
    state: FakeState


@contextmanager
def fake_server(
    model: str = "fake/model", delay_s: float = 0.0, finish_reason: str = "stop", text: str | None = None
) -> Iterator[FakeServer]:
    """A fake vLLM server on a free loopback port for the duration of the block."""
    state = FakeState(model, delay_s, finish_reason, text)
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeServer(f"http://127.0.0.1:{server.server_address[1]}", state)
    finally:
        server.shutdown()
        server.server_close()
