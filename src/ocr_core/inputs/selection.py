"""Which rows a run covers, in which order, under which stable ids."""

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
