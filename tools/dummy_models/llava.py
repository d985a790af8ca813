"""`tiny_llava`: a tiny random LLaVA that a real vLLM serves on the CPU (the test bed's model).

No model hub is reachable from the test machines, so the test bed makes its own vision-language model:
random weights from a fixed seed, about 1 MB, loadable by both `vllm serve` and `vllm.LLM`. Its output is
gibberish; it exists to exercise the server, the clients and the offline path, not OCR quality. Building it needs
torch, transformers and tokenizers (the test bed's).
"""

from __future__ import annotations

import json
from pathlib import Path

SEED = 0
IMAGE_SIZE = 56
PATCH_SIZE = 14
VOCAB_SIZE = 640
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<image>"]
PAD_ID, BOS_ID, EOS_ID, IMAGE_ID = range(len(SPECIAL_TOKENS))

# Enough text for a few hundred BPE merges; the wording does not matter.
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Optical character recognition turns page images into text, line by line.",
    "Invoice number 2024-0815, total amount due: 1,234.56 EUR, payable within 30 days.",
    "Chapter one. It was a bright cold day in April, and the clocks were striking thirteen.",
    "Table 3: results per dataset, with precision, recall and F1 score in percent.",
    "Transcribe the document. Return only the text, in reading order, as Markdown.",
    "# Heading\n\n- item one\n- item two\n\n| a | b |\n|---|---|\n| 1 | 2 |",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "Section 4.2 describes the scanning pipeline: deskew, denoise, binarize, then segment columns.",
    "Dear Sir or Madam, thank you for your letter of 12 March regarding the outstanding payment.",
    "Footnotes, captions and page headers are kept; running page numbers are dropped.",
    "Ingredients: 200 g flour, 3 eggs, 250 ml milk, a pinch of salt. Whisk until smooth.",
    "Handwritten notes in the margin are transcribed in square brackets where legible.",
]

# Image parts become the <image> placeholder, which the LLaVA processor expands to one token per patch.
# Iterating over message['content'] is what makes vLLM pass OpenAI-style parts to the template.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{- raise_exception('unsupported role: ' + message['role']) -}}"
    "{%- endif -%}"
    "{{- '<s>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- elif part['type'] in ['image', 'image_url'] -%}{{- '<image>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '</s>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<s>assistant\\n' -}}{%- endif -%}"
)


def tiny_llava(folder: Path) -> None:
    """Write weights, tokenizer, processor and configs of the tiny LLaVA into folder."""
    import torch
    from transformers import LlavaForConditionalGeneration

    processor = _processor()
    torch.manual_seed(SEED)
    model = LlavaForConditionalGeneration(_config(len(processor.tokenizer)))
    _mute_invisible_tokens(model, processor.tokenizer)
    model.to(torch.bfloat16).save_pretrained(folder)
    processor.save_pretrained(folder)
    _rename_vision_weights(folder / "model.safetensors")
    _write_generation_config(folder)


def _mute_invisible_tokens(model, tokenizer) -> None:
    """Zero the output rows of tokens that decode to no visible character (specials, lone UTF-8 bytes,
    whitespace, control bytes): a random model's greedy pick is otherwise often such a token and the
    answer comes back empty. The price: the model never emits </s>, so every request runs to max_tokens."""
    import torch

    invisible = [token_id for token_id in range(len(tokenizer)) if not _visible(tokenizer.decode([token_id]))]
    with torch.no_grad():
        model.lm_head.weight[invisible] = 0


def _visible(text: str) -> bool:
    """Whether text shows at least one character and holds no undecodable byte."""
    return "\ufffd" not in text and any(ch.isprintable() and not ch.isspace() for ch in text)


def _processor():  # -> transformers.LlavaProcessor, imported lazily
    """LLaVA processor built with the PIL ("slow") CLIP image processor, so building needs no torchvision.

    It is saved as plain CLIPImageProcessor: transformers 5.19 loads that with its torchvision backend
    whenever torchvision imports, as it does in the test bed."""
    from transformers import CLIPImageProcessorPil, LlavaProcessor

    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=_tokenizer(),
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's CLS token, which the "default" strategy drops again
        chat_template=CHAT_TEMPLATE,
    )


def _tokenizer():  # -> transformers.PreTrainedTokenizerFast, imported lazily
    """Byte-level BPE trained on CORPUS: any text round-trips, and training is deterministic."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        chat_template=CHAT_TEMPLATE,
    )


def _config(vocab_size: int):  # -> transformers.LlavaConfig, imported lazily
    """CLIP tower (2 layers, hidden 32) and Llama (2 layers, hidden 128, head_dim 64: vLLM's CPU
    attention rejects head_dim 16). Weights are initialised wider than the defaults so that the image
    sways the answer: with default scales every page yields the same "qqqq...", and a comparison of two
    inference paths would prove nothing."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        projection_dim=32,
        initializer_range=0.2,
        initializer_factor=10.0,
    )
    text = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        initializer_range=0.1,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=IMAGE_ID,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        image_seq_length=(IMAGE_SIZE // PATCH_SIZE) ** 2,
    )


def _rename_vision_weights(path: Path) -> None:
    """transformers 5 saves the CLIP tower as `...vision_tower.embeddings`; vLLM 0.32 loads
    `...vision_tower.vision_model.embeddings` (and the same for encoder and layer norms)."""
    from safetensors.torch import load_file, save_file

    marker = "vision_tower."
    tensors = {_insert_vision_model(name, marker): tensor for name, tensor in load_file(path).items()}
    save_file(tensors, path, metadata={"format": "pt"})


def _insert_vision_model(name: str, marker: str) -> str:
    """Insert `vision_model.` after the tower prefix unless it is already there."""
    head, found, tail = name.partition(marker)
    if not found or tail.startswith("vision_model."):
        return name
    return f"{head}{marker}vision_model.{tail}"


def _write_generation_config(folder: Path) -> None:
    """Token ids only: vLLM turns sampling fields found here into request defaults, which would
    override what the tests and recipes ask for."""
    config = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
    (folder / "generation_config.json").write_text(json.dumps(config, indent=2) + "\n")
