"""Keeps the progress folder compact and, for a Hub output, mirrored, from a background thread.

Every cycle it merges parts that piled up; every `upload_every_s` it commits to the Hub what changed since the last
commit (new files, files merged away) with the run's renewed lease. The driver only hands it paths, so it never
waits on the disk or the Hub; a failed upload keeps its changes for the next cycle and the final one at close. With
--create-pr the progress still goes to the main branch (only the finished dataset is a pull request): that is where
a rerun on a fresh machine looks for it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from .compaction import compact
from .lease import Lease, lease_ttl
from .output import Destination
from .report import say

COMPACT_EVERY_S = 60.0


class ProgressMirror:
    def __init__(self, destination: Destination, upload_every_s: float, lease: Lease | None = None) -> None:
        self.destination = destination
        self.upload_every_s = upload_every_s
        self.lease = lease
        self.added: set[Path] = set()
        self.removed: set[str] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="progress-mirror", daemon=True)
        self.last_upload = time.monotonic()

    def start(self) -> None:
        self.thread.start()

    def add(self, part: Path) -> None:
        """Called from the driver for every part it writes."""
        with self.lock:
            self.added.add(part)

    def loop(self) -> None:
        while not self.stopping.wait(min(COMPACT_EVERY_S, self.upload_every_s)):
            try:
                self.compact()
                if not self.destination.local and time.monotonic() - self.last_upload >= self.upload_every_s:
                    self.upload(final=False)
            except Exception as exc:
                say(f"progress upkeep failed, will retry: {type(exc).__name__}: {exc}")

    def compact(self) -> None:
        written, removed = compact(self.destination.progress_dir)
        with self.lock:
            self.added = {path for path in self.added if path.name not in removed} | set(written)
            self.removed |= {f"{self.destination.progress_prefix}/{name}" for name in removed}

    def upload(self, final: bool) -> None:
        """One commit: new files, files merged away, and the lease (renewed, or removed at the end)."""
        self.last_upload = time.monotonic()
        with self.lock:
            added, removed = set(self.added), set(self.removed)
        files = {self.destination.in_repo(path): path for path in added}
        if self.lease is not None:
            lease_name = f"{self.destination.progress_prefix}/{self.lease.file_name}"
            if final:
                removed.add(lease_name)
            else:
                self.lease = self.lease.renewed(lease_ttl(self.upload_every_s))
                files[lease_name] = write_lease(self.destination, self.lease)
        started = time.monotonic()
        self.destination.push(files, sorted(removed), f"OCR progress: {len(added)} file(s) in, {len(removed)} out")
        with self.lock:
            self.added -= added
            self.removed -= removed
        if final and added:
            say(f"uploaded {len(added)} progress file(s) in {time.monotonic() - started:.1f} s")

    def close(self) -> None:
        """Stops the thread, then merges and uploads what is left; raises if the Hub stays unreachable."""
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        self.compact()
        if not self.destination.local:
            self.upload(final=True)
        if self.lease is not None:
            (self.destination.progress_dir / self.lease.file_name).unlink(missing_ok=True)


def write_lease(destination: Destination, lease: Lease) -> Path:
    path = destination.progress_dir / lease.file_name
    path.write_text(lease.to_json())
    return path
