"""Writes model folders with real shapes and no weights, for vLLM's `--load-format dummy`.

    python3 bench/gpu/make_model.py OUT_DIR                    # Qwen2.5-VL-3B-shaped (Nanonets-OCR2-3B)
    python3 bench/gpu/make_model.py OUT_DIR --kind qwen3_5     # optional: Qwen3.5-0.8B-shaped (LightOnOCR-3)

The Qwen2.5-VL folder carries Qwen/Qwen2.5-VL-3B-Instruct's config.json, preprocessor_config.json and chat
template, and a word-level `tokenizers` tokenizer that covers every id of the 151,936-row embedding: the real
special tokens at their real ids, filler words elsewhere. Random weights decode to random ids, so every id must
detokenize. The folder is a few MB; nothing is downloaded. Needs the `tokenizers` package only.

The Qwen3.5 folder follows Qwen/Qwen3.5-0.8B's config (hybrid Gated DeltaNet + gated attention, 24 layers,
vision depth 12, patch 16) with a simplified chat template; it is not checked against vLLM here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

QWEN25_SPECIALS = {
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

# Optional: Qwen/Qwen3.5-0.8B (LightOnOCR-3-0.8B is built on it). Special tokens sit 96,401 ids above Qwen2.5's.
QWEN35_SPECIALS = {
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
    248068: ("<think>", False),
    248069: ("</think>", False),
}

QWEN35_CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "image_token_id": 248056,
    "video_token_id": 248057,
    "vision_start_token_id": 248053,
    "vision_end_token_id": 248054,
    "tie_word_embeddings": True,
    "text_config": {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "bos_token_id": 248044,
        "eos_token_id": 248044,
        "dtype": "bfloat16",
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "initializer_range": 0.02,
        "intermediate_size": 3584,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "linear_value_head_dim": 128,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": 8,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": 248320,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
        },
    },
    "vision_config": {
        "deepstack_visual_indexes": [],
        "depth": 12,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 768,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "model_type": "qwen3_5",
        "num_heads": 12,
        "num_position_embeddings": 2304,
        "out_hidden_size": 1024,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}

QWEN35_PREPROCESSOR = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "processor_class": "Qwen3VLProcessor",
}

QWEN35_VIDEO_PREPROCESSOR = {
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "video_processor_type": "Qwen3VLVideoProcessor",
    "processor_class": "Qwen3VLProcessor",
}

# Simplified Qwen3.5 template: ChatML, images as vision_start/image_pad/vision_end, thinking off by default.
QWEN35_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking %}<think>\n{% else %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def tokenizer_json(vocab_size: int, specials: dict[int, tuple[str, bool]], unk_id: int) -> dict:
    """A WordLevel tokenizer: id i is the word `w<i>` unless a special token owns it."""
    vocab = {f"w{i}": i for i in range(vocab_size) if i not in specials}
    vocab["<unk>"] = unk_id  # words the prompt holds map to one ordinary id, like any unknown word
    del vocab[f"w{unk_id}"]
    for token_id, (content, _) in specials.items():
        vocab[content] = token_id
    added = [
        {
            "id": token_id,
            "content": content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": special,
        }
        for token_id, (content, special) in sorted(specials.items())
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def tokenizer_config(specials: dict[int, tuple[str, bool]], eos: str, pad: str, chat_template: str) -> dict:
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(token_id): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for token_id, (content, special) in sorted(specials.items())
        },
        "additional_special_tokens": [
            content for _, (content, special) in sorted(specials.items()) if special and content not in (eos, pad)
        ],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": eos,
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": pad,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def make_qwen25(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", QWEN25_CONFIG)
    write_json(out / "preprocessor_config.json", QWEN25_PREPROCESSOR)
    write_json(
        out / "generation_config.json",
        {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643},
    )
    (out / "chat_template.json").write_text(json.dumps({"chat_template": QWEN25_CHAT_TEMPLATE}, indent=2) + "\n")
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(151936, QWEN25_SPECIALS, unk_id=220)))
    write_json(
        out / "tokenizer_config.json",
        tokenizer_config(QWEN25_SPECIALS, "<|im_end|>", "<|endoftext|>", QWEN25_CHAT_TEMPLATE),
    )


def make_qwen35(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", QWEN35_CONFIG)
    write_json(out / "preprocessor_config.json", QWEN35_PREPROCESSOR)
    write_json(out / "video_preprocessor_config.json", QWEN35_VIDEO_PREPROCESSOR)
    write_json(
        out / "generation_config.json",
        {"bos_token_id": 248044, "eos_token_id": [248046, 248044], "pad_token_id": 248044},
    )
    (out / "chat_template.jinja").write_text(QWEN35_CHAT_TEMPLATE)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(248320, QWEN35_SPECIALS, unk_id=220)))
    write_json(
        out / "tokenizer_config.json",
        tokenizer_config(QWEN35_SPECIALS, "<|im_end|>", "<|endoftext|>", QWEN35_CHAT_TEMPLATE),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder to write")
    parser.add_argument("--kind", choices=["qwen2_5_vl", "qwen3_5"], default="qwen2_5_vl")
    args = parser.parse_args()
    (make_qwen25 if args.kind == "qwen2_5_vl" else make_qwen35)(args.out)
    size = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"{args.out}: {args.kind}, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
