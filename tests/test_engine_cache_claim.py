"""Two runs of one key on one machine (two datasets on one GPU box): only the run that holds the fixed folder writes.

Compiled artifacts name the folder they were built in, so a job loads only an archive built at WORK_ROOT/<key>. A
second run of the same key on the machine works in a folder of its own while the first holds the fixed one; were it
to write its archive at its end, it would replace the key's good one with one that every later job skips.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ocr_core.planning.installed import served_versions
from ocr_core.serving import engine_cache
from ocr_core.serving.engine_cache import HIT, MISS, EngineCache, make_key, open_engine_cache
from tests.test_engine_cache import fake_vllm
from tests.test_resume_publish import SAMPLES, run_main, served
from tests.testbed.fake_server import fake_server

KEY = make_key({"vllm": "0.30.0", "torch": "2.13.0", "triton": "3.9.0"}, ["NVIDIA H200"], "org/model", ("--x", "1"))


@pytest.fixture(autouse=True)
def own_work_root(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_cache, "WORK_ROOT", tmp_path / "work")


def compile_into(cache: EngineCache, tag: str) -> dict[str, bytes]:
    """What an engine leaves in the run's private folder: one kernel, tagged with the run that compiled it."""
    path = Path(cache.environment()["VLLM_CACHE_ROOT"]) / f"kernel-{tag}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(f"{tag}:compiled in {cache.local}".encode())
    return {path.relative_to(cache.local).as_posix(): path.read_bytes()}


def contents(cache: EngineCache) -> dict[str, bytes]:
    return {p.relative_to(cache.local).as_posix(): p.read_bytes() for p in cache.local.rglob("*") if p.is_file()}


def test_a_second_run_of_the_key_here_leaves_the_first_runs_archive_loadable(tmp_path):
    volume = str(tmp_path / "volume")
    first = open_engine_cache(volume, KEY)
    second = open_engine_cache(volume, KEY)
    assert first.local == tmp_path / "work" / KEY.name and second.local != first.local
    written = compile_into(first, "first")
    first.publish()
    compile_into(second, "second")
    second.publish()
    assert second.report()["written_bytes"] == 0
    assert any("fixed folder" in note and "not written" in note for note in second.report()["notes"])
    second.close()
    first.close()

    later = open_engine_cache(volume, KEY)
    assert later.outcome == HIT and contents(later) == written


def test_a_second_run_that_ends_first_writes_nothing_and_the_first_still_writes(tmp_path):
    volume = str(tmp_path / "volume")
    first = open_engine_cache(volume, KEY)
    second = open_engine_cache(volume, KEY)
    compile_into(second, "second")
    second.publish()
    second.close()
    assert not list(Path(volume).glob("*.tar"))
    written = compile_into(first, "first")
    first.publish()
    first.close()
    later = open_engine_cache(volume, KEY)
    assert later.outcome == HIT and contents(later) == written


def test_once_the_first_run_ends_the_next_run_holds_the_fixed_folder_and_writes(tmp_path):
    volume = str(tmp_path / "volume")
    first = open_engine_cache(volume, KEY)
    first.close()
    nxt = open_engine_cache(volume, KEY)
    assert nxt.outcome == MISS and nxt.local == tmp_path / "work" / KEY.name
    written = compile_into(nxt, "next")
    nxt.publish()
    nxt.close()
    assert contents(open_engine_cache(volume, KEY)) == written


def test_a_run_that_uses_a_server_already_answering_claims_and_writes_no_cache(tmp_path, monkeypatch, capsys):
    """A server answering at the run's one local address is used as it is, and this run starts none: its engines
    compile wherever that server's caches point, not in the run's folder. The run must not take the fixed folder
    (emptying it first, and keeping a second run of the key that does start an engine from its own archive) nor say
    it writes an archive it cannot have compiled."""
    fake_vllm(tmp_path / "bin", sys.executable)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert served_versions(), "the cache needs a vllm whose version is known, or the test shows nothing"
    volume = tmp_path / "volume"
    with fake_server() as server:
        argv = [str(SAMPLES), str(tmp_path / "out"), *served(server, "--engine-cache", str(volume))]
        code, summary, err = run_main("ovis-ocr2-server.py", argv, capsys)
    assert code == 0, err
    assert not (tmp_path / "work").exists(), "the run claimed the fixed folder of a server it did not start"
    assert not volume.exists() or not any(volume.iterdir())
    assert "engine_cache" not in summary and "engine cache:" not in err
