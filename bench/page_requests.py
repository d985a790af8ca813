"""The pages and the requests that carry them, for the benches that serve a tiny model on this machine's CPU: the
synthetic pages as files, the body the recipes' client builds for a page (base64 in the JSON, or a `file://` URL),
and sending them with a few in flight. Each answer's prompt tokens are kept: two front ends that resize a page
alike give the engine as many image tokens. (The tiny random model answers every page alike, in text and in its
first token's log-probability, so the answers cannot show whether the pixels were the same.)
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from bench.gpu.make_pages import HEIGHT, WIDTH, render
from ocr_core.internals import placeholder_part, prepare_image


@dataclass(frozen=True)
class Arm:
    """How a page travels (base64 or file) and how many tokens its answer has."""

    transport: str
    max_tokens: int

    @property
    def name(self) -> str:
        return f"{self.transport}-{self.max_tokens}"


def write_pages(folder: Path, count: int, scale: float) -> list[Path]:
    """The synthetic pages as JPEG files, shrunk by `scale` (the bench's test runs tiny pages)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = folder / f"page-{index:04d}.jpg"
        data = render(index, 90)
        if scale != 1.0:
            with Image.open(io.BytesIO(data)) as page:
                page.resize((round(WIDTH * scale), round(HEIGHT * scale))).save(path, format="JPEG", quality=90)
        else:
            path.write_bytes(data)
        paths.append(path)
    return paths


def request_body(model: str, page: Path, arm: Arm) -> bytes:
    """The body the recipe's client builds: a base64 data URL spliced into the JSON, or a file:// URL."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": [placeholder_part()]}],
        "max_tokens": arm.max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    if arm.transport == "file":
        body["messages"][0]["content"] = [{"type": "image_url", "image_url": {"url": page.resolve().as_uri()}}]
        return json.dumps(body).encode()
    return prepare_image(page.read_bytes()).json_with_image(body)


async def send_all(url: str, bodies: list[bytes], window: int) -> list[int | None]:
    """Posts every body with `window` in flight; per body, its answer's prompt tokens, or None where it did not
    answer 200."""
    import httpx

    queue = list(reversed(list(enumerate(bodies))))
    answers: list[int | None] = [None] * len(bodies)

    async def worker(client: httpx.AsyncClient) -> None:
        while queue:
            index, body = queue.pop()
            response = await client.post(
                f"{url}/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
            )
            if response.status_code != 200:
                print(f"  {response.status_code}: {response.text[:300]}", file=sys.stderr)
                continue
            answers[index] = response.json()["usage"]["prompt_tokens"]

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(window)))
    return answers
