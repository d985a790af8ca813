"""Model FLOPs per page, from a model folder's config: vision tower + decoder prefill + decode (issue 17's MFU).

    python3 bench/gpu/flops.py MODEL_DIR [--width 1540 --height 2000 --prompt-extra 8 --output 800]
        [--pages-per-s 5.1]

Counts 2 FLOPs per multiply-add of every matrix product a page needs (the weights and the attention scores and
values), the same convention as "model FLOPs" in MFU: no recomputation, no padding, no elementwise work. Vision:
patch embedding, each block's attention (windowed blocks see one window, full blocks the whole image) and MLP,
and the patch merger. Decoder: every layer's projections and MLP over the prompt (causal attention over half the
prompt on average) and over each output token (attention over everything before it), plus the LM head for each
output token. The Qwen3.5 shape's linear-attention (Gated DeltaNet) layers count their projections and the
chunked recurrent state update (about 4 * head_k_dim * head_v_dim per head per token). With --pages-per-s it
prints MFU against the H200's dense bf16 peak (989 TFLOP/s by the datasheet; 790 is what a plain bf16 matmul
reached on these machines, /work/.library/device/KINDS.md).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

DATASHEET_PEAK = 989e12
MEASURED_MATMUL_PEAK = 790e12


def resized(width: int, height: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's smart_resize: each side rounded to the factor, the area moved into the pixel band."""
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = math.floor(height / beta / factor) * factor
        w = math.floor(width / beta / factor) * factor
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return w, h


def vision_flops(vision: dict, width: int, height: int, pixel_band: tuple[int, int]) -> tuple[float, int]:
    """FLOPs of the vision tower for one image, and the number of image tokens it hands the decoder."""
    patch = vision.get("patch_size") or vision.get("spatial_patch_size")
    merge = vision["spatial_merge_size"]
    w, h = resized(width, height, patch * merge, *pixel_band)
    patches = (w // patch) * (h // patch)
    d = vision["hidden_size"]
    ff = vision["intermediate_size"]
    gated = vision.get("hidden_act", "silu") == "silu"
    channels = vision.get("in_chans", vision.get("in_channels", 3))
    flops = 2 * patches * channels * vision["temporal_patch_size"] * patch * patch * d
    full = set(vision.get("fullatt_block_indexes", range(vision["depth"])))
    window_patches = (vision["window_size"] // patch) ** 2 if "window_size" in vision else patches
    for layer in range(vision["depth"]):
        seen = patches if layer in full else min(window_patches, patches)
        flops += 2 * patches * (4 * d * d + (3 if gated else 2) * d * ff)
        flops += 4 * patches * seen * d
    merged = patches // (merge * merge)
    wide = d * merge * merge
    flops += 2 * merged * (wide * wide + wide * vision["out_hidden_size"])
    return flops, merged


def layer_params(text: dict, kind: str) -> int:
    d = text["hidden_size"]
    ff = text["intermediate_size"]
    if kind == "linear_attention":
        k = text["linear_num_key_heads"] * text["linear_key_head_dim"]
        v = text["linear_num_value_heads"] * text["linear_value_head_dim"]
        # in_proj for q, k, v, z (gate), b and a (per head), out_proj
        return d * (2 * k + 2 * v + 2 * text["linear_num_value_heads"]) + v * d + 3 * d * ff
    head = text.get("head_dim") or d // text["num_attention_heads"]
    q = text["num_attention_heads"] * head * (2 if text.get("attn_output_gate") else 1)
    kv = 2 * text["num_key_value_heads"] * head
    return d * q + d * kv + text["num_attention_heads"] * head * d + 3 * d * ff


def attention_width(text: dict) -> int:
    head = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    return text["num_attention_heads"] * head


def decoder_flops(text: dict, prompt: int, output: int) -> tuple[float, float]:
    """Prefill and decode FLOPs of one sequence of `prompt` tokens followed by `output` generated tokens."""
    kinds = text.get("layer_types") or ["full_attention"] * text["num_hidden_layers"]
    width = attention_width(text)
    state = (
        text.get("linear_num_value_heads", 0)
        * text.get("linear_key_head_dim", 0)
        * text.get("linear_value_head_dim", 0)
    )
    prefill = decode = 0.0
    for kind in kinds:
        params = layer_params(text, kind)
        prefill += 2 * prompt * params
        decode += 2 * output * params
        if kind == "linear_attention":
            prefill += 4 * prompt * state
            decode += 4 * output * state
        else:
            prefill += 2 * prompt * prompt * width  # causal: QK^T and AV over half the square
            decode += 4 * width * (output * prompt + output * (output - 1) / 2)
    head = 2 * text["hidden_size"] * text["vocab_size"]
    return prefill + head, decode + head * (output - 1)


def page_flops(model: Path, width: int, height: int, prompt_extra: int, output: int) -> dict:
    config = json.loads((model / "config.json").read_text())
    processor = json.loads((model / "preprocessor_config.json").read_text())
    size = processor.get("size") or {}
    band = (
        processor.get("min_pixels") or size.get("shortest_edge", 3136),
        processor.get("max_pixels") or size.get("longest_edge", 12845056),
    )
    text = config.get("text_config") or config
    vision, image_tokens = vision_flops(config["vision_config"], width, height, band)
    prompt = image_tokens + prompt_extra
    prefill, decode = decoder_flops(text, prompt, output)
    return {
        "model_type": config["model_type"],
        "image_tokens": image_tokens,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "vision_tflop": round(vision / 1e12, 3),
        "prefill_tflop": round(prefill / 1e12, 3),
        "decode_tflop": round(decode / 1e12, 3),
        "total_tflop": round((vision + prefill + decode) / 1e12, 3),
    }


def mfu(total_tflop: float, pages_per_s: float) -> dict:
    rate = total_tflop * 1e12 * pages_per_s
    return {
        "model_tflop_per_s": round(rate / 1e12, 1),
        "mfu_datasheet_989": round(rate / DATASHEET_PEAK, 3),
        "mfu_measured_790": round(rate / MEASURED_MATMUL_PEAK, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="model folder (config.json, preprocessor_config.json)")
    parser.add_argument("--width", type=int, default=1540)
    parser.add_argument("--height", type=int, default=2000)
    parser.add_argument("--prompt-extra", type=int, default=8, help="chat-template tokens around the image")
    parser.add_argument("--output", type=int, default=800, help="generated tokens per page")
    parser.add_argument("--pages-per-s", type=float, nargs="*", default=[])
    args = parser.parse_args()
    figures = page_flops(args.model, args.width, args.height, args.prompt_extra, args.output)
    figures["mfu"] = {str(rate): mfu(figures["total_tflop"], rate) for rate in args.pages_per_s}
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
