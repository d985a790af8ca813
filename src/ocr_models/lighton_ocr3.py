"""LightOnOCR-3-0.8B: a 0.8B Qwen3.5-based page-to-markdown model from LightOn.

Facts from LightOn's README and client: the page image alone is the prompt (any text is out of distribution),
pages are sent at most 2048 px on the longest side and never upscaled (PDF pages are rendered at exactly 2048 px,
as LightOn's renderer does), temperature 0.1 rather than greedy, thinking off, and the vLLM 0.30.0 pin of LightOn's
own benchmark environment. The Gated DeltaNet prefill runs on Triton, as OvisOCR2's card (same Qwen3.5 base) asks:
on Hopper vLLM's `auto` picks FlashInfer's JIT-compiled kernel, and without flashinfer the engine dies at its first
prefill (vLLM 0.26 on an H200, 2026-11-30); on other GPUs `auto` is Triton already.
"""

MODEL = "lightonai/LightOnOCR-3-0.8B"
IMAGE = "vllm/vllm-openai:v0.30.0"
VLLM_PIN = "0.30.0"
FLAVOR = "l4x1"
PARAMS_B = 0.8
MAX_MODEL_LEN = 18000
SERVE_ARGS = [
    "--limit-mm-per-prompt",
    '{"image": 1}',
    "--default-chat-template-kwargs",
    '{"enable_thinking": false}',
    "--mm-processor-cache-gb",
    "0",
    "--no-enable-prefix-caching",
    "--gdn-prefill-backend",
    "triton",
]
SAMPLING = {"temperature": 0.1, "top_p": 1.0, "max_tokens": 8192}
REQUEST_EXTRAS = {"chat_template_kwargs": {"enable_thinking": False}}
MAX_SIDE = 2048
PDF_RENDER = {"longest_edge": MAX_SIDE}
RETRY_TEMPERATURE = 0.2
