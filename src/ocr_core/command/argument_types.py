"""The types of the recipe options whose text is read into a value: each refuses a wrong one at parse time (exit 2)
with the fix, as argparse does, instead of a run that fails later."""

from __future__ import annotations

import argparse

from ..errors import CommandError
from ..inputs.addresses import InputError
from ..inputs.selection import parse_shard
from ..planning.serve_flags import checked_user_flags


def columns_argument(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError("--columns needs at least one input column name, e.g. --columns id")
    return names


def shard_argument(text: str) -> tuple[int, int]:
    try:
        return parse_shard(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def serve_args_checker(vllm_pin: str | None):
    """--extra-serve-args read by the table of the vLLM the recipe pins, at parse time: a flag that release does not
    have is exit 2 naming its nearest option, not a `vllm serve` that exits minutes later."""

    def checked(text: str) -> str:
        try:
            checked_user_flags(text, vllm_pin)
        except CommandError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("--extra-serve-args").lstrip(": ")) from None
        return text

    return checked
