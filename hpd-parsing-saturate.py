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
# # no image: `hf jobs uv run` needs uv in it, and the vendor's image has none; the docstring's `hf jobs run` installs it
# flavor = "l4x1"
# timeout = "4h"
# secrets = ["HF_TOKEN"]
# ///
"""HPD-Parsing: Baidu PaddlePaddle's hierarchical parallel document parser (InternVL3.5-1B based).

This script starts `vllm serve` when no server answers, then widens the window of pages in flight until the engine's
queue fills or host memory says stop.

Run it on Hugging Face Jobs:
    hf jobs run --flavor l4x1 --timeout 4h -s HF_TOKEN ccr-2vdh3abv-pub.cnc.bj.baidubce.com/paddlepaddle/hpd-parsing-vllm:latest-nvidia-gpu -- bash -lc 'pip install -q uv && uv run https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main/hpd-parsing-saturate.py INPUT OUTPUT'
or on your own GPU machine, or against a server already running:
    uv run hpd-parsing-saturate.py INPUT OUTPUT
    uv run hpd-parsing-saturate.py INPUT OUTPUT --server http://HOST:8000
Run it without arguments for usage.

It needs the vendor's vLLM fork (dynamic request forking plus P-MTP speculative decoding), which ships in the
vendor's image; that image has no `uv`, so the job installs it first. A layout branch forks one child branch per
block and the children reuse the parent's KV cache, which is why this is the one OCR recipe that keeps prefix
caching ON: never turn it off. The answer is a list of `<BLOCK>type [x1, y1, x2, y2]<CHILD>text` blocks (boxes
in 0-1000 page coordinates), stored as a structured blocks column beside the joined text. The card names no page
size (the image resizes pages itself, MAX_PATCHES_WITH_RESIZE), so PDF pages render at 200 dpi.

To change the prompt or the sampling, edit FACTS below (a run of an edited copy is recorded as modified, never as
this release). The rest is the package ocr-vllm-core, pinned above; twin scripts state the same facts, and the tests
check that they do.
"""
# ruff: noqa: E501  (the job command above is one line, to copy whole)

from ocr_core import ModelFacts, run_saturate
from ocr_models import hpd_parsing

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
    parse=hpd_parsing.parse,  # the <BLOCK> list: joined text, and the blocks in their own column
    extra_columns=hpd_parsing.EXTRA_COLUMNS,
    prepare_serve=hpd_parsing.prepare_serve,  # points the P-MTP head at a local copy
    summary_metrics=hpd_parsing.summary_metrics,  # the prefix-cache hit rate
)

if __name__ == "__main__":
    raise SystemExit(run_saturate(FACTS, __file__))
