"""HPD-Parsing: Baidu PaddlePaddle's hierarchical parallel document parser (InternVL3.5-1B based).

It needs the vendor's vLLM fork (dynamic request forking plus P-MTP speculative decoding), which ships in the
vendor's image; that image has no `uv`, so the job installs it first. A layout branch forks one child branch per
block and the children reuse the parent's KV cache, which is why this is the one OCR recipe that keeps prefix
caching ON: never turn it off. The answer is a list of `<BLOCK>type [x1, y1, x2, y2]<CHILD>text` blocks (boxes
in 0-1000 page coordinates), stored as a structured blocks column beside the joined text. The card names no page
size (the image resizes pages itself, MAX_PATCHES_WITH_RESIZE), so PDF pages render at 200 dpi.
"""

import json
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from ocr_core import ModelFacts, Parsed

BLOCK = re.compile(
    r"<BLOCK>\s*(?P<type>[^\[<]*?)\s*\[(?P<bbox>[^\]]*)\]\s*(?:<CHILD>(?P<text>.*?))?(?=<BLOCK>|\Z)", re.S
)
BLOCK_TYPE = pa.struct([("type", pa.string()), ("bbox", pa.list_(pa.int32())), ("text", pa.string())])
EXTRA_COLUMNS = {"hpd_blocks": pa.list_(BLOCK_TYPE)}
PREFIX_CACHE_COUNTERS = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
)


def prepare_serve(serve_args: list[str], model: str) -> list[str]:
    """Points the speculative P-MTP head at a local folder, fetching only that folder from the model repo."""
    local = Path(model) / "P-MTP"
    if not local.is_dir():
        from huggingface_hub import snapshot_download

        local = Path(snapshot_download(model, allow_patterns=["P-MTP/*"])) / "P-MTP"
    index = serve_args.index("--speculative-config") + 1
    config = json.loads(serve_args[index])
    config["model"] = str(local)
    return [*serve_args[:index], json.dumps(config), *serve_args[index + 1 :]]


def parse_blocks(text: str) -> list[dict]:
    """Box numbers are read exactly (Decimal, not float), so an absurd one stays a number for the judge to refuse."""
    blocks = []
    for match in BLOCK.finditer(text):
        numbers = [int(Decimal(value)) for value in re.findall(r"-?\d+(?:\.\d+)?", match["bbox"])]
        body = match["text"].strip() if match["text"] is not None else None
        blocks.append({"type": match["type"].strip(), "bbox": numbers, "text": body})
    return blocks


def parse(text: str, options: Mapping[str, Any]) -> Parsed:
    """Joins the blocks' text in reading order; a reply without blocks is kept as it came."""
    blocks = parse_blocks(text)
    if not blocks:
        return Parsed(text.strip(), {"hpd_blocks": []})
    joined = "\n\n".join(block["text"] for block in blocks if block["text"])
    return Parsed(joined, {"hpd_blocks": blocks})


def summary_metrics(before: Mapping[str, float], after: Mapping[str, float]) -> dict:
    """The prefix-cache hit rate over this run: how much KV the forked branches reused."""
    for hits, queries in PREFIX_CACHE_COUNTERS:
        if queries in after:
            asked = after[queries] - before.get(queries, 0.0)
            reused = after.get(hits, 0.0) - before.get(hits, 0.0)
            return {"prefix_cache_hit_rate": round(reused / asked, 4) if asked else None}
    return {"prefix_cache_hit_rate": None}


FACTS = ModelFacts(
    model="PaddlePaddle/HPD-Parsing",
    prompt="document parsing with fork.",
    sampling={"temperature": 0.0, "max_tokens": 8000},
    pdf_render={"dpi": 200},
    max_model_len=16384,
    image="ccr-2vdh3abv-pub.cnc.bj.baidubce.com/paddlepaddle/hpd-parsing-vllm:latest-nvidia-gpu",
    flavor="l4x1",
    params_b=1.1,
    job_command=(  # the vendor's image has no uv: the job installs it first (`--` ends hf's own options)
        "hf jobs run --flavor {flavor} --timeout {timeout} -s HF_TOKEN {image} "
        "-- bash -lc 'pip install -q uv && uv run {url} {args}'"
    ),
    serve_env={"MAX_PATCHES_WITH_RESIZE": "true"},
    serve_args=[
        "--trust-remote-code",
        "--served-model-name",
        "HPD-Parsing",
        "--limit-mm-per-prompt",
        '{"image": 1}',
        "--gpu-memory-utilization",
        "0.9",
        "--attention-backend",
        "FLASHINFER",
        "--attention-config",
        '{"use_prefill_query_quantization":true}',
        "--enable-chunked-prefill",
        "--enable-prefix-caching",  # forked branches reuse the parent's KV cache: never turn it off
        "--speculative-config",
        '{"method":"medusa","model":"PaddlePaddle/HPD-Parsing/P-MTP","num_speculative_tokens":6}',
    ],
    parse=parse,  # the <BLOCK> list: joined text, and the blocks in their own column
    extra_columns=EXTRA_COLUMNS,
    prepare_serve=prepare_serve,  # points the P-MTP head at a local copy
    summary_metrics=summary_metrics,  # the prefix-cache hit rate
)
