"""Several runs on one new local OUTPUT: a run that fails before its first result takes away only what it wrote,
and only while no other run holds any slice of OUTPUT. A fake vLLM server answers; nothing reaches the Hub.

Shard 0 created OUTPUT and failed before its first result (an engine out of memory) while shard 1 ran: its
clean-up of "a folder of locks and a manifest" removed OUTPUT under shard 1, whose slice could then be started
twice, whose rows were published with no manifest, and shard 0's rerun was refused as foreign, offered the
`--overwrite` that deletes shard 1's pages.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time

from ocr_core import entry as entry_module
from ocr_core.errors import JobFailed
from ocr_core.store import lease as lease_module
from ocr_core.store.lease import LocalLocks
from tests.test_resume_publish import PROGRESS, load, repeated, run_main, served
from tests.testbed.env import script_command
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.fake_server import fake_server

SCRIPT = "ovis-ocr2-server.py"


def start_shard(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        script_command(SCRIPT, *argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bed_env()
    )


def wait_until_driving(process: subprocess.Popen, server) -> None:
    """Until the shard has sent a page (it holds its slice and wrote its manifest), well before its first part."""
    deadline = time.monotonic() + 300
    while server.state.answered == 0 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert process.poll() is None and server.state.answered > 0, process.communicate()[1][-3000:]


def test_a_shard_that_fails_before_its_first_result_leaves_the_other_shards_output(tmp_path, capsys, monkeypatch):
    source = repeated(tmp_path / "in", copies=4)
    out = tmp_path / "out"
    progress = out / PROGRESS
    with fake_server(delay_s=0.4) as server:
        other_argv = [str(source), str(out), *served(server, "--shard", "1/2", "--max-inflight", "1")]
        other: list[subprocess.Popen] = []

        def out_of_memory(job, stop, streams):
            other.append(start_shard(other_argv))
            wait_until_driving(other[0], server)
            raise JobFailed("the engine ran out of GPU memory while it started")

        monkeypatch.setattr(entry_module, "drive_server_job", out_of_memory)
        argv = [str(source), str(out), *served(server, "--shard", "0/2")]
        try:
            code, _, err = run_main(SCRIPT, argv, capsys)
            assert code == 1 and "out of GPU memory" in err, err[-3000:]
            assert other[0].poll() is None, "shard 1 ended before the check"
            left = sorted(path.name for path in progress.iterdir()) if progress.is_dir() else []
            assert "manifest.json" in left and ".lease-1-of-2.lock" in left, f"shard 1's files went: {left}"
            second, _, err = run_main(SCRIPT, other_argv, capsys)
            assert second == 2 and "another run of this command is working on it" in err, err[-3000:]
            _, stderr = other[0].communicate(timeout=300)
        finally:
            for process in other:
                if process.poll() is None:
                    process.kill()
        assert other[0].returncode == 0, stderr[-3000:]
        assert json.loads((progress / "manifest.json").read_text())["shards"] == 2
        assert [path.name for path in (out / "data").iterdir()] == ["train-00001-of-00002-00000.parquet"]

        monkeypatch.undo()
        code, summary, err = run_main(SCRIPT, argv, capsys)
    assert code == 0, err[-3000:]
    assert summary["done_this_run"] == 24
    assert len(load(out)) == 48


def test_a_failed_run_takes_away_only_the_files_it_wrote(tmp_path, capsys, monkeypatch):
    """Another config's run on the same new OUTPUT, started while this one ran and not yet at its first result,
    keeps its manifest and lock: this run's clean-up removed every bookkeeping file under OUTPUT."""
    out = tmp_path / "out"
    theirs = out / ".ocr-progress" / "other" / "train"

    def out_of_memory(job, stop, streams):
        theirs.mkdir(parents=True)
        (theirs / "manifest.json").write_text("{}\n")
        (theirs / ".lease-all.lock").write_text("")
        raise JobFailed("the engine ran out of GPU memory while it started")

    monkeypatch.setattr(entry_module, "drive_server_job", out_of_memory)
    with fake_server() as server:
        code, _, err = run_main(SCRIPT, [str(repeated(tmp_path / "in", copies=1)), str(out), *served(server)], capsys)
    assert code == 1, err[-3000:]
    assert sorted(path.name for path in theirs.iterdir()) == [".lease-all.lock", "manifest.json"]
    assert not (out / PROGRESS).exists(), "this run's own bookkeeping stayed"


def unlinked_before_the_first_lock(monkeypatch, path) -> None:
    """The lock file goes between a run's opening it and its lock, as a run alone on an output it created takes its
    lock files away."""
    real = fcntl.flock
    done: list[bool] = []

    def flock(handle, mode) -> None:
        if not done and mode & (fcntl.LOCK_SH | fcntl.LOCK_EX):
            done.append(True)
            path.unlink()
        real(handle, mode)

    monkeypatch.setattr(lease_module.fcntl, "flock", flock)


def test_a_lock_file_taken_away_before_its_lock_is_opened_again(tmp_path, monkeypatch):
    """Locked, the unlinked file kept out no later run: the lock must be on the file the path names."""
    path = tmp_path / ".lease-all.lock"
    path.write_text("")
    unlinked_before_the_first_lock(monkeypatch, path)
    locks = LocalLocks(tmp_path, "all")
    locks.acquire("OUTPUT")
    assert os.fstat(locks.handles[0].fileno()).st_ino == path.stat().st_ino
    locks.release()


def test_a_lock_file_taken_away_by_the_run_that_held_it_refuses_no_one(tmp_path, monkeypatch):
    """The run alone on OUTPUT still holds the file it unlinks; a run that opened it before refused at once."""
    path = tmp_path / ".lease-all.lock"
    holder = LocalLocks(tmp_path, "all")
    holder.acquire("OUTPUT")
    unlinked_before_the_first_lock(monkeypatch, path)
    shard = LocalLocks(tmp_path, "0-of-2")
    shard.acquire("OUTPUT")
    assert [path.name for path in shard.paths] == [".lease-all.lock", ".lease-0-of-2.lock"]
    shard.release()
    holder.release()
