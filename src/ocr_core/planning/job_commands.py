"""The HF Jobs command lines a run shows: the released script's URL, the job timeout, and no secret in any of them."""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Mapping, Sequence

from ..facts import ModelFacts
from ..planning.cache_volume import bucket_mounts
from ..redaction import is_secret_flag, redact
from .server_addresses import is_local

# Addresses that name the machine the run is on: a job gets none of them (it starts its own server).
SCRIPTS_URL = "https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main"


SECRET_FLAGS = ("--hf-token", "--api-key")
# How alike (difflib's ratio) a flag's letters must be to a secret flag's to be read as its misspelling: `apikye`
# is 0.83 from `apikey`, `maxtokens` 0.62 from `hftoken`.
MISSPELT_CUTOFF = 0.75


DEFAULT_JOB_TIMEOUT = "4h"


JOB_STARTUP_S = 900


COMMAND_WIDTH = 100


JOB_COMMAND_TEMPLATE = "hf jobs uv run --flavor {flavor} --timeout {timeout} --image {image} -s HF_TOKEN {url} {args}"


def script_url(script: str) -> str:
    return f"{SCRIPTS_URL}/{script}"


def job_timeout(rows: int | None = None, pages_per_s: float | None = None) -> str:
    """An HF Jobs --timeout for the run: its measured rate with half again as margin, plus start-up; 4h when unknown.

    HF Jobs stop a job after 30 minutes unless told otherwise, which kills most real runs.
    """
    if not rows or not pages_per_s:
        return DEFAULT_JOB_TIMEOUT
    return f"{max(1, math.ceil((rows / pages_per_s * 1.5 + JOB_STARTUP_S) / 3600))}h"


def job_command(
    script: str, facts: ModelFacts, arguments: Sequence[str] = ("INPUT", "OUTPUT"), timeout: str = DEFAULT_JOB_TIMEOUT
) -> str:
    """The exact HF Jobs command that runs this script where `vllm` exists, with the model's image tag.

    It is printed and written into the card, so the token and key flags are left out (the job gets the token
    through `-s HF_TOKEN`) and any other secret in the arguments is masked. The template is read as the words of
    the shell the user pastes it into: `{args}` alone becomes the arguments, each quoted once; a word that is a
    command for a second shell (`bash -lc '... {args}'`) gets them quoted inside it and is then quoted whole, so
    a space or a `$(...)` in an argument reaches the script as it was given, at either level.
    """
    shown = [redact(arg) for arg in without_secrets(arguments)]
    fields = {"url": script_url(script), "image": facts.image, "flavor": facts.flavor, "timeout": timeout}
    words = filled_words(shlex.split(facts.job_command or JOB_COMMAND_TEMPLATE), shown, fields)
    after_run = words.index("run") + 1 if "run" in words else len(words)
    mounts = [word for spec in bucket_mounts(arguments) for word in ("-v", spec)]
    return shlex.join([*words[:after_run], *mounts, *words[after_run:]])


def filled_words(template: Sequence[str], arguments: Sequence[str], fields: Mapping[str, str]) -> list[str]:
    """A job command template's words with its fields: `{args}` alone becomes the arguments, one word each; inside
    a word (a command for a second shell) they are quoted for that shell."""
    joined = shlex.join(arguments)
    words: list[str] = []
    for word in template:
        words += list(arguments) if word == "{args}" else [word.format(args=joined, **fields)]
    return words


def image_command(facts: ModelFacts) -> tuple[str, ...]:
    """What a recipe's own job command runs in its image (for an image without uv: install it, then `uv run`),
    as a template, without the `--` that ends hf's options; empty for a recipe that `hf jobs uv run` starts."""
    if not facts.job_command:
        return ()
    words = shlex.split(facts.job_command)
    command = words[words.index("{image}") + 1 :]
    return tuple(command[1:] if command[:1] == ["--"] else command)


def command_words(command: str) -> list[str]:
    """The command's words as written, a quoted one (with its spaces) kept whole."""
    words, current, quote = [], "", None
    for char in command:
        if quote is None and char == " ":
            words, current = [*words, current] if current else words, ""
            continue
        current += char
        if char in "'\"":
            quote = None if quote == char else quote or char
    return [*words, current] if current else words


def wrapped_command(command: str, indent: str = "") -> str:
    """The command on lines that a shell joins back (each but the last ends in a backslash), broken between words
    only, so a copy of what a terminal or argparse shows still runs."""
    lines = [indent]
    for word in command_words(command):
        if lines[-1].strip() and len(lines[-1]) + 1 + len(word) > COMMAND_WIDTH:
            lines.append(f"{indent}  ")
        lines[-1] += f" {word}" if lines[-1].strip() else word
    return " \\\n".join(lines)


def ran_command(script: str, arguments: Sequence[str]) -> str:
    """The script and the arguments it ran with, as job_command writes them: secret flags left out, secrets masked."""
    return " ".join([script, *(shlex.quote(redact(arg)) for arg in without_secrets(arguments))])


def without_secrets(arguments: Sequence[str]) -> list[str]:
    """The arguments less the secret flags and their values, under any abbreviation argparse accepts (`--hf`).

    A word whose name part holds a space is a value, as argparse reads it (`--extra-serve-args "--max-num-seqs 64
    --api-key=KEY"`): judged as a flag, its secret-looking words dropped the whole value and the flag after it, and
    every job stopped at its command line. Such a word stays; the secret in it is masked and sealed (redact)."""
    kept: list[str] = []
    skip = False
    for arg in arguments:
        name, equals, _ = arg.partition("=")
        if skip:
            skip = False
        elif not any(char.isspace() for char in name) and names_secret_flag(name):
            skip = not equals
        else:
            kept.append(arg)
    return kept


def masked_secrets(words: Sequence[str]) -> list[str]:
    """The words with the value of every secret flag (or a start of one, `--api-k`) masked: argparse quotes the
    words it does not know, and a mistyped flag's value is as secret as the flag's."""
    masked: list[str] = []
    for word in words:
        name, equals, _ = word.partition("=")
        if masked and names_secret_flag(masked[-1]):
            masked.append("***")
        elif equals and names_secret_flag(name):
            masked.append(f"{name}=***")
        else:
            masked.append(word)
    return masked


def names_secret_flag(name: str) -> bool:
    """Whether a flag means a secret: a start of a secret flag (`--hf`, `--api-k`: argparse takes any unambiguous
    prefix), a secret word in it (`--apikey`, `--api_key`), or a misspelling of a secret flag (`--api-kye`,
    `--hf_tokn`), whose value the user meant as secret all the same."""
    if not name.startswith("--") or len(name) <= 2:
        return False
    spelt = letters(name)
    return (
        any(flag.startswith(name) for flag in SECRET_FLAGS)
        or is_secret_flag(name)
        or bool(difflib.get_close_matches(spelt, [letters(flag) for flag in SECRET_FLAGS], cutoff=MISSPELT_CUTOFF))
    )


def letters(flag: str) -> str:
    """A flag's letters and digits, lower case: `--API_Key` and `--api-key` are spelt alike."""
    return re.sub(r"[^a-z0-9]", "", flag.lower())


SERVER_FLAG = "--server"


def without_local_server(argv: Sequence[str]) -> list[str]:
    """The arguments less a `--server` whose every address is a loopback one."""
    kept: list[str] = []
    words = iter(argv)
    for word in words:
        name, equals, value = word.partition("=")
        if name != SERVER_FLAG:
            kept.append(word)
            continue
        value = value if equals else next(words, "")
        if not all(is_local(url.strip()) for url in value.split(",")):
            kept.extend([word] if equals else [word, value])
    return kept
