"""The engine's ceiling on this machine: every page decoded, then all handed to one `LLM.generate` call.

No driver can beat this: there are no HTTP round trips and no batch boundaries. It counts decoding the page (JPEG
bytes to an RGB image), which any client makes the server do, so a recipe's share of this ceiling says what it
says. A server decodes in its API server while the engine runs, so the ceiling (`pages_per_s`) is the pages over
the longer of the two, as if they overlapped perfectly; `serial_pages_per_s` is over their sum (no overlap), and
`engine_only_pages_per_s` leaves the decoding out, as this ceiling did before.
Run by saturation.py in its own process; writes one JSON object.
Usage: python bench/ceiling.py MODEL DATASET_FOLDER MAX_TOKENS RESULT_JSON
"""

from __future__ import annotations

import io
import json
import os
import sys
import time


def main() -> None:
    model, folder, max_tokens, result = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    import datasets
    from PIL import Image
    from vllm import LLM, SamplingParams

    rows = datasets.load_from_disk(folder).cast_column("image", datasets.Image(decode=False))
    pages = [cell["bytes"] for cell in rows["image"]]
    llm = LLM(model=model, max_model_len=1024, limit_mm_per_prompt={"image": 1}, enforce_eager=True,
              enable_prefix_caching=False)  # fmt: skip
    prompt = llm.get_tokenizer().apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}]}], tokenize=False, add_generation_prompt=True
    )
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    started = time.monotonic()
    images = [Image.open(io.BytesIO(data)).convert("RGB") for data in pages]
    decoded = time.monotonic()
    inputs = [{"prompt": prompt, "multi_modal_data": {"image": image}} for image in images]
    outputs = llm.generate(inputs, params, use_tqdm=False)
    engine_seconds = time.monotonic() - decoded
    decode_seconds = decoded - started
    bound = max(decode_seconds, engine_seconds)
    tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
    figures = {
        "pages_per_s": len(outputs) / bound,
        "output_tokens_per_s": tokens / bound,
        "serial_pages_per_s": len(outputs) / (decode_seconds + engine_seconds),
        "engine_only_pages_per_s": len(outputs) / engine_seconds,
        "decode_ms_per_page": 1000 * decode_seconds / len(outputs),
    }
    with open(result, "w") as handle:
        json.dump(figures, handle)


if __name__ == "__main__":
    main()
