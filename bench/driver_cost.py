"""What the driver costs per page, and how fast it can go when the server costs nothing.

1. CPU milliseconds to turn one dataset row (a 1-3 MP JPEG) into a request body: our pass-through, against the
   decode + RGB + PNG re-encode that the anchor recipes do.
2. Driver pages/s against an endpoint that answers at once (a canned reply from another process), so the only
   cost measured is ours: reading rows, building bodies, HTTP, bookkeeping, progress parts.

Run: .testbed/venv/bin/python bench/driver_cost.py
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import multiprocessing
import statistics
import tempfile
import time

import datasets
from common import ROOT, save
from PIL import Image

from ocr_core import run_server
from ocr_core.internals import chat_body, placeholder_part, prepare_image
from tools.recipes import load_script

PAGES = sorted((ROOT / "samples" / "pages").glob("*.jpg"))
REPEATS = 40
# A shipped server-shape script, run through the public entry the way its own __main__ runs it: the pump is the
# same whatever the model, and the server shape keeps the window fixed at --max-inflight.
SCRIPT = "nanonets-ocr2-server.py"
CANNED = json.dumps(
    {
        "choices": [{"message": {"content": "# Page\n\nText."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 8},
    }
).encode()


def pass_through_body(data: bytes) -> bytes:
    """Our path: header check, then the bytes spliced into the JSON body as base64."""
    image = prepare_image(data, max_side=2048)
    return image.json_with_image(chat_body("m", [placeholder_part()], {"max_tokens": 64}, {}))


def reencode_body(data: bytes) -> bytes:
    """The anchors' path: decode, convert, PNG re-encode, base64."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    url = f"data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}"
    part = {"type": "image_url", "image_url": {"url": url}}
    return json.dumps(chat_body("m", [part], {"max_tokens": 64}, {})).encode()


def cpu_ms(build, pages: list[bytes], repeats: int) -> float:
    """Median CPU time per page over repeated passes (process time, so other load on the machine counts less)."""
    samples = []
    for _ in range(repeats):
        for data in pages:
            started = time.process_time()
            build(data)
            samples.append((time.process_time() - started) * 1000)
    return statistics.median(samples)


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A minimal HTTP/1.1 keep-alive responder: every request gets the canned reply at once."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            await reader.readexactly(length)
            path = head.split(b" ")[1]
            body = (
                CANNED if path.startswith(b"/v1/chat") else
                b'{"data": [{"id": "m"}]}' if path.startswith(b"/v1/models") else
                b'{"version": "instant"}' if path.startswith(b"/version") else
                b"vllm:num_requests_waiting 0.0\n" if path.startswith(b"/metrics") else b"{}"
            )  # fmt: skip
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))  # fmt: skip
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def serve_instantly(port: int) -> None:
    async def run() -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(run())


def driver_pages_per_s(pages: int, window: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        samples = datasets.load_dataset(str(ROOT / "samples" / "dataset"), split="train")
        copies = -(-pages // len(samples))
        datasets.concatenate_datasets([samples] * copies).select(range(pages)).save_to_disk(f"{folder}/in")
        with socketless_port() as port:
            server = multiprocessing.Process(target=serve_instantly, args=(port,), daemon=True)
            server.start()
            time.sleep(1.0)
            argv = [f"{folder}/in", f"{folder}/out", "--server", f"http://127.0.0.1:{port}", "--model", "m",
                    "--max-inflight", str(window), "--no-canary"]  # fmt: skip
            script = load_script(SCRIPT)
            captured = io.StringIO()
            with contextlib.redirect_stdout(captured):
                code = run_server(script.FACTS, ROOT / SCRIPT, argv=argv)
            server.terminate()
        summary = json.loads(captured.getvalue().strip().splitlines()[-1])
        assert code == 0, summary
        return {"pages": pages, "window": window, "pages_per_s": summary["pages_per_s"]}


@contextlib.contextmanager
def socketless_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port


def run(repeats: int, driver_pages: int, window: int) -> dict:
    pages = [page.read_bytes() for page in PAGES]
    sizes = [Image.open(page).size for page in PAGES]
    passed = cpu_ms(pass_through_body, pages, repeats)
    reencoded = cpu_ms(reencode_body, pages, max(1, repeats // 10))
    driver = driver_pages_per_s(pages=driver_pages, window=window)
    result = {
        "pages": [f"{w}x{h}" for w, h in sizes],
        "pass_through_ms_per_page": round(passed, 3),
        "reencode_png_ms_per_page": round(reencoded, 2),
        "reencode_over_pass_through": round(reencoded / passed, 1),
        "driver_against_instant_endpoint": driver,
        "targets": {"pass_through_ms": 2.0, "cheaper_by": 20},
    }
    print(json.dumps(result, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="passes over the sample pages per CPU figure")
    parser.add_argument("--pages", type=int, default=1200, help="pages the driver sends to the instant endpoint")
    parser.add_argument("--window", type=int, default=64, help="pages in flight (--max-inflight)")
    args = parser.parse_args()
    save("driver-cost", run(args.repeats, args.pages, args.window))


if __name__ == "__main__":
    main()
