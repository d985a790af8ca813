"""Which rows a run covers, in which order, under which stable ids; and shard I of N: its contiguous range of the
selected rows (store/layout.py spells it in file names)."""

from __future__ import annotations

import random

import datasets

from .addresses import InputError


def select_rows(total: int, max_samples: int | None, shuffle: bool, seed: int) -> list[int]:
    """Row positions in output order; a seeded shuffle picks the same subset every time."""
    order = list(range(total))
    if shuffle:
        random.Random(seed).shuffle(order)
    return order[:max_samples] if max_samples is not None else order


def row_ids(dataset: datasets.Dataset, split: str, selected: list[int], id_column: str | None) -> list[str]:
    if id_column is None:
        return [f"{split}-{index}" for index in selected]
    values = dataset.select_columns([id_column])[id_column]
    ids = [str(values[index]) for index in selected]
    if len(set(ids)) != len(ids):
        raise InputError(f"--id-column {id_column!r} has duplicate values; pick a column that is unique per row")
    return ids


def shard_span(count: int, shard: tuple[int, int] | None) -> range:
    """Shard I of N owns the I-th of N contiguous, balanced ranges of the selected rows, so the shards' outputs
    concatenated in shard order are the input order, and a shard reads only its stretch of the input."""
    if shard is None:
        return range(count)
    index, total = shard
    return range(count * index // total, count * (index + 1) // total)


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` with 0 <= I < N, as given to --shard."""
    index, _, count = text.partition("/")
    try:
        shard = int(index), int(count)
    except ValueError:
        raise InputError(f"--shard {text!r} is not I/N (for example --shard 0/4)") from None
    if not 0 <= shard[0] < shard[1]:
        raise InputError(f"--shard {text!r}: I must be at least 0 and below N")
    return shard
