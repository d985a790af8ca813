"""The recipes whose pinned vLLM runs on this CPU, run end to end on that vLLM with their model's architecture.

Each server recipe spawns `vllm serve` from its own SERVE_ARGS (only --load-format dummy, --enforce-eager and a
small --max-model-len are added) and OCRs three small pages; its offline twin runs `vllm.LLM` from the same
version on the same pages. One page at a time on both sides, so the two engines see the same batches and the
nearly flat logits of a random model cannot tip differently: at temperature 0 both must agree byte for byte.
The exact prompt length of every page proves that the recipe's chat_template_kwargs reached the chat template and
its mm_processor_kwargs the image processor, rather than being ignored.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ocr_core.serving.spawn import serve_command
from tests.pinned.runs import (
    COMMON,
    MAX_MODEL_LEN,
    MAX_TOKENS,
    TEST_SERVE_ARGS,
    TWINS,
    Twins,
    extra_serve_args,
    load,
    results,
    run,
    small_pages,
    spawned_argv,
)
from tests.testbed.server import free_port

pytestmark = pytest.mark.pinned

PAGE_SIDES = [(400, 300), (300, 400), (280, 200)]  # the last one is below OvisOCR2's min_pixels band
# The pixel band a model card asks the image processor for (OvisOCR2's card: 448x448 to 2880x2880 pixels).
CARD_PIXEL_BANDS = {"ovis_ocr2": {"min_pixels": 200704, "max_pixels": 8294400}}


def image_tokens(width: int, height: int, processor: dict, band: dict) -> int:
    """Qwen2-VL's smart_resize (which Qwen3.5's processor uses): the side lengths round to the 32-px grid of
    2x2-merged 16-px patches, then scale into [min_pixels, max_pixels]; one token per merged patch."""
    factor = processor["patch_size"] * processor["merge_size"]
    low = band.get("min_pixels", processor["size"]["shortest_edge"])
    high = band.get("max_pixels", processor["size"]["longest_edge"])
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > high:
        beta = math.sqrt(height * width / high)
        h_bar, w_bar = math.floor(height / beta / factor) * factor, math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < low:
        beta = math.sqrt(low / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return (h_bar // factor) * (w_bar // factor)


def expected_prompt_tokens(twins: Twins, model: Path, width: int, height: int) -> int:
    """What the engine must count for one page if the recipe's template and processor kwargs are honoured."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    image_part = {"type": "image_url", "image_url": {"url": "data:,"}}
    messages = [{"role": "user", "content": twins.facts.build_content(image_part)}]
    template_kwargs = twins.facts.request_extras.get("chat_template_kwargs", {})
    prompt = AutoTokenizer.from_pretrained(str(model)).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, **template_kwargs
    )
    # Counted by the tokenizers library itself: transformers 5.19 (this venv's) drops unknown words when it encodes.
    ids = Tokenizer.from_file(str(model / "tokenizer.json")).encode(prompt, add_special_tokens=False).ids
    processor = json.loads((model / "preprocessor_config.json").read_text())
    band = CARD_PIXEL_BANDS.get(twins.module, {})
    return len(ids) - 1 + image_tokens(width, height, processor, band)


@pytest.mark.heavy
@pytest.mark.parametrize("twins", TWINS, ids=[twins.module for twins in TWINS])
def test_recipe_runs_on_its_pinned_vllm(twins, pinned_model, tmp_path, short_tmp):
    assert twins.vllm.level == "runs"
    pages = small_pages(tmp_path, PAGE_SIDES)
    model = ["--model", str(pinned_model), *COMMON, extra_serve_args()]
    port = free_port()

    served = run(
        twins, twins.server, str(pages), str(tmp_path / "server"), *model, "--server", f"http://127.0.0.1:{port}",
        "--max-inflight", "1", tmp=short_tmp,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr[-4000:]
    flags = [*twins.facts.serve_args, "--max-model-len", str(MAX_MODEL_LEN), *TEST_SERVE_ARGS]
    assert spawned_argv(served.stderr) == serve_command(str(pinned_model), flags, port)

    offline = run(
        twins, twins.offline, str(pages), str(tmp_path / "offline"), *model, "--batch-size", "1", tmp=short_tmp
    )
    assert offline.returncode == 0, offline.stderr[-4000:]
    assert json.loads(offline.stdout.strip().splitlines()[-1])["mode"] == "offline"

    server_rows, offline_rows = load(tmp_path / "server"), load(tmp_path / "offline")
    assert server_rows["page_id"] == offline_rows["page_id"] == ["p0", "p1", "p2"]
    assert server_rows["ocr_error"] == offline_rows["ocr_error"] == [None] * 3
    assert all(server_rows["markdown"])
    assert server_rows["markdown"] == offline_rows["markdown"]
    options = {"keep_image_tags": False}
    assert [twins.facts.parse(text, options).text for text in server_rows["markdown"]] == server_rows["markdown"]

    for out in (tmp_path / "server", tmp_path / "offline"):
        counted = results(out)
        assert sorted(counted) == ["train-0", "train-1", "train-2"], out
        for index, (width, height) in enumerate(PAGE_SIDES):
            row = counted[f"train-{index}"]
            assert row["completion_tokens"] == MAX_TOKENS
            assert row["prompt_tokens"] == expected_prompt_tokens(twins, pinned_model, width, height), out
