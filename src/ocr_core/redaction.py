"""Keeps secrets out of everything a run prints or writes: messages, log lines, the summary, job commands, the card.

Secrets are registered by value, once, as soon as the arguments are parsed, and every text that leaves the process
goes through `redact`. Matching values rather than flag names also catches argparse's abbreviations (`--hf hf_...`),
secrets inside --extra-serve-args and the password in a URL.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

MASK = "***"
SECRET_WORDS = frozenset({"token", "key", "apikey", "secret", "password", "passwd"})
SECRET_ENVIRONMENT = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY")
URL_USERINFO = re.compile(r"(?<=://)[^/?#\s]*@")
NEGATIVE_NUMBER = re.compile(r"-\d")
HF_TOKEN_SHAPE = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
SECRET_VALUES: set[str] = set()


def redact(text: str) -> str:
    """`text` with every registered secret, anything shaped like a Hub token (one typed under a mistyped flag is
    never registered), and any URL's userinfo, replaced by ***."""
    for value in sorted(SECRET_VALUES, key=len, reverse=True):
        text = text.replace(value, MASK)
    return URL_USERINFO.sub(MASK + "@", HF_TOKEN_SHAPE.sub(MASK, text))


def register_secret(value: str | None) -> None:
    """Adds a value, also as shell-quoted and JSON-escaped, the other spellings it is printed in."""
    if value:
        SECRET_VALUES.update({value, shlex.quote(value), json.dumps(value)[1:-1]})


def register_run_secrets(
    tokens: Sequence[str | None],
    server: str | None,
    serve_words: Sequence[str] = (),
    environ: Mapping[str, str] = os.environ,
) -> None:
    """Registers every secret a run knows of: its `tokens` (--hf-token, --api-key), the credential in its --server
    URL, the secret variables of `environ` and the secret flags' values of `serve_words` (its --extra-serve-args as
    flags); the command line calls it once, right after parsing the arguments."""
    for value in tokens:
        register_secret(value)
    for name in SECRET_ENVIRONMENT:
        register_secret(environ.get(name))
    register_secret(url_credential(server or ""))
    for value in secret_flag_values(serve_words):
        register_secret(value)


def url_credential(url: str) -> str | None:
    """The password of a URL's userinfo, or the user name when there is no password (a token given as user)."""
    parts = urlsplit(url)
    return parts.password or parts.username


def secret_flag_values(words: Sequence[str]) -> list[str]:
    """Values of secret-looking flags (`--api-key X`, `--hf_token=X`) among serve flags: every word up to the next
    flag, since vLLM takes a list of keys (`--api-key K1 K2`); a word no flag takes after one is masked too."""
    values = []
    secret = False
    for word in words:
        name, equals, value = word.partition("=")
        if word.startswith("-") and not NEGATIVE_NUMBER.match(word):
            secret = is_secret_flag(name)
            if secret and equals:
                values.append(value)
        elif secret:
            values.append(word)
    return values


def is_secret_flag(name: str) -> bool:
    """Whole words only: `--api-key` and `--hf-token` are secret, `--max-num-batched-tokens 8192` is not."""
    return not SECRET_WORDS.isdisjoint(re.split(r"[-_]+", name.strip("-").lower()))
