"""LightOnOCR-3-0.8B: a 0.8B Qwen3.5-based page-to-markdown model from LightOn.

Facts from LightOn's README and client: the page image alone is the prompt (any text is out of distribution),
pages are sent at most 2048 px on the longest side and never upscaled (PDF pages are rendered at exactly 2048 px,
as LightOn's renderer does), temperature 0.1 rather than greedy, thinking off, and the vLLM 0.30.0 pin of LightOn's
own benchmark environment. The Gated DeltaNet prefill runs on Triton, as OvisOCR2's card (same Qwen3.5 base) asks:
on Hopper vLLM's `auto` picks FlashInfer's JIT-compiled kernel, and without flashinfer the engine dies at its first
prefill (vLLM 0.26 on an H200, 2026-11-30); on other GPUs `auto` is Triton already.
"""

from ocr_core import ModelFacts

FACTS = ModelFacts(
    model="lightonai/LightOnOCR-3-0.8B",
    prompt=None,  # the page image alone is the prompt: any text is out of distribution for this model
    sampling={"temperature": 0.1, "top_p": 1.0, "max_tokens": 8192},
    retry_temperature=0.2,
    request_extras={"chat_template_kwargs": {"enable_thinking": False}},
    max_side=2048,
    pdf_render={"longest_edge": 2048},
    max_model_len=18000,
    image="vllm/vllm-openai:v0.30.0",
    vllm_pin="0.30.0",
    flavor="l4x1",
    params_b=0.8,
    serve_args=[
        "--limit-mm-per-prompt",
        '{"image": 1}',
        "--default-chat-template-kwargs",
        '{"enable_thinking": false}',
        "--mm-processor-cache-gb",
        "0",
        "--no-enable-prefix-caching",
        "--gdn-prefill-backend",
        "triton",
    ],
)
