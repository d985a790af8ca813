"""Every name and path in OUTPUT, and in its `.ocr-progress/` folder, in one place.

A local folder and a Hub dataset repo keep the same layout, so resuming, publishing and reading back are one code
path; CONTRACT.md states it for programs that do not import this project, and tests/test_contract.py holds the two
together. Paths inside OUTPUT, with `<tag>` a shard's `shard-<I>-of-<N>-` (empty for an unsharded run):
  README.md                                                   the dataset card
  <data prefix>/<split>-<I>-of-<N>-<part><suffix>             shard I's rows of the final dataset, in input order
  .ocr-progress/<config>/<split>/manifest.json                what the results depend on (manifest.py)
  .ocr-progress/<config>/<split>/part-<tag><run>-<seq>.parquet  results as they come (progress.py)
  .ocr-progress/<config>/<split>/merged-<tag><run>.parquet      parts merged as they pile up (compaction.py)
  .ocr-progress/<config>/<split>/lease-<key>-<run>.json         which run writes them now (lease.py)
  .ocr-progress/<config>/<split>/slice-<I>-of-<N>.json          each published shard's figures (slices.py)
Nothing else in OUTPUT is ours, and a config's data files are ours only when its progress folder has a manifest:
anything else makes OUTPUT foreign, and publishing there needs --overwrite.

The data files are written by a SliceWriter; the parquet one is the only one. A second format (JSONL, Markdown
per page) is one class with the same three members, named here as SLICE_WRITER; its suffix then names the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, Protocol

import pyarrow as pa

from .parquet_writer import ParquetSliceWriter

PROGRESS_ROOT = ".ocr-progress"
CARD = "README.md"
HUB_OWN_FILES = (CARD, ".gitattributes")
MANIFEST = "manifest.json"
DEFAULT_CONFIG = "default"
DEFAULT_DATA_PREFIX = "data"
PART = "part-"
MERGED = "merged-"
PROGRESS_SUFFIX = ".parquet"
PROGRESS_GLOB = f"*{PROGRESS_SUFFIX}"
LEASE_PREFIX = "lease-"
SLICE_FACTS_PREFIX = "slice-"
FOLDER_LOCK = ".folder.lock"
SET_ASIDE_SUFFIX = ".unreadable"


class SliceWriter(Protocol):
    """Writes one data file of a published slice, a batch of rows at a time, so memory holds one batch."""

    suffix: ClassVar[str]

    @classmethod
    def open(cls, path: Path, schema: pa.Schema) -> SliceWriter: ...

    def write(self, rows: pa.Table) -> None: ...

    def close(self) -> None: ...


SLICE_WRITER: type[SliceWriter] = ParquetSliceWriter


def shard_label(shard: tuple[int, int]) -> str:
    """Shard I of N as file names spell it, zero-padded so that names sort in shard order: `00001-of-00004`."""
    return f"{shard[0]:05d}-of-{shard[1]:05d}"


def config_name(config: str | None) -> str:
    return config or DEFAULT_CONFIG


def data_prefix(config: str | None) -> str:
    """The folder of a config's data files: `data` for the default config, else the config's name."""
    return config or DEFAULT_DATA_PREFIX


def progress_prefix(config: str | None, split: str) -> str:
    return f"{PROGRESS_ROOT}/{config_name(config)}/{split}"


def shard_tag(shard: tuple[int, int] | None) -> str:
    """How a run's progress files begin after `part-` or `merged-`: a shard's own tag, so a shard fetches and
    merges only its own files; empty for an unsharded run, which owns them all."""
    return "" if shard is None else f"shard-{shard_label(shard)}-"


def part_name(run_id: str, sequence: int) -> str:
    """A run's `sequence`-th part; `run_id` begins with the run's shard tag."""
    return f"{PART}{run_id}-{sequence:05d}{PROGRESS_SUFFIX}"


def merged_name(tag: str, run_id: str) -> str:
    return f"{MERGED}{tag}{run_id}{PROGRESS_SUFFIX}"


def is_own_progress_file(name: str, tag: str) -> bool:
    """Whether a progress file is one that a run with this shard tag merges (every one for tag "")."""
    return name.startswith((f"{PART}{tag}", f"{MERGED}{tag}")) and name.endswith(PROGRESS_SUFFIX)


def progress_fetch_globs(tag: str) -> list[str]:
    """The progress files a run with this tag fetches: its own, and untagged ones (an unsharded run's, which may
    hold any row); another shard's never."""
    globs = [f"{kind}{tag}*{PROGRESS_SUFFIX}" for kind in (PART, MERGED)]
    if tag:
        globs += [f"{kind}[0-9]*{PROGRESS_SUFFIX}" for kind in (PART, MERGED)]
    return globs


def shard_progress_pattern(prefix: str, shards: int) -> re.Pattern[str]:
    """The progress files of shards of this N in the repo; group 1 is the shard's index."""
    kinds = "|".join(re.escape(kind.removesuffix("-")) for kind in (PART, MERGED))
    return re.compile(
        rf"{re.escape(prefix)}/(?:{kinds})-shard-(\d{{5}})-of-{shards:05d}-[^/]*{re.escape(PROGRESS_SUFFIX)}"
    )


def split_data_prefix(prefix: str, split: str) -> str:
    """How every data file of a split begins in the repo."""
    return f"{prefix}/{split}-"


def split_data_glob(prefix: str, split: str) -> str:
    return f"{split_data_prefix(prefix, split)}*"


def data_file_name(prefix: str, split: str, shard: tuple[int, int], part: int) -> str:
    """Zero-padded, so the names sort in shard order and within a shard in part order, and `load_dataset` over
    `<prefix>/<split>-*` reads the union of the finished shards in input order."""
    return f"{split_data_prefix(prefix, split)}{shard_label(shard)}-{part:05d}{SLICE_WRITER.suffix}"


def shard_data_prefix(prefix: str, split: str, shard: tuple[int, int]) -> str:
    return f"{split_data_prefix(prefix, split)}{shard_label(shard)}-"


def cut_into(prefix: str, split: str, shards: int) -> re.Pattern[str]:
    """The data files of a split cut into this many shards."""
    suffix = re.escape(SLICE_WRITER.suffix)
    return re.compile(re.escape(split_data_prefix(prefix, split)) + rf"\d{{5}}-of-{shards:05d}-\d{{5}}{suffix}")


DATA_FILE = re.compile(rf"[^/]+-\d{{5}}-of-\d{{5}}(-\d{{5}})?{re.escape(SLICE_WRITER.suffix)}")
"""A data file's name inside its config's folder (files of an earlier layout carry no part number)."""


def slice_facts_name(shard: tuple[int, int]) -> str:
    return f"{SLICE_FACTS_PREFIX}{shard_label(shard)}.json"


def is_slice_facts_of(name: str, prefix: str, shards: int) -> bool:
    """Whether a repo path is the facts file of a shard of this N."""
    return name.startswith(f"{prefix}/{SLICE_FACTS_PREFIX}") and name.endswith(f"-of-{shards:05d}.json")


def lease_file_name(key: str, run_id: str) -> str:
    return f"{LEASE_PREFIX}{key}-{run_id}.json"


def lease_files_of(key: str) -> str:
    """How the lease files of every run holding this key begin."""
    return f"{LEASE_PREFIX}{key}-"


def lease_lock_name(key: str) -> str:
    """The local lock file of a slice key (flock, never uploaded)."""
    return f".{LEASE_PREFIX}{key}.lock"


def owned_configs(names: Iterable[str]) -> set[str]:
    """Configs whose progress folder holds a manifest: this tool wrote them."""
    return {
        parts[1]
        for parts in (name.split("/") for name in names)
        if len(parts) == 4 and parts[0] == PROGRESS_ROOT and parts[3] == MANIFEST
    }


def foreign_files(names: Iterable[str], owned: set[str]) -> list[str]:
    """Files in OUTPUT that no run of ours wrote."""
    prefixes = {data_prefix(None if config == DEFAULT_CONFIG else config) for config in owned}
    foreign = []
    for name in names:
        folder, _, rest = name.partition("/")
        if name in HUB_OWN_FILES or folder == PROGRESS_ROOT or (folder in prefixes and DATA_FILE.fullmatch(rest)):
            continue
        foreign.append(name)
    return sorted(foreign)
