"""One launcher at a time per output: the `--jobs` launcher's lease on the output repo, taken before it settles the
output or launches anything, renewed while it watches, removed when it ends or detaches.

The cap (`--max-parallel-jobs K`) counts the run's jobs that the Jobs listing shows running, whoever launched them,
but a listing says what ran a moment ago: two launchers of one run (the same command in two terminals, or on two
machines) that poll at once both see room, and each launches the same queued shards, so together they run up to
2K jobs and pay twice for every shard they both start. So the launcher takes a lease as a run does (lease.py), under
the key LAUNCHER, which overlaps only another launcher's: the second launcher stops at start (exit 1) naming the
first, and a launcher whose lease another took over while it slept steps back at its next renewal. A launcher killed
hard leaves its lease until it expires; `--take-over` passes over it. A local OUTPUT has no lease on the Hub (its
jobs run on this machine, one launcher's), so it takes none.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..console import say
from ..settings import Settings
from ..store.lease import LAUNCHER, MIN_LEASE_S, Lease, LeaseTaken, first_landed, lease_commit_title
from ..store.output import Destination
from ..store.progress import new_run_id


@dataclass
class LauncherLease:
    """This launcher's lease on `destination` (None: a local output, or none taken), renewed past half its life."""

    destination: Destination
    lease: Lease | None = None

    def renew(self, take_over: bool) -> None:
        """Renews the lease once half its life has gone; steps back (LeaseTaken) when another launcher holds one
        now (this one's expired while it could not renew, a laptop asleep, and another took the run over)."""
        if self.lease is None or self.lease.expires - time.time() > MIN_LEASE_S / 2:
            return
        rivals = [] if take_over else live_launchers(self.destination, self.lease)
        if rivals:
            self.release()
            raise LeaseTaken(second_launcher_message(rivals[0], self.destination))
        self.lease = self.lease.renewed(MIN_LEASE_S)
        self.push("OCR launcher: lease renewed")

    def release(self) -> None:
        if self.lease is not None:
            gone = self.destination.in_progress(self.lease.file_name)
            self.destination.push({}, [gone], "OCR launcher: lease released")
            self.lease = None

    def let_go(self) -> None:
        """The lease released as the launcher ends, however it ends; a Hub that refuses now leaves it to expire."""
        try:
            self.release()
        except Exception as exc:
            say(
                f"note: the launcher's lease stays on the output until it expires ({type(exc).__name__}: {exc}); "
                "the same command with --take-over re-attaches before then"
            )

    def push(self, title: str) -> None:
        """The lease's file, written in a folder of its own: the launcher keeps no copy of the output here."""
        assert self.lease is not None
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / self.lease.file_name
            path.write_text(self.lease.to_json())
            self.destination.push({self.destination.in_progress(path.name): path}, [], title)


def take_launcher_lease(destination: Destination, settings: Settings) -> LauncherLease:
    """The output to this launcher alone: refused (LeaseTaken, exit 1) while another launcher's lease is live,
    unless --take-over; of launchers started at once, the one whose lease landed first goes on."""
    held = LauncherLease(destination)
    if destination.local:
        return held
    lease = Lease.new(new_run_id(), LAUNCHER, MIN_LEASE_S)
    rivals = [] if settings.take_over else live_launchers(destination, lease)
    if rivals:
        raise LeaseTaken(second_launcher_message(rivals[0], destination))
    held.lease = lease
    held.push(lease_commit_title(lease))
    rivals = [] if settings.take_over else live_launchers(destination, lease)
    if rivals and first_landed([lease, *rivals], destination.commit_titles()) is not lease:
        held.release()
        raise LeaseTaken(second_launcher_message(first_landed(rivals, destination.commit_titles()), destination))
    return held


def live_launchers(destination: Destination, mine: Lease) -> list[Lease]:
    """The live launcher leases on the output other than `mine`, earliest first."""
    now = time.time()
    leases = destination.leases(destination.listing())
    others = [lease for lease in leases if lease.key == LAUNCHER and lease.run_id != mine.run_id]
    return sorted((lease for lease in others if lease.expires > now), key=lambda lease: lease.started)


def second_launcher_message(holder: Lease, destination: Destination) -> str:
    started, expires = (
        datetime.fromtimestamp(moment, timezone.utc).isoformat(timespec="seconds")
        for moment in (holder.started, holder.expires)
    )
    return (
        f"another --jobs launcher is watching {destination.where()}: pid {holder.pid} on {holder.host}, since "
        f"{started}. Two launchers would each launch the queued shards, paying twice for them and running more jobs "
        "than --max-parallel-jobs; let that one watch, or stop it (Ctrl-C detaches it, its jobs run on) and run "
        f"this command again; if it was killed, its lease expires at {expires}, or pass --take-over."
    )
