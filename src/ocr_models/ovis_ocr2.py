"""OvisOCR2: a 0.8B page parser post-trained from Qwen3.5-0.8B by the Ovis team (ATH-MaaS).

The card documents offline vLLM only (pinned to 0.22.1); SERVE_ARGS translate its `LLM(...)` arguments to
`vllm serve` flags, with the context capped at 32768 (the native 262144 would not fit a 24 GB card) and the
card's pixel band (448x448 to 2880x2880 px; PDF pages render at 200 dpi moved into it). The prompt follows the
image; decoding is greedy with thinking off. Like the card's own parser, the output drops figure placeholders
(`<img src="images/bbox_...">`, kept with --keep-image-tags) and trims a truncated repeating tail.
"""

import argparse
import re
from collections.abc import Mapping
from typing import Any

from ocr_core import ModelFacts, Parsed, trim_repeats

IMAGE_TAG = re.compile(r'<img\s+src="images/bbox_\d+_\d+_\d+_\d+\.jpg"\s*/?>')
TRIM_FROM_CHARS = 8000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep-image-tags",
        action="store_true",
        help="keep the model's <img src=images/bbox_...> figure tags",
    )


def parse(text: str, options: Mapping[str, Any]) -> Parsed:
    if len(text) >= TRIM_FROM_CHARS:
        text = trim_repeats(text, min_repeats=5)
    if not options["keep_image_tags"]:
        text = re.sub(r"\n{3,}", "\n\n", IMAGE_TAG.sub("", text))
    return Parsed(text.strip())


FACTS = ModelFacts(
    model="ATH-MaaS/OvisOCR2",
    prompt=(
        "\nExtract all readable content from the image in natural human reading order and output the result as a "
        "single Markdown document. For charts or images, represent them using an HTML image tag: "
        '<img src="images/bbox_{left}_{top}_{right}_{bottom}.jpg" />, where left, top, right, bottom are bounding '
        "box coordinates scaled to [0, 1000). Format formulas as LaTeX. Format tables as HTML: <table>...</table>. "
        "Transcribe all other text as standard Markdown. Preserve the original text without translation or "
        "paraphrasing."
    ),
    sampling={"temperature": 0.0, "max_tokens": 16384},
    request_extras={"chat_template_kwargs": {"enable_thinking": False}},
    max_pixels=8294400,
    pdf_render={"dpi": 200, "min_pixels": 200704, "max_pixels": 8294400},
    max_model_len=32768,
    image="vllm/vllm-openai:v0.22.1",
    vllm_pin="0.22.1",
    flavor="l4x1",
    params_b=0.8,
    serve_args=[
        "--tensor-parallel-size",
        "1",
        "--gpu-memory-utilization",
        "0.8",
        "--gdn-prefill-backend",
        "triton",
        "--limit-mm-per-prompt",
        '{"image": 1}',
        "--mm-processor-cache-gb",
        "0",
        "--no-enable-prefix-caching",
        "--mm-processor-kwargs",
        '{"images_kwargs": {"min_pixels": 200704, "max_pixels": 8294400}}',
    ],
    parse=parse,  # drops figure tags (unless --keep-image-tags) and trims a truncated repeating tail
    add_arguments=add_arguments,
)
