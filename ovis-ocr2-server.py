# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "ocr-vllm-core==0.2.0",
# ]
#
# [tool.uv]
# exclude-newer = "2026-12-01T00:00:00Z"
#
# [tool.uv.sources]
# ocr-vllm-core = { url = "https://huggingface.co/datasets/uv-scripts/ocr-vllm/resolve/main/wheels/ocr_vllm_core-0.2.0-py3-none-any.whl" }
#
# [tool.hf-jobs]
# image = "vllm/vllm-openai:v0.22.1"
# flavor = "l4x1"
# timeout = "4h"
# secrets = ["HF_TOKEN"]
# ///
"""OvisOCR2: a 0.8B page parser post-trained from Qwen3.5-0.8B by the Ovis team (ATH-MaaS).

This script starts `vllm serve` when no server answers, then keeps a fixed window of pages in flight. Its twin
ovis-ocr2.py runs the same model in-process (`vllm.LLM`).

Run it on Hugging Face Jobs:
    hf jobs uv run --flavor l4x1 --timeout 4h --image vllm/vllm-openai:v0.22.1 -s HF_TOKEN https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main/ovis-ocr2-server.py INPUT OUTPUT
or on your own GPU machine, or against a server already running:
    uv run ovis-ocr2-server.py INPUT OUTPUT
    uv run ovis-ocr2-server.py INPUT OUTPUT --server http://HOST:8000
Run it without arguments for usage.

The card documents offline vLLM only (pinned to 0.22.1); SERVE_ARGS translate its `LLM(...)` arguments to
`vllm serve` flags, with the context capped at 32768 (the native 262144 would not fit a 24 GB card) and the
card's pixel band (448x448 to 2880x2880 px; PDF pages render at 200 dpi moved into it). The prompt follows the
image; decoding is greedy with thinking off. Like the card's own parser, the output drops figure placeholders
(`<img src="images/bbox_...">`, kept with --keep-image-tags) and trims a truncated repeating tail.

To change the prompt or the sampling, edit FACTS below (a run of an edited copy is recorded as modified, never as
this release). The rest is the package ocr-vllm-core, pinned above; twin scripts state the same facts, and the tests
check that they do.
"""
# ruff: noqa: E501  (the job command above is one line, to copy whole)

from ocr_core import ModelFacts, run_server
from ocr_models import ovis_ocr2

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
    parse=ovis_ocr2.parse,  # drops figure tags (unless --keep-image-tags) and trims a truncated repeating tail
    add_arguments=ovis_ocr2.add_arguments,
)

if __name__ == "__main__":
    raise SystemExit(run_server(FACTS, __file__))
