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
# image = "vllm/vllm-openai:v0.10.2"
# flavor = "l4x1"
# timeout = "4h"
# secrets = ["HF_TOKEN"]
# ///
"""Nanonets-OCR2-3B: a Qwen2.5-VL-3B fine-tune that writes markdown with HTML tables, LaTeX and semantic tags.

This script starts `vllm serve` when no server answers, then keeps a fixed window of pages in flight. Its twin
nanonets-ocr2.py runs the same model in-process (`vllm.LLM`).

Run it on Hugging Face Jobs:
    hf jobs uv run --flavor l4x1 --timeout 4h --image vllm/vllm-openai:v0.10.2 -s HF_TOKEN https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main/nanonets-ocr2-server.py INPUT OUTPUT
or on your own GPU machine, or against a server already running:
    uv run nanonets-ocr2-server.py INPUT OUTPUT
    uv run nanonets-ocr2-server.py INPUT OUTPUT --server http://HOST:8000
Run it without arguments for usage.

It must run on vllm/vllm-openai:v0.10.2: newer vLLM releases decode this model to a stream of "!!!!". The card
serves it with a bare `vllm serve`; full-page scans need a 32768-token context. The card's prompt follows the
image, and decoding is greedy. The card names no page size ("higher resolution helps"): PDF pages render at
200 dpi inside the Qwen2.5-VL processor's pixel band (3136 to 12845056), which a 32768-token context holds.

To change the prompt or the sampling, edit FACTS below (a run of an edited copy is recorded as modified, never as
this release). The rest is the package ocr-vllm-core, pinned above; twin scripts state the same facts, and the tests
check that they do.
"""
# ruff: noqa: E501  (the job command above is one line, to copy whole)

from ocr_core import ModelFacts, run_server

FACTS = ModelFacts(
    model="nanonets/Nanonets-OCR2-3B",
    prompt=(
        "Extract the text from the above document as if you were reading it naturally. Return the tables in html "
        "format. Return the equations in LaTeX representation. If there is an image in the document and image "
        "caption is not present, add a small description of the image inside the <img></img> tag; otherwise, add "
        "the image caption inside <img></img>. Watermarks should be wrapped in brackets. Ex: <watermark>OFFICIAL "
        "COPY</watermark>. Page numbers should be wrapped in brackets. Ex: <page_number>14</page_number> or "
        "<page_number>9/22</page_number>. Prefer using ☐ and ☑ for check boxes."
    ),
    sampling={"temperature": 0.0, "max_tokens": 15000},
    pdf_render={"dpi": 200, "min_pixels": 3136, "max_pixels": 12845056},
    max_model_len=32768,
    image="vllm/vllm-openai:v0.10.2",
    vllm_pin="0.10.2",
    flavor="l4x1",
    params_b=3.75,
    serve_args=["--limit-mm-per-prompt", '{"image": 1}', "--no-enable-prefix-caching"],
)

if __name__ == "__main__":
    raise SystemExit(run_server(FACTS, __file__))
