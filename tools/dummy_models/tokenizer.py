"""Tokenizers for models with random weights: every id of the embedding decodes to a text (a random model emits any
id), with the real special tokens at their real ids (the chat template's tokens must be the real ones). Needs no
package: the files are written as JSON."""

from __future__ import annotations

import json
from pathlib import Path

Specials = dict[int, tuple[str, bool]]  # id -> (text, whether it is a special token)

# Prompts are read one visible character at a time, each printable ASCII character an id of its own, and whitespace
# is dropped first: transformers 5.19 and later drop unknown words and newlines when they encode (5.16 kept them),
# and the prompt lengths the tests check must not depend on the transformers release a vLLM venv resolved.
TEXT_CHARS = "".join(chr(code) for code in range(33, 127))
DROP_WHITESPACE = {"type": "Replace", "pattern": {"Regex": r"\s"}, "content": ""}
SPLIT_CHARACTERS = {"type": "Split", "pattern": {"Regex": r"[\s\S]"}, "behavior": "Isolated", "invert": False}


def word_tokenizer(vocab_size: int, specials: Specials, unk_id: int) -> dict:
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


def character_tokenizer(vocab_size: int, specials: Specials, unk_id: int) -> dict:
    """The word-level tokenizer with its first ids given to single characters and a pre-tokenizer that splits text
    into them, so a prompt's length in tokens is its count of visible characters."""
    tokenizer = word_tokenizer(vocab_size, specials, unk_id)
    vocab = tokenizer["model"]["vocab"]
    for token_id, char in enumerate(TEXT_CHARS):
        del vocab[f"w{token_id}"]
        vocab[char] = token_id
    tokenizer["normalizer"] = DROP_WHITESPACE
    tokenizer["pre_tokenizer"] = SPLIT_CHARACTERS
    return tokenizer


def tokenizer_config(specials: Specials, eos: str, pad: str, chat_template: str) -> dict:
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
