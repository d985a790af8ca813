"""An input cell's file paths made safe to read: under a local input's folder, or inside a Hub dataset's own files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import datasets

from .images import OutsidePath


@dataclass(frozen=True)
class HubFiles:
    """A Hub dataset's own files on this machine: its folder in the Hub cache (where `datasets` downloads the files
    an image column's paths name) and the folder `datasets` extracts downloaded archives into. Its path cells may
    name files there and nowhere else."""

    dataset: str
    roots: tuple[Path, ...]

    @classmethod
    def of(cls, name: str) -> HubFiles:
        from huggingface_hub import constants

        repo = Path(constants.HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}"
        return cls(name, (repo.resolve(), Path(datasets.config.EXTRACTED_DATASETS_PATH).resolve()))

    def confine(self, path: str) -> str | OutsidePath:
        """The path, resolved (links and `..` followed), when it lies inside the dataset's files; else the refusal
        its row fails with."""
        if path.startswith("~") or not Path(path).is_absolute():
            return OutsidePath(path, self.dataset)
        resolved = Path(os.path.realpath(path))
        inside = any(resolved.is_relative_to(root) for root in self.roots)
        return str(resolved) if inside else OutsidePath(path, self.dataset)


def anchored(cell: object, folder: Path | HubFiles | None) -> object:
    """The cell with its path made safe to read: a local input's relative path made absolute under its folder (its
    other paths are the user's own files), a Hub input's path kept only inside that dataset's files (HubFiles)."""
    if folder is None:
        return cell
    place = folder.confine if isinstance(folder, HubFiles) else lambda path: anchored_path(path, folder)
    if isinstance(cell, str) and "://" not in cell:
        return place(cell)
    if isinstance(cell, dict) and cell.get("bytes") is None and isinstance(cell.get("path"), str) and cell["path"]:
        if "://" in cell["path"]:
            return cell
        placed = place(cell["path"])
        return placed if isinstance(placed, OutsidePath) else {**cell, "path": placed}
    return cell


def anchored_path(path: str, folder: Path) -> str:
    local = Path(path).expanduser()
    return str(local if local.is_absolute() else folder / local)


def local_folder(name: str) -> Path | HubFiles:
    """The folder a local input lives in; a Hub dataset id's own files."""
    path = Path(name).expanduser()
    if not path.exists():
        return HubFiles.of(name)
    return (path if path.is_dir() else path.parent).resolve()
