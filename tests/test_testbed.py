"""Proves the CPU test bed: a real vLLM serves the tiny model the way the recipes expect a GPU server to.

No fake servers: every request here reaches `vllm serve` (or the in-process `vllm.LLM`) over 127.0.0.1.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from tests.testbed.env import REPO_ROOT
from tests.testbed.server import VllmServer

MAX_TOKENS = 16
PROMPT = "Transcribe the text of this page."
MIME_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}
MIN_SAMPLE_PAGES = 12


def data_url(data: bytes, mime: str) -> str:
    """Encode image bytes, unchanged, as a base64 data URL."""
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def blank_png() -> bytes:
    """A white page-shaped PNG, made in memory so the basic tests need no sample files."""
    buffer = io.BytesIO()
    Image.new("RGB", (600, 800), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def page_messages(image_url: str) -> list[dict[str, Any]]:
    """One user turn with an image part and a text part, as the OCR recipes send it."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": image_url}},
                {"type": "text", "text": PROMPT},
            ],
        }
    ]


def chat(server: VllmServer, messages: list[dict[str, Any]]) -> httpx.Response:
    """POST a greedy chat completion to the test server."""
    body = {"model": server.model, "messages": messages, "temperature": 0, "max_tokens": MAX_TOKENS}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120.0)


def answer_text(response: httpx.Response) -> str:
    """The assistant text of a successful chat completion."""
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def test_chat_with_image_returns_text(vllm_server: VllmServer) -> None:
    """A base64 PNG image part is accepted and the random model answers with some visible text."""
    text = answer_text(chat(vllm_server, page_messages(data_url(blank_png(), "image/png"))))
    assert text.strip()


def test_corrupt_image_is_rejected_and_server_survives(vllm_server: VllmServer) -> None:
    """A corrupt image is a 400 for that request only: the engine stays healthy and keeps serving."""
    response = chat(vllm_server, page_messages("data:image/png;base64,AAAA"))
    assert response.status_code == 400, response.text
    assert httpx.get(f"{vllm_server.url}/health", timeout=10.0).status_code == 200
    assert answer_text(chat(vllm_server, page_messages(data_url(blank_png(), "image/png")))).strip()


def test_metrics_expose_queue_gauges(vllm_server: VllmServer) -> None:
    """The scheduler gauges the recipes' windowed driver reads are exported as on a GPU server."""
    response = httpx.get(f"{vllm_server.url}/metrics", timeout=10.0)
    assert response.status_code == 200
    names = {line.split("{")[0] for line in response.text.splitlines() if not line.startswith("#")}
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting"} <= names


def test_offline_and_server_agree_on_sample_pages(vllm_server: VllmServer, offline_llm: Any) -> None:
    """Greedy decoding gives byte-identical text offline and via the server, so outputs of the two paths can be
    compared exactly on this machine. Each page goes alone on both paths: the tiny random model's greedy tokens are
    near ties, and a page batched with eleven others ended on another token than alone (page-06, a run of
    2026-12-02 with two test workers), which says nothing of the two paths."""
    from vllm import SamplingParams

    pages = sorted((REPO_ROOT / "samples" / "pages").glob("*"))
    assert len(pages) >= MIN_SAMPLE_PAGES, f"expected {MIN_SAMPLE_PAGES}+ sample pages, found {len(pages)}"
    conversations = [page_messages(data_url(p.read_bytes(), MIME_TYPES[p.suffix.lower()])) for p in pages]

    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    offline = [offline_llm.chat([messages], params, use_tqdm=False)[0].outputs[0].text for messages in conversations]
    served = [answer_text(chat(vllm_server, messages)) for messages in conversations]

    assert dict(zip(_names(pages), served)) == dict(zip(_names(pages), offline))
    assert len(set(served)) > 1, "every page got the same answer: the image does not reach the model"


def _names(pages: list[Path]) -> list[str]:
    """File names, so a mismatch report says which page differs."""
    return [page.name for page in pages]
