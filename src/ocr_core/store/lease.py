"""One run at a time per slice of an output: a second run of the same command stops instead of redoing every page.

On one machine, runs take flock locks in the progress folder (the kernel releases them however a run ends): a
whole run holds `all` exclusively; a shard holds `all` shared and its own shard exclusively, so shards of one job
run side by side. Across machines, a run writes a lease file to the Hub (host, pid, start, expiry), renews it with
every progress upload and removes it at the end; a run that finds a live lease of another run on an overlapping
slice stops with a message. Two runs started at once both write theirs; once its own commit is in, each reads the
repo's history, and the run whose lease landed first goes on while the others step back. A lease left by a killed
job expires, or `--take-over` ignores it; a lease names its HF job, so the relaunch of a job known to have ended
(`--take-over-job`, which the `--jobs` launcher gives) takes over that job's lease and no other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from ..errors import CommandError
from .layout import lease_file_name, lease_lock_name

WHOLE = "all"
# The --jobs launcher's lease (fanout/launcher_lease.py): it holds no rows, so it overlaps only another launcher's.
LAUNCHER = "launcher"
MIN_LEASE_S = 900.0


class LeaseTaken(RuntimeError):
    """Another run is writing the same slice of this output; the message says which, and what to do."""


class RunningHere(CommandError, RuntimeError):
    """The same command (the same slice of this output) is running on this machine now: a lock is held only by a
    live process, so the fix is the user's, to wait for that run or stop it (exit 2)."""


def lease_key(shard: tuple[int, int] | None) -> str:
    return WHOLE if shard is None else f"{shard[0]}-of-{shard[1]}"


def overlaps(first: str, second: str) -> bool:
    """Whether two slices can hold the same rows: the whole run overlaps everything; shards of one N do not; a
    launcher's lease overlaps only a launcher's."""
    if LAUNCHER in (first, second):
        return first == second
    if WHOLE in (first, second) or first == second:
        return True
    return first.split("-of-")[1] != second.split("-of-")[1]


@dataclass(frozen=True)
class Lease:
    """`job`: the HF job the run is (its JOB_ID), so a relaunch that knows that job ended may take its lease over."""

    run_id: str
    key: str
    host: str
    pid: int
    started: float
    expires: float
    job: str | None = None

    @classmethod
    def new(cls, run_id: str, key: str, ttl_s: float) -> Lease:
        now = time.time()
        return cls(run_id, key, socket.gethostname(), os.getpid(), now, now + ttl_s, os.environ.get("JOB_ID") or None)

    @property
    def file_name(self) -> str:
        return lease_file_name(self.key, self.run_id)

    def renewed(self, ttl_s: float) -> Lease:
        return replace(self, expires=time.time() + ttl_s)

    def describe(self) -> str:
        started = datetime.fromtimestamp(self.started, timezone.utc).isoformat(timespec="seconds")
        expires = datetime.fromtimestamp(self.expires, timezone.utc).isoformat(timespec="seconds")
        job = f"HF job {self.job}, " if self.job else ""
        where = f"{job}pid {self.pid} on {self.host}, slice {self.key}"
        return f"run {self.run_id} ({where}, since {started}, expires {expires})"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Lease:
        """A field this version does not know (written by a later one) is passed over, not the lease."""
        known = {item.name for item in fields(cls)}
        return cls(**{name: value for name, value in json.loads(text).items() if name in known})


def lease_ttl(upload_every_s: float) -> float:
    """Three missed renewals before a lease counts as abandoned."""
    return max(MIN_LEASE_S, 3 * upload_every_s)


def conflicts(leases: list[Lease], mine: Lease, now: float, ended_jobs: Collection[str] = ()) -> list[Lease]:
    """Live leases of other runs on a slice that overlaps mine, earliest first; `ended_jobs` are HF jobs known to
    have ended (a relaunch's earlier jobs), whose leases, left by a hard kill, no longer hold anything."""
    others = [
        lease for lease in leases if lease.run_id != mine.run_id and lease.expires > now and lease.job not in ended_jobs
    ]
    return sorted((lease for lease in others if overlaps(lease.key, mine.key)), key=lambda lease: lease.started)


def lease_commit_title(lease: Lease) -> str:
    """The title of the commit that first puts a lease on the Hub: naming the file, it dates the lease in the
    repo's history."""
    return f"OCR progress: lease {lease.file_name}"


def first_landed(leases: list[Lease], titles: list[str]) -> Lease:
    """Of runs whose leases overlap, the one whose lease reached the Hub first wins, whatever their start times
    and however their commits crossed: every run reads the same history, so all agree, and a run that found no
    rival after its commit has the earliest lease. A lease whose commit is not in the history (written by an
    older version) counts as earliest; ties go by start time, then run id."""
    position: dict[str, int] = {}
    for index, title in enumerate(titles):
        position.setdefault(title, index)  # a commit retried after a lost answer lands twice; the first counts
    return min(leases, key=lambda lease: (position.get(lease_commit_title(lease), -1), lease.started, lease.run_id))


def taken_message(holder: str, where: str) -> str:
    return (
        f"another run is writing {where}: {holder}. Running both would do every page twice. Wait for it to end or "
        "stop it; if it was killed and cannot release its lease, pass --take-over."
    )


def running_here_message(holder: str, where: str) -> str:
    pid = holder.split()[1] if holder.startswith("pid ") else None
    stop = f" or stop it (kill {pid})" if pid else " or stop it"
    return (
        f"another run of this command is working on it: {holder}, writing {where}. Running both would do every page "
        f"twice. Wait for it to end{stop}; rerunning afterwards resumes where it stopped."
    )


def locked_file(path: Path, mode: int) -> IO[str] | str:
    """The lock file at `path`, open and locked in `mode`; or, when a live run holds it, what that run wrote in it.

    A run that finds itself alone on an output it created removes its lock files (output_folder.py), so a lock
    taken on a file that was unlinked meanwhile locks nothing: the file is opened again until the lock is on the one
    the path names, and a refusal counts only while the path still names the file that refused."""
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            current = same_file(handle, path)
            handle.close()
            if current:
                return holder
            continue
        if same_file(handle, path):
            return handle
        handle.close()


def same_file(handle: IO[str], path: Path) -> bool:
    try:
        found = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(handle.fileno())
    return (found.st_dev, found.st_ino) == (mine.st_dev, mine.st_ino)


class LocalLocks:
    """The flock locks that keep two runs on this machine off one slice of a progress folder."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder = folder
        self.key = key
        self.handles: list[IO[str]] = []

    def acquire(self, where: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        wanted = [(WHOLE, fcntl.LOCK_EX)] if self.key == WHOLE else [(WHOLE, fcntl.LOCK_SH), (self.key, fcntl.LOCK_EX)]
        for name, mode in wanted:
            handle = locked_file(self.lock_path(name), mode)
            if isinstance(handle, str):
                self.release()
                raise RunningHere(running_here_message(handle or "a run on this machine", where))
            if mode == fcntl.LOCK_EX:
                handle.truncate(0)
                handle.write(f"pid {os.getpid()} on {socket.gethostname()}, slice {self.key}")
                handle.flush()
            self.handles.append(handle)

    def lock_path(self, name: str) -> Path:
        return self.folder / lease_lock_name(name)

    @property
    def paths(self) -> list[Path]:
        """The lock files this run holds (`all`, and a shard's own)."""
        return [self.lock_path(name) for name in dict.fromkeys([WHOLE, self.key])]

    @contextlib.contextmanager
    def whole(self, where: str) -> Iterator[None]:
        """The whole output to this run alone for a moment (to delete every slice's results): a shard's shared hold
        on it is converted to an exclusive one, and back."""
        handle = self.handles[0]
        if self.key != WHOLE:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LeaseTaken(taken_message("another shard's run on this machine", where)) from None
        try:
            yield
        finally:
            if self.key != WHOLE:
                fcntl.flock(handle, fcntl.LOCK_SH)

    def alone(self) -> bool:
        """Whether this run holds the whole output alone now (no other run holds any slice of it on this machine):
        a shard's shared hold on `all` becomes exclusive, for good; it stays so until release."""
        if self.key == WHOLE:
            return bool(self.handles)
        try:
            fcntl.flock(self.handles[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def release(self) -> None:
        for handle in self.handles:
            with contextlib.suppress(OSError):
                handle.close()
        self.handles = []
