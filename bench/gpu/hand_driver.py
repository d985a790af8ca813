"""The hand-driven reference: every page of a local dataset to a running vLLM server, N requests in flight.

    python3 bench/gpu/hand_driver.py DATASET --server http://127.0.0.1:8000 --model MODEL [--concurrency 256]
    python3 bench/gpu/hand_driver.py DATASET --model MODEL --serve-log LOG --serve vllm serve MODEL FLAGS ...

With --serve it starts that server first, on --server's port in a session of its own, waits until it answers, and
ends it after the last page: the arm's time then counts the server's start, as a recipe's does.

One httpx.AsyncClient with explicit connection limits; each page goes as a base64 JPEG data URL in one chat
completion with `ignore_eos`, a fixed `max_tokens` and temperature 0, so every page costs the same. Prints one
JSON line: {pages_per_s, output_tokens_per_s, pages, seconds, ...}. It reads the dataset with pyarrow (the files
`save_to_disk` writes), so it needs only httpx and pyarrow; `datasets` is used when pyarrow finds no files.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
from fleet import Launch, replicas

from ocr_core.internals import Tally

# The Nanonets-OCR2 prompt (the text after the image), as the nanonets recipes send it.
NANONETS_PROMPT = (
    "Extract the text from the above document as if you were reading it naturally. Return the tables in html "
    "format. Return the equations in LaTeX representation. If there is an image in the document and image caption "
    "is not present, add a small description of the image inside the <img></img> tag; otherwise, add the image "
    "caption inside <img></img>. Watermarks should be wrapped in brackets. Ex: <watermark>OFFICIAL COPY</watermark>. "
    "Page numbers should be wrapped in brackets. Ex: <page_number>14</page_number> or "
    "<page_number>9/22</page_number>. Prefer using ☐ and ☑ for check boxes."
)


def read_pages(folder: Path, column: str) -> list[bytes]:
    files = sorted(folder.glob("*.arrow")) or sorted(folder.glob("**/*.arrow"))
    if files:
        import pyarrow as pa

        pages: list[bytes] = []
        for path in files:
            with pa.memory_map(str(path)) as source:
                try:
                    table = pa.ipc.open_stream(source).read_all()
                except pa.ArrowInvalid:
                    table = pa.ipc.open_file(source).read_all()
            pages.extend(cell["bytes"] for cell in table.column(column).to_pylist())
        return pages
    import datasets

    dataset = datasets.load_from_disk(str(folder)).cast_column(column, datasets.Image(decode=False))
    return [row[column]["bytes"] for row in dataset]


async def one(
    client: httpx.AsyncClient, url: str, body: dict, gate: asyncio.Semaphore, stats: dict
) -> tuple[float, int, int, float, float]:
    """One page: its latency, output and prompt tokens, and when it was sent and finished (for the sustained rate)."""
    async with gate:
        stats["in_flight"] += 1
        stats["peak"] = max(stats["peak"], stats["in_flight"])
        started = time.monotonic()
        try:
            response = await client.post(url, json=body)
            response.raise_for_status()
            usage = response.json().get("usage") or {}
        finally:
            stats["in_flight"] -= 1
        finished = time.monotonic()
        return (
            finished - started,
            int(usage.get("completion_tokens") or 0),
            int(usage.get("prompt_tokens") or 0),
            started,
            finished,
        )


async def run(args: argparse.Namespace) -> dict:
    pages = read_pages(Path(args.dataset), args.image_column)
    if args.pages:
        pages = pages[: args.pages]
    bodies = []
    for data in pages:
        content = [
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(data).decode()}}
        ]
        if args.prompt:
            content.append({"type": "text", "text": args.prompt})
        bodies.append(
            {
                "model": args.model,
                "messages": [{"role": "user", "content": content}],
                "max_tokens": args.max_tokens,
                "temperature": args.temperature,
                "ignore_eos": True,
            }
        )
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    timeout = httpx.Timeout(args.request_timeout, connect=60.0)
    gate = asyncio.Semaphore(args.concurrency)
    stats = {"in_flight": 0, "peak": 0}
    url = args.server.rstrip("/") + "/v1/chat/completions"
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        started = time.monotonic()
        results = await asyncio.gather(
            *(one(client, url, body, gate, stats) for body in bodies), return_exceptions=True
        )
        seconds = time.monotonic() - started
    failures = [r for r in results if isinstance(r, BaseException)]
    good = [r for r in results if not isinstance(r, BaseException)]
    output_tokens = sum(r[1] for r in good)
    latencies = sorted(r[0] for r in good)
    sends = [r[3] for r in good]
    # The server was healthy before the first send, so the whole "fleet" serves from it (the core's definition).
    tally = Tally(whole_at=min(sends, default=None), last_sent=max(sends, default=None), pages=[r[3:] for r in good])
    return {
        "arm": "hand",
        "pages": len(good),
        "failed": len(failures),
        "first_error": repr(failures[0])[:300] if failures else None,
        "seconds": round(seconds, 2),
        "pages_per_s": round(len(good) / seconds, 3) if seconds else 0.0,
        **tally.sustained(),
        "output_tokens_per_s": round(output_tokens / seconds, 1) if seconds else 0.0,
        "output_tokens": output_tokens,
        "prompt_tokens_mean": round(statistics.fmean(r[2] for r in good), 1) if good else None,
        "latency_s_median": round(statistics.median(latencies), 2) if latencies else None,
        "latency_s_max": round(latencies[-1], 2) if latencies else None,
        "concurrency": args.concurrency,
        "peak_in_flight": stats["peak"],
    }


def serve_and_run(args: argparse.Namespace) -> dict:
    """Starts --serve on --server's port, feeds it once it answers, and ends it whatever happens."""
    port = int(args.server.rsplit(":", 1)[1].split("/")[0])
    args.serve_log.parent.mkdir(parents=True, exist_ok=True)
    with replicas([Launch(tuple(args.serve), {})], True, args.serve_log.parent, os.environ, 600, port) as fleet:
        fleet.logs[0].rename(args.serve_log)
        print(f"hand: server healthy after {fleet.ready_s[fleet.urls[0]]} s", file=sys.stderr, flush=True)
        return asyncio.run(run(args))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", help="dataset folder written by make_pages.py (save_to_disk)")
    parser.add_argument("--server", default="http://127.0.0.1:8000")
    parser.add_argument("--model", required=True, help="model name the server serves (its path, as given to serve)")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=800)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--prompt", default=NANONETS_PROMPT, help="text after the image ('' for the image alone)")
    parser.add_argument("--image-column", default="image")
    parser.add_argument("--pages", type=int, help="send only the first N pages")
    parser.add_argument("--request-timeout", type=float, default=1800.0)
    parser.add_argument("--serve-log", type=Path, default=Path("hand-serve.log"), help="where --serve's log goes")
    parser.add_argument("--serve", nargs=argparse.REMAINDER, help="a server command to start first (the rest)")
    args = parser.parse_args()
    summary = serve_and_run(args) if args.serve else asyncio.run(run(args))
    print(json.dumps(summary), flush=True)
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
