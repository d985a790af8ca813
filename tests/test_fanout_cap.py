"""`--jobs N --max-parallel-jobs K`: N shards, at most K jobs running, the next launched as one ends (issue 50);
one launcher at a time per output, so two of one run never pass the cap together.

A user with a quota of a few GPUs cuts a large input into many small shards that retry cheaply: the launcher holds
the rest queued, a relaunch of a failed shard waits its turn within the cap, and the watch and the summary say
which shards are queued. The scripted Jobs double records how many of its jobs run at every launch.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest

from ocr_core.fanout.launcher_lease import take_launcher_lease
from ocr_core.fanout.plan import SHARD_LABEL
from ocr_core.store.lease import LAUNCHER, MIN_LEASE_S, Lease, LeaseTaken, overlaps
from ocr_core.store.output import Destination
from tests.test_fanout import (
    INPUT,
    OUTPUT,
    SCRIPT,
    ctrl_c,  # noqa: F401 (Ctrl-C raises KeyboardInterrupt in the watch loop)
    launcher,
    printed_commands,
    quick_polls,  # noqa: F401 (the launcher's fixture: no waits, a release build's table, a token)
)
from tests.testbed.hub_double import FolderHub
from tests.testbed.jobs_double import ScriptedJobs
from tests.testbed.recipes import run_entry

PROGRESS = ".ocr-progress/default/train"
SHARDS, CAP = 10, 3
FAILS_ONCE = 4


def fates() -> dict[int, list[str]]:
    """Every shard completes at its first job but one, which fails (out of memory) once, then completes."""
    return {shard: ["oom", "done"] if shard == FAILS_ONCE else ["done"] for shard in range(SHARDS)}


def test_ten_shards_run_at_most_three_at_once_each_published_once_and_the_failed_one_retried_within_the_cap(
    tmp_path, capsys
):
    jobs, code, summary, err, _ = launcher(tmp_path, fates(), "--max-parallel-jobs", str(CAP), capsys=capsys)
    assert code == 0 and summary["exit_code"] == 0, err
    assert max(jobs.running_at_launch) == CAP, f"running at each launch: {jobs.running_at_launch}"
    assert len(jobs.launches) == SHARDS + 1
    labels = [f"{shard:05d}-of-{SHARDS:05d}" for shard in range(SHARDS)]
    assert Counter(jobs.published) == Counter(labels), "a shard was published twice, or not at all"
    assert [shard["state"] for shard in summary["shards"]] == ["done"] * SHARDS
    assert [shard["relaunches"] for shard in summary["shards"]] == [int(s == FAILS_ONCE) for s in range(SHARDS)]
    relaunched = [at for at, launch in enumerate(jobs.launches) if launch.labels[SHARD_LABEL] == labels[FAILS_ONCE]]
    assert len(relaunched) == 2 and jobs.running_at_launch[relaunched[1]] <= CAP
    assert summary["max_parallel_jobs"] == CAP and f"{SHARDS} of {SHARDS} shard(s) in" in err
    first_total = next(line for line in err.splitlines() if line.startswith("  0 of 10 shard(s) in"))
    assert f"{SHARDS - CAP} queued" in first_total, first_total
    assert f"  shard {SHARDS - 1}/{SHARDS}: queued" in err, "the watch does not show a queued shard as queued"


def test_without_a_cap_every_shard_is_launched_at_once(tmp_path, capsys):
    """The double's count is what the cap is measured by: without --max-parallel-jobs, all ten run together."""
    jobs, code, summary, err, _ = launcher(tmp_path, fates(), capsys=capsys)
    assert code == 0, err
    assert max(jobs.running_at_launch) == SHARDS and summary["max_parallel_jobs"] is None
    assert "queued" not in err


def test_a_dry_run_says_how_many_jobs_run_at_once_and_the_jobs_never_see_the_flag(tmp_path, capsys):
    _, code, summary, err, out = launcher(
        tmp_path, fates(), "--dry-run", "--max-parallel-jobs", str(CAP), capsys=capsys
    )
    commands = printed_commands(out)
    assert code == 0 and len(commands) == SHARDS and summary["max_parallel_jobs"] == CAP, err
    assert all("--max-parallel-jobs" not in words for words in commands)
    assert f"{SHARDS} job(s) on l4x1, at most {CAP} running at once" in err, err


@pytest.mark.usefixtures("ctrl_c")
def test_a_launcher_detached_with_shards_queued_says_they_wait_for_the_same_command(tmp_path, capsys):
    """Ctrl-C leaves the running jobs running, but a queued shard has no job: only a launcher starts it. The
    summary says which shards are queued and that the same command launches them."""
    stop = lambda double: double.listings == 3 and signal.raise_signal(signal.SIGINT)  # noqa: E731
    running = {shard: ["running"] for shard in range(SHARDS)}
    jobs, code, summary, err, _ = launcher(
        tmp_path, running, "--max-parallel-jobs", str(CAP), capsys=capsys, on_listing=stop
    )
    assert code == 130 and summary["detached"] and len(jobs.launches) == CAP
    states = [shard["state"] for shard in summary["shards"]]
    assert states == ["running"] * CAP + ["queued"] * (SHARDS - CAP), states
    assert f"{CAP} job(s) keep running; {SHARDS - CAP} shard(s) queued" in err, err
    assert "the same command re-attaches and launches the queued shard(s)" in err, err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--max-parallel-jobs", "2"], "--max-parallel-jobs only work with --jobs N"),
        (["--jobs", "4", "--max-parallel-jobs", "0"], "--max-parallel-jobs must be at least 1"),
    ],
)
def test_a_cap_in_the_wrong_place_is_a_command_error(tmp_path, capsys, argv, says):
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {})
    capsys.readouterr()
    assert run_entry(SCRIPT, [INPUT, OUTPUT, *argv], hub, jobs) == 2
    assert says in capsys.readouterr().err and jobs.launches == []


class TwoLaunchers:
    """Two launchers of one command, each in a thread, over one Hub double and one Jobs double (its calls taken one
    at a time): each one's first listing of the jobs returns only once the other has listed too (or has ended), the
    moment two launchers that poll together both find no job running."""

    def __init__(self, hub: FolderHub, jobs: ScriptedJobs, argv: list[str]) -> None:
        self.hub, self.jobs, self.argv = hub, jobs, argv
        self.calls = threading.Lock()
        self.turn = threading.Condition()
        self.listed: set[str] = set()
        self.ended: set[str] = set()
        self.codes: dict[str, int] = {}

    def __getattr__(self, name: str):
        """The Jobs client's calls, one at a time (the double is not thread-safe); its attributes as they are."""
        found = getattr(self.jobs, name)
        if not callable(found):
            return found

        def serial(*args, **kwargs):
            with self.calls:
                return found(*args, **kwargs)

        return serial

    def jobs_labelled(self, labels):
        with self.calls:
            listed = self.jobs.jobs_labelled(labels)
        name = threading.current_thread().name
        with self.turn:
            if name not in self.listed:
                self.listed.add(name)
                self.turn.notify_all()
                self.turn.wait_for(lambda: len(self.listed | self.ended) == 2)
        return listed

    def launch_one(self) -> None:
        name = threading.current_thread().name
        try:
            self.codes[name] = run_entry(SCRIPT, self.argv, self.hub, self)
        finally:
            with self.turn:
                self.ended.add(name)
                self.turn.notify_all()

    def run(self) -> dict[str, int]:
        threads = [threading.Thread(target=self.launch_one, name=name) for name in ("first", "second")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.codes


def test_two_launchers_of_one_run_never_run_more_than_the_cap_nor_launch_a_shard_twice(tmp_path, capsys):
    """The cap counts the run's jobs that the listing shows running, whoever launched them; two launchers that
    polled at once both saw none and each launched three: six jobs ran under --max-parallel-jobs 3, and every shard
    they both started ran twice. The second launcher stops at start (exit 1), naming the first."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {shard: ["done", "done"] for shard in range(SHARDS)})
    argv = [INPUT, OUTPUT, "--jobs", str(SHARDS), "--max-parallel-jobs", str(CAP)]
    capsys.readouterr()
    codes = TwoLaunchers(hub, jobs, argv).run()
    err = capsys.readouterr().err
    assert max(jobs.running_at_launch) <= CAP, f"running at each launch: {jobs.running_at_launch}"
    launched = Counter(launch.labels[SHARD_LABEL] for launch in jobs.launches)
    assert set(launched.values()) == {1} and len(launched) == SHARDS, launched
    assert sorted(codes.values()) == [0, 1], codes
    assert "another --jobs launcher is watching" in err and "pass --take-over" in err, err
    assert not [name for name in hub.list_files(OUTPUT) if "lease-" in name], "a launcher's lease was left behind"


def test_a_launcher_killed_hard_holds_the_run_until_its_lease_expires_or_take_over(tmp_path, capsys):
    """A launcher killed with its lease live: the same command is refused, saying when the lease expires; with
    --take-over it re-attaches and runs the shards within the cap."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, fates())
    argv = [INPUT, OUTPUT, "--jobs", str(SHARDS), "--max-parallel-jobs", str(CAP)]
    killed = Lease.new("20261205T000000Z-dead00", LAUNCHER, MIN_LEASE_S)
    lease_path = hub.repo(OUTPUT) / PROGRESS / killed.file_name
    lease_path.parent.mkdir(parents=True)
    lease_path.write_text(killed.to_json())
    capsys.readouterr()
    assert run_entry(SCRIPT, argv, hub, jobs) == 1
    err = capsys.readouterr().err
    assert "another --jobs launcher is watching" in err and "its lease expires at" in err, err
    assert jobs.launches == []
    assert run_entry(SCRIPT, [*argv, "--take-over"], hub, jobs) == 0, capsys.readouterr().err
    assert max(jobs.running_at_launch) == CAP and len(jobs.launches) == SHARDS + 1


def test_a_recipes_run_and_the_launchers_lease_never_hold_each_other_off():
    """A launcher's lease holds no rows: it overlaps only another launcher's, never a job's slice nor a whole run."""
    assert overlaps(LAUNCHER, LAUNCHER)
    assert not any(overlaps(LAUNCHER, key) or overlaps(key, LAUNCHER) for key in ("all", "0-of-2", "1-of-2"))


def test_a_launcher_renews_its_lease_and_steps_back_once_another_holds_the_output(tmp_path, monkeypatch):
    """A launcher that could not renew (a laptop asleep past its lease) while another took the run over stops at its
    next poll, and removes its own lease; one that finds no rival renews it."""
    hub = FolderHub(tmp_path / "hub")
    destination = Destination(OUTPUT, "train", None, hub)
    settings = SimpleNamespace(take_over=False)
    held = take_launcher_lease(destination, settings)
    leases = lambda: [name for name in hub.list_files(OUTPUT) if "lease-launcher-" in name]  # noqa: E731
    assert leases() == [f"{PROGRESS}/{held.lease.file_name}"]
    held.lease = replace(held.lease, expires=held.lease.expires - MIN_LEASE_S)
    held.renew(take_over=False)
    assert held.lease.expires > time.time() + MIN_LEASE_S / 2, "not renewed"
    renewed = json.loads((hub.repo(OUTPUT) / leases()[0]).read_text())
    assert renewed["expires"] == held.lease.expires
    rival = Lease.new("20261205T000001Z-other0", LAUNCHER, MIN_LEASE_S)
    (hub.repo(OUTPUT) / PROGRESS / rival.file_name).write_text(rival.to_json())
    held.lease = replace(held.lease, expires=time.time())
    with pytest.raises(LeaseTaken, match="another --jobs launcher is watching"):
        held.renew(take_over=False)
    assert leases() == [f"{PROGRESS}/{rival.file_name}"]


def test_a_launchers_overwrite_keeps_its_own_lease_while_it_watches(tmp_path, capsys):
    """--overwrite clears the output's earlier progress before any launch; the launcher's own lease, taken just
    before, stays there for every poll, or a second launcher could start meanwhile."""
    hub = FolderHub(tmp_path / "hub")
    argv = [INPUT, OUTPUT, "--jobs", "2"]
    assert run_entry(SCRIPT, argv, hub, ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})) == 0
    held_at_poll = []
    watched = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    watched.on_listing = lambda double: held_at_poll.append(
        [name for name in hub.list_files(OUTPUT) if "lease-launcher-" in name]
    )
    capsys.readouterr()
    assert run_entry(SCRIPT, [*argv, "--temperature", "0.5", "--overwrite"], hub, watched) == 0
    assert "--overwrite: removing the results made another way" in capsys.readouterr().err
    assert held_at_poll and all(len(names) == 1 for names in held_at_poll), held_at_poll
