"""Keeps the progress folder compact and, for a Hub output, mirrored, from a background thread.

It runs for the whole job. From before the input is loaded until the manifest is written, and again from the end
of the driving until the run releases its slice (publishing), it only renews the run's lease, so a long input
load or publish never lets the lease lapse. In between, every cycle it merges parts that
piled up; every `upload_every_s` it makes the Hub hold what the folder holds: one commit adds every local file the
Hub lacks, deletes the files merged away, and renews the run's lease. What to upload is read from the folder and
the Hub's listing each time, never kept in memory, so nothing a crash, a failed upload or an earlier run left
behind on this machine stays off the Hub. Before each commit it checks that the Hub's manifest is still this run's:
if another run replaced it (an --overwrite with other settings), it uploads nothing more and the run fails at the
end instead of mixing two jobs' text. With --create-pr the progress still goes to the main branch (only the
finished dataset is a pull request): that is where a rerun on a fresh machine looks for it.

A stage above may hand it a rider (`carry`): files that go in the commits it makes anyway (the lease's renewal
makes one every upload), such as the card's live progress, so that they cost the repo no commits of their own (the
Hub limits a repo's commits per hour). A rider never raises: what it cannot make, it leaves out, and the parts go
up all the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..console import say
from ..errors import JobFailed
from .compaction import compact
from .lease import Lease, lease_ttl
from .output import Destination
from .progress import part_files

COMPACT_EVERY_S = 60.0
Rider = Callable[[Sequence[str], bool], Mapping[str, Path]]
"""Files for the next progress commit, given the Hub's listing and whether it is the drive's last upload."""


class ProgressMirror:
    def __init__(
        self, destination: Destination, upload_every_s: float, manifest: dict | None, lease: Lease | None = None
    ) -> None:
        """`manifest` None: the lease alone is kept alive until `begin` says the results' manifest is written."""
        self.destination = destination
        self.upload_every_s = upload_every_s
        self.manifest = manifest
        self.lease = lease
        self.removed: set[str] = set()
        self.replaced: str | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="progress-mirror", daemon=True)
        self.last_upload = time.monotonic()
        self.rider: Rider | None = None

    @property
    def mirrored(self) -> bool:
        return self.destination.mirror_progress

    def start(self) -> None:
        self.thread.start()

    def carry(self, rider: Rider) -> None:
        """From now on each upload of the parts also carries what `rider` gives."""
        self.rider = rider

    def begin(self, manifest: dict) -> None:
        """The manifest is at OUTPUT now: from here on the parts are merged and mirrored too."""
        self.manifest = manifest

    def loop(self) -> None:
        while not self.stopping.wait(min(COMPACT_EVERY_S, self.upload_every_s)):
            try:
                if self.manifest is not None:
                    self.compact()
                if self.mirrored and time.monotonic() - self.last_upload >= self.upload_every_s:
                    self.upload()
            except Exception as exc:
                say(f"progress upkeep failed, will retry: {type(exc).__name__}: {exc}")

    def compact(self) -> None:
        for names in compact(self.destination.progress_dir, self.destination.slice_tag):
            self.removed |= {self.destination.in_progress(name) for name in names}

    def upload(self, final: bool = False) -> None:
        """One commit that makes the Hub hold what the folder holds, with the lease renewed and the rider's files
        (the lease alone while there is no manifest to check the parts against); `final`: the drive has ended."""
        self.last_upload = time.monotonic()
        if self.replaced is not None:
            return
        if self.manifest is None:
            self.renew_lease()
            return
        listing = set(self.destination.listing())
        self.replaced = self.destination.replaced_by_another_run(self.manifest, listing)
        if self.replaced is not None:
            say(f"error: {self.replaced}")
            return
        files = {self.destination.in_repo(path): path for path in part_files(self.destination.progress_dir)}
        files = {name: path for name, path in files.items() if name not in listing}
        removed = sorted(self.removed & listing)
        if self.lease is not None:
            self.lease = self.lease.renewed(lease_ttl(self.upload_every_s))
            name, path = self.destination.lease_file(self.lease)
            files[name] = path
        counted = len(files)
        if self.rider is not None and (files or removed):
            files.update(self.rider(sorted(listing), final))
        started = time.monotonic()
        self.destination.push(files, removed, f"OCR progress: {len(files)} file(s) in, {len(removed)} out")
        self.removed -= set(removed)
        if counted > 1:
            say(f"mirrored {counted} progress file(s) in {time.monotonic() - started:.1f} s")

    def renew_lease(self) -> None:
        if self.lease is None:
            return
        self.lease = self.lease.renewed(lease_ttl(self.upload_every_s))
        name, path = self.destination.lease_file(self.lease)
        self.destination.push({name: path}, [], "OCR progress: lease renewed")

    def close(self) -> None:
        """Stops the thread, then merges and uploads what is left; raises if the Hub stays unreachable, or if
        another run replaced the results meanwhile. Then only the lease is kept alive, while the run publishes,
        until `stop`."""
        self.stop()
        self.compact()
        if self.mirrored:
            self.upload(final=True)
        if self.replaced is not None:
            raise JobFailed(self.replaced)
        self.manifest = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="lease-keeper", daemon=True)
        self.start()

    def stop(self) -> None:
        """Stops the thread, uploading nothing more: before the run removes its lease, so no renewal follows."""
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
