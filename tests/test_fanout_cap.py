"""`--jobs N --max-parallel-jobs K`: N shards, at most K jobs running, the next launched as one ends (issue 50).

A user with a quota of a few GPUs cuts a large input into many small shards that retry cheaply: the launcher holds
the rest queued, a relaunch of a failed shard waits its turn within the cap, and the watch and the summary say
which shards are queued. The scripted Jobs double records how many of its jobs run at every launch.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from ocr_core.fanout.plan import SHARD_LABEL
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
