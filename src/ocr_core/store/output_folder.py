"""The folder a run writes in, made and tried before any work, and taken away again when a run that made it leaves
nothing in it but its own progress files, and no other run holds any slice of it.

A local OUTPUT that cannot be created or written (a read-only mount, a path under /proc or /sys) is a command to
change, said before the input loads: found later, it ended as an internal error whose advice, to rerun the same
command, failed the same way. For a Hub OUTPUT the folder is the local mirror of its progress (OCR_WORK_DIR).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..errors import CommandError
from .layout import FOLDER_LOCK, MANIFEST
from .lease import LocalLocks
from .output import Destination


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


def remove_unused_output(destination: Destination, locks: LocalLocks) -> None:
    """Takes away what this run wrote in a local OUTPUT it created, while it holds only this run's bookkeeping (its
    locks, the progress folder's read lock and its manifest): a run refused or stopped before its first result
    leaves no new folder behind.

    Only while this run still holds its locks and no other run holds any slice of OUTPUT: a shard that failed
    early beside another shard of the same job (which wrote the same manifest and takes the same `all` lock) takes
    nothing away, and another config's progress folder is never touched; a folder stays unless it is empty."""
    if not (destination.local and destination.created_here and destination.progress_dir.is_dir()):
        return
    if not locks.alone():
        return
    ours = own_bookkeeping(destination.progress_dir, locks)
    if ours is None:
        return
    for path in ours:
        path.unlink(missing_ok=True)
    folder = destination.progress_dir
    while folder.is_relative_to(destination.root):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
    destination.created_here = False


def own_bookkeeping(folder: Path, locks: LocalLocks) -> list[Path] | None:
    """The files of the progress folder when each is this run's bookkeeping, else None (a result, a slice, another
    shard's lock: another run was here, and its files are not this run's to take away)."""
    ours = {*locks.paths, folder / FOLDER_LOCK, folder / MANIFEST}
    found = list(folder.iterdir())
    return found if all(path in ours for path in found) else None
