"""The input side: which rows a run covers, in which order, under which stable ids.

Rows are addressed by position in the split, so a rerun, a shard or a shuffled subset all name a page the same
way, and image bytes are read a batch at a time only for pages that still need work. A local dataset's relative
image paths name files beside the dataset, so they are anchored to its folder here, not to the working folder.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import datasets

READ_BATCH = 64


class InputError(ValueError):
    """The input cannot be used as asked; the message says how to fix the command."""


@dataclass(frozen=True)
class RowInput:
    index: int
    row_id: str
    cell: object


@dataclass
class Source:
    name: str
    split: str
    dataset: datasets.Dataset
    features: datasets.Features
    image_column: str
    selected: list[int]
    ids: list[str]
    shard: tuple[int, int] | None = None
    folder: Path | None = None

    def owned(self) -> list[str]:
        """The selected ids this job processes: all of them, or its shard's."""
        return [row_id for row_id in self.ids if in_shard(row_id, self.shard)]

    def rows(self, skip: set[str]) -> Iterator[RowInput]:
        """Yields this job's selected rows still to do, reading image cells a batch at a time."""
        todo = [
            (index, row_id)
            for index, row_id in zip(self.selected, self.ids)
            if row_id not in skip and in_shard(row_id, self.shard)
        ]
        for start in range(0, len(todo), READ_BATCH):
            batch = todo[start : start + READ_BATCH]
            cells = self.dataset[[index for index, _ in batch]][self.image_column]
            for (index, row_id), cell in zip(batch, cells):
                yield RowInput(index, row_id, anchored(cell, self.folder))


def in_shard(row_id: str, shard: tuple[int, int] | None) -> bool:
    """A stable hash of the row id picks its shard, so any selection splits the same way on every machine."""
    return shard is None or zlib.crc32(row_id.encode()) % shard[1] == shard[0]


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


def anchored(cell: object, folder: Path | None) -> object:
    """The cell with a relative image path made absolute under `folder` (a local input's folder; None for the Hub)."""
    if folder is None:
        return cell
    if isinstance(cell, str):
        return anchored_path(cell, folder)
    if isinstance(cell, dict) and cell.get("bytes") is None and isinstance(cell.get("path"), str) and cell["path"]:
        return {**cell, "path": anchored_path(cell["path"], folder)}
    return cell


def anchored_path(path: str, folder: Path) -> str:
    if "://" in path:
        return path
    local = Path(path).expanduser()
    return str(local if local.is_absolute() else folder / local)


def local_folder(name: str) -> Path | None:
    """The folder a local input lives in; None for a Hub dataset id."""
    path = Path(name).expanduser()
    if not path.exists():
        return None
    return (path if path.is_dir() else path.parent).resolve()


def open_dataset(name: str, split: str, config: str | None, revision: str | None = None) -> datasets.Dataset:
    """A local `save_to_disk` folder, a local data folder, or a Hub dataset id."""
    path = Path(name).expanduser()
    if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise InputError(f"{name} has no split {split!r}; it has {sorted(loaded)} (pass --split)")
            return loaded[split]
        return loaded
    try:
        if path.exists():
            return datasets.load_dataset(str(path), name=config, split=split)
        return datasets.load_dataset(name, name=config, split=split, revision=revision)
    except ValueError as exc:
        if "split" in str(exc).lower():
            raise InputError(f"{name}: {exc} (pass --split)") from exc
        raise


def load_source(
    name: str,
    split: str = "train",
    image_column: str = "image",
    config: str | None = None,
    id_column: str | None = None,
    max_samples: int | None = None,
    shuffle: bool = False,
    seed: int = 42,
    shard: tuple[int, int] | None = None,
    revision: str | None = None,
) -> Source:
    dataset = open_dataset(name, split, config, revision)
    for column in (image_column, id_column):
        if column and column not in dataset.column_names:
            raise InputError(
                f"{name} has no column {column!r}; its columns are {dataset.column_names} "
                "(pass --image-column / --id-column)"
            )
    features = dataset.features.copy()
    if isinstance(features[image_column], datasets.Image):
        dataset = dataset.cast_column(image_column, datasets.Image(decode=False))
    selected = select_rows(len(dataset), max_samples, shuffle, seed)
    ids = row_ids(dataset, split, selected, id_column)
    return Source(name, split, dataset, features, image_column, selected, ids, shard, local_folder(name))


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
