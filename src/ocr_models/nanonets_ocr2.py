"""Nanonets-OCR2-3B: a Qwen2.5-VL-3B fine-tune that writes markdown with HTML tables, LaTeX and semantic tags.

It must run on vllm/vllm-openai:v0.10.2: newer vLLM releases decode this model to a stream of "!!!!". The card
serves it with a bare `vllm serve`; full-page scans need a 32768-token context. The card's prompt follows the
image, and decoding is greedy. The card names no page size ("higher resolution helps"): PDF pages render at
200 dpi inside the Qwen2.5-VL processor's pixel band (3136 to 12845056), which a 32768-token context holds.
"""

from ocr_core import ModelFacts

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
