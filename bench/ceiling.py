"""The engine's ceiling on this machine: every page handed to one `LLM.generate` call, inputs built beforehand.

No driver can beat this: there are no HTTP round trips, no batch boundaries, and image decoding is done before
the clock starts. Run by saturation.py in its own process; prints one JSON line.
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
    images = [Image.open(io.BytesIO(cell["bytes"])).convert("RGB") for cell in rows["image"]]
    llm = LLM(model=model, max_model_len=1024, limit_mm_per_prompt={"image": 1}, enforce_eager=True,
              enable_prefix_caching=False)  # fmt: skip
    prompt = llm.get_tokenizer().apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}]}], tokenize=False, add_generation_prompt=True
    )
    inputs = [{"prompt": prompt, "multi_modal_data": {"image": image}} for image in images]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    started = time.monotonic()
    outputs = llm.generate(inputs, params, use_tqdm=False)
    seconds = time.monotonic() - started
    tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
    with open(result, "w") as handle:
        json.dump({"pages_per_s": len(outputs) / seconds, "output_tokens_per_s": tokens / seconds}, handle)


if __name__ == "__main__":
    main()
