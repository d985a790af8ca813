"""The folder a run writes in, made and tried before any work, and taken away again when a run that made it leaves
nothing in it but its own progress files.

A local OUTPUT that cannot be created or written (a read-only mount, a path under /proc or /sys) is a command to
change, said before the input loads: found later, it ended as an internal error whose advice, to rerun the same
command, failed the same way. For a Hub OUTPUT the folder is the local mirror of its progress (OCR_WORK_DIR).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..errors import CommandError
from .lease import LEASE_PREFIX
from .manifest import MANIFEST
from .output import PROGRESS_ROOT, Destination
from .progress import FOLDER_LOCK


class OutputError(CommandError):
    """OUTPUT (or the folder that mirrors a Hub OUTPUT's progress) cannot be written on this machine."""


def make_output_folder(destination: Destination) -> None:
    """Creates the progress folder (and OUTPUT itself, for a local one) and writes a file there once, so an OUTPUT
    that cannot take the results is refused now; notes on `destination` whether this run created OUTPUT."""
    created = destination.local and not destination.root.exists()
    try:
        destination.progress_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=destination.progress_dir):
            pass
    except OSError as exc:
        raise OutputError(unwritable_message(destination, exc)) from exc
    destination.created_here = created


def unwritable_message(destination: Destination, exc: OSError) -> str:
    reason = exc.strerror or type(exc).__name__
    where = f": {exc.filename}" if exc.filename else ""
    if destination.local:
        return (
            f"OUTPUT {destination.spec!r} cannot be created or written here ({reason}{where}); choose a writable "
            "folder for the results, e.g. ./scans-ocr"
        )
    return (
        f"the folder that keeps this run's progress for {destination.spec}, {destination.root}, cannot be created or "
        f"written ({reason}{where}); point OCR_WORK_DIR at a writable folder"
    )


def remove_unused_output(destination: Destination) -> None:
    """Takes away a local OUTPUT this run created, when it holds nothing but this run's own progress files (its
    locks and its manifest): a run refused or stopped before its first result leaves no new folder behind."""
    if not (destination.local and destination.created_here and destination.root.is_dir()):
        return
    files = [path.relative_to(destination.root) for path in destination.root.rglob("*") if not path.is_dir()]
    if all(only_progress_bookkeeping(path) for path in files):
        shutil.rmtree(destination.root, ignore_errors=True)
        destination.created_here = False


def only_progress_bookkeeping(path: Path) -> bool:
    """A lock file or a manifest in the progress folder: what a run writes before its first result."""
    name = path.name
    is_lock = name == FOLDER_LOCK or (name.startswith(f".{LEASE_PREFIX}") and name.endswith(".lock"))
    return path.parts[0] == PROGRESS_ROOT and (is_lock or name == MANIFEST)
