"""The engine cache on a fake volume (a folder of the test): keys, two writers at once, and broken caches (issue 42).

A run must never load another build's artifacts, never end because of the cache, and never write a secret to it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib.metadata
import json
import multiprocessing
import os
import shlex
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from huggingface_hub.cli._cli_utils import parse_volumes

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.facts import ModelFacts
from ocr_core.fanout.jobs import bucket_volume
from ocr_core.planning.installed import served_versions
from ocr_core.planning.job_commands import job_command
from ocr_core.planning.make_plan import World, make_run_plan
from ocr_core.redaction import register_secret
from ocr_core.serving import engine_cache
from ocr_core.serving.cache_claim import claimed_folder
from ocr_core.serving.engine_cache import (
    CACHE_FOLDERS,
    HIT,
    MISS,
    OFF,
    EngineCache,
    make_key,
    open_engine_cache,
)
from ocr_core.serving.ports import free_ports
from ocr_core.shapes import served
from ocr_core.shapes.served import served_engine_cache
from tests.testbed.handles import handle_for

VERSIONS = {"vllm": "0.30.0", "torch": "2.13.0", "triton": "3.9.0"}
FLAGS = ("--max-model-len", "8192", "--limit-mm-per-prompt", '{"image": 1}')
KEY = make_key(VERSIONS, ["NVIDIA H200"], "lightonai/LightOnOCR-3", FLAGS)
SERVED = ModelFacts(
    model="org/model", image="vllm/vllm-openai:v0", serve_args=("--limit-mm-per-prompt", '{"image": 1}'),
    sampling={"temperature": 0.0, "max_tokens": 100}, max_model_len=4096,
)  # fmt: skip


@pytest.fixture(autouse=True)
def own_work_root(tmp_path, monkeypatch):
    """Each test's runs unpack under a root of its own, not the machine's shared one."""
    monkeypatch.setattr(engine_cache, "WORK_ROOT", tmp_path / "work")


def compiled(cache: EngineCache, tag: str, files: int = 3) -> dict[str, bytes]:
    """What an engine would leave in the run's private caches: a few files under each variable's folder."""
    written = {}
    for index in range(files):
        for variable in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR"):
            path = Path(cache.environment()[variable]) / "sub" / f"kernel-{index}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            data = f"{tag}:{variable}:{index}:".encode() * 200
            path.write_bytes(data)
            written[path.relative_to(cache.local).as_posix()] = data
    return written


def contents(cache: EngineCache) -> dict[str, bytes]:
    return {p.relative_to(cache.local).as_posix(): p.read_bytes() for p in cache.local.rglob("*") if p.is_file()}


def first_run(volume: Path, tag: str = "a", key=KEY) -> dict[str, bytes]:
    cache = open_engine_cache(str(volume), key)
    written = compiled(cache, tag)
    cache.publish()
    cache.close()
    return written


def test_a_run_loads_what_an_earlier_run_wrote_and_points_every_cache_at_it(tmp_path):
    volume = tmp_path / "volume"
    cold = open_engine_cache(str(volume), KEY)
    assert cold.outcome == MISS
    written = compiled(cold, "a")
    cold.publish()
    assert cold.report()["written_bytes"] > 0
    cold.close()

    warm = open_engine_cache(str(volume), KEY)
    assert warm.outcome == HIT
    assert contents(warm) == written
    env = warm.environment()
    assert {name for name in CACHE_FOLDERS} <= set(env) and env["TRITON_CACHE_AUTOTUNING"] == "1"
    assert all(Path(env[name]).is_relative_to(warm.local) for name in CACHE_FOLDERS)
    warm.publish()
    assert warm.report()["written_bytes"] == 0, "nothing new: the archive is not written again"
    assert warm.report()["loaded_bytes"] == sum(len(data) for data in written.values())


@pytest.mark.parametrize(
    "change",
    [
        {"versions": {**VERSIONS, "vllm": "0.30.1"}},
        {"versions": {**VERSIONS, "torch": "2.13.1"}},
        {"versions": {**VERSIONS, "triton": "3.9.1"}},
        {"gpus": ["NVIDIA L4"]},
        {"gpus": []},
        {"model": "lightonai/LightOnOCR-2"},
        {"flags": (*FLAGS, "--enforce-eager")},
        {"flags": ("--max-model-len", "4096", *FLAGS[2:])},
    ],
)
def test_another_vllm_torch_triton_gpu_model_or_flag_set_never_loads_the_artifacts(tmp_path, change):
    inputs = {"versions": VERSIONS, "gpus": ["NVIDIA H200"], "model": "lightonai/LightOnOCR-3", "flags": FLAGS}
    other = make_key(**{**inputs, **change})
    assert other.name != KEY.name
    first_run(tmp_path)
    cache = open_engine_cache(str(tmp_path), other)
    assert cache.outcome == MISS and contents(cache) == {}


def test_the_key_keeps_no_secret_of_the_flags():
    register_secret("sk-serve-secret-123")
    key = make_key(VERSIONS, ["NVIDIA H200"], "m", ("--api-key", "sk-serve-secret-123"))
    assert "sk-serve-secret-123" not in repr(key) and "sk-serve-secret" not in key.name


def test_an_archive_of_another_key_under_this_keys_name_is_skipped(tmp_path):
    other = make_key({**VERSIONS, "vllm": "0.22.1"}, ["NVIDIA H200"], "lightonai/LightOnOCR-3", FLAGS)
    first_run(tmp_path, key=other)
    (tmp_path / f"{other.name}.tar").rename(tmp_path / f"{KEY.name}.tar")
    cache = open_engine_cache(str(tmp_path), KEY)
    assert cache.outcome == MISS and contents(cache) == {}
    assert "another build" in " ".join(cache.notes)


def truncated(archive: Path, keep: float) -> None:
    """The archive cut short within its members (a tar ends in zero blocks that carry nothing)."""
    with tarfile.open(archive) as tar:
        last = tar.getmembers()[-1]
        end = last.offset_data + last.size
    archive.write_bytes(archive.read_bytes()[: int(end * keep)])


def flipped(archive: Path, _: float) -> None:
    data = bytearray(archive.read_bytes())
    data[data.index(b"a:VLLM_CACHE_ROOT:1:") + 2] ^= 0xFF
    archive.write_bytes(bytes(data))


def garbage(archive: Path, _: float) -> None:
    archive.write_bytes(b"not a tar at all" * 10)


@pytest.mark.parametrize(
    ("damage", "keep"),
    [(truncated, 0.0), (truncated, 0.3), (truncated, 0.9), (truncated, 0.999), (flipped, 1.0), (garbage, 1.0)],
)
def test_a_partial_or_corrupt_archive_is_skipped_with_a_note_and_written_anew(tmp_path, damage, keep):
    written = first_run(tmp_path)
    damage(tmp_path / f"{KEY.name}.tar", keep)
    cache = open_engine_cache(str(tmp_path), KEY)
    assert cache.outcome == MISS and contents(cache) == {}
    assert any("skipped" in note for note in cache.notes)
    compiled(cache, "a")
    cache.publish()
    cache.close()
    healed = open_engine_cache(str(tmp_path), KEY)
    assert healed.outcome == HIT and contents(healed) == written


def test_a_member_that_points_outside_the_folder_is_refused(tmp_path):
    archive = tmp_path / f"{KEY.name}.tar"
    first_run(tmp_path)
    with tarfile.open(archive, "a") as tar:
        info = tarfile.TarInfo("../escaped")
        tar.addfile(info)
    cache = open_engine_cache(str(tmp_path / "."), KEY)
    assert cache.outcome == MISS
    assert not (cache.local.parent / "escaped").exists()


def test_a_volume_that_cannot_be_a_folder_or_written_is_a_note_never_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    off = open_engine_cache(str(blocker / "cache"), KEY)
    assert off.outcome == OFF and off.environment() == {}
    off.publish()
    (tmp_path / "volume" / f"{KEY.name}.tar").mkdir(parents=True)
    cache = open_engine_cache(str(tmp_path / "volume"), KEY)
    compiled(cache, "a")
    cache.publish()
    assert cache.report()["written_bytes"] == 0
    assert "could not write" in cache.notes[-1]


def test_a_bucket_is_read_where_the_job_command_mounts_it_and_one_not_mounted_says_how(tmp_path):
    bucket = "hf://buckets/alice/caches/ocr"
    cache = open_engine_cache(bucket, KEY, mount=tmp_path / "absent")
    assert cache.outcome == OFF and cache.environment() == {}
    assert "-v hf://buckets/alice/caches/ocr:/engine-cache" in cache.notes[0]
    mount = tmp_path / "engine-cache"
    mount.mkdir()
    cold = open_engine_cache(bucket, KEY, mount=mount)
    written = compiled(cold, "a")
    cold.publish()
    assert (mount / f"{KEY.name}.tar").is_file()
    cold.close()
    warm = open_engine_cache(bucket, KEY, mount=mount)
    assert warm.outcome == HIT and contents(warm) == written


def test_an_engine_of_unknown_version_gets_no_cache(tmp_path):
    cache = open_engine_cache(str(tmp_path), None)
    assert cache.outcome == OFF and "version" in cache.notes[0]


def test_no_file_on_the_volume_holds_a_secret_of_the_run(tmp_path, monkeypatch):
    token = "hf_" + "S3cret" * 6
    monkeypatch.setenv("HF_TOKEN", token)
    volume = tmp_path / "volume"
    cache = open_engine_cache(str(volume), KEY)
    compiled(cache, "a")
    leaky = Path(cache.environment()["VLLM_CACHE_ROOT"]) / "config.json"
    leaky.write_text(f'{{"env": {{"HF_TOKEN": "{token}"}}}}')
    cache.publish()
    stored = b"".join(path.read_bytes() for path in volume.rglob("*") if path.is_file())
    assert stored and token.encode() not in stored
    cache.close()
    warm = open_engine_cache(str(volume), KEY)
    assert warm.outcome == HIT and "vllm/config.json" not in contents(warm)


def write_many(volume: str, work_root: str, tag: str, rounds: int) -> None:
    """One job of a concurrent pair, on a machine of its own (its own work root, whose fixed folder it holds):
    writes this key's archive again and again, with content of its own."""
    cache = EngineCache(volume, Path(volume), KEY, *claimed_folder(Path(work_root), KEY.name))
    compiled(cache, tag, files=20)
    for _ in range(rounds):
        cache.publish()


def archive_tags(archive: Path) -> set[bytes]:
    """The writers' tags in a whole archive, each file checked against its manifest (the writers of this test work in
    folders of their own, so a reader in its work root would skip their archives as built elsewhere)."""
    with tarfile.open(archive) as tar:
        *members, last = tar.getmembers()
        listed = json.loads(tar.extractfile(last).read())["files"]
        files = {member.name: tar.extractfile(member).read() for member in members}
    assert last.name == "MANIFEST.json" and set(files) == set(listed) and len(files) == 40, "part of a writer's"
    assert all(hashlib.sha256(data).hexdigest() == listed[name]["sha256"] for name, data in files.items())
    return {data.split(b":")[0] for data in files.values()}


def test_two_jobs_writing_at_once_leave_a_whole_archive_of_one_of_them(tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    context = multiprocessing.get_context("fork")
    writers = [
        context.Process(target=write_many, args=(str(volume), str(tmp_path / tag), tag, 15)) for tag in ("a", "b")
    ]
    for writer in writers:
        writer.start()
    archive = volume / f"{KEY.name}.tar"
    while any(writer.is_alive() for writer in writers):
        if archive.is_file():
            assert len(archive_tags(archive)) == 1, "a mix of two writers"
    assert all(writer.exitcode == 0 for writer in writers)
    assert len(archive_tags(archive)) == 1
    assert not [path for path in volume.iterdir() if path.name.endswith(".partial")]


def test_the_key_name_is_readable_and_stable():
    assert KEY.name.startswith("vllm0.30.0-nvidia-h200-lightonocr-3-")
    assert make_key(VERSIONS, ["NVIDIA H200"], "lightonai/LightOnOCR-3", FLAGS).name == KEY.name
    assert dataclasses.replace(KEY, flags=FLAGS[::-1]).name != KEY.name


@pytest.mark.parametrize(
    "template", [None, "hf jobs run --flavor {flavor} -s HF_TOKEN {image} bash -lc 'uv run {url} {args}'"]
)
def test_the_job_command_mounts_a_bucket_cache_and_leaves_a_folder_alone(template):
    facts = ModelFacts(
        model="org/model", image="vllm/vllm-openai:v0.30.0", serve_args=(), sampling={}, max_model_len=4096,
        job_command=template,
    )  # fmt: skip
    bucket = "hf://buckets/alice/caches/ocr"
    for flags in (["--engine-cache", bucket], [f"--engine-cache={bucket}"]):
        words = shlex.split(job_command("x.py", facts, ["IN", "OUT", *flags]))
        run = words.index("run")
        assert words[run + 1 : run + 3] == ["-v", f"{bucket}:/engine-cache"]
    assert "-v" not in shlex.split(job_command("x.py", facts, ["IN", "OUT", "--engine-cache", "/cache"]))


def test_a_launch_mounts_the_bucket_as_the_hf_cli_would():
    spec = "hf://buckets/alice/caches/ocr/v1:/engine-cache"
    assert bucket_volume(spec).to_dict() == parse_volumes([spec])[0].to_dict()
    assert (
        bucket_volume("hf://buckets/alice/caches:/engine-cache").to_dict()
        == parse_volumes(["hf://buckets/alice/caches:/engine-cache"])[0].to_dict()
    )


FAKE_VLLM = """#!{python}
import http.server, json, os, signal, sys, time
from pathlib import Path

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
{prelude}
port = int(sys.argv[sys.argv.index("--port") + 1])


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""
# What the fake does before it serves: compiles one file into VLLM_CACHE_ROOT, naming those it found there.
COMPILES = """
root = Path(os.environ["VLLM_CACHE_ROOT"])
root.mkdir(parents=True, exist_ok=True)
found = [path.name for path in root.glob("compiled-*")]
(root / f"compiled-{len(found)}").write_text(json.dumps({"found": found, "hf_token": os.environ.get("HF_TOKEN")}))
"""


def fake_vllm(folder: Path, python: str, prelude: str = COMPILES) -> None:
    """A `vllm` command in `folder` that runs `prelude`, then answers every GET with 200 on its --port."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "vllm"
    script.write_text(FAKE_VLLM.format(python=python, prelude=prelude))
    script.chmod(0o755)


def spawned_run(volume: Path, monkeypatch, tmp_path) -> EngineCache:
    """One run's spawned server under the cache, as the served shape sets it up; the cache once the server stopped."""
    argv = ["IN", "./OUT", "--engine-cache", str(volume), "--startup-timeout", "60"]
    settings = parse_arguments(build_parser("x-server.py", SERVED, "server"), argv)
    cache = served_engine_cache(make_run_plan(settings, SERVED, "server", World(answering=lambda policy: False)).cache)
    handle = handle_for(f"http://127.0.0.1:{free_ports(18600, 1)[0]}", settings, SERVED, cache.environment())
    try:
        handle.spawn()
    finally:
        handle.close()
    cache.publish()
    return cache


def test_a_spawned_server_compiles_into_the_cache_and_the_next_run_finds_it(tmp_path, monkeypatch):
    fake_vllm(tmp_path / "bin", sys.executable)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HF_TOKEN", "hf_" + "T0ken" * 6)
    volume = tmp_path / "volume"
    first = spawned_run(volume, monkeypatch, tmp_path)
    assert first.outcome == MISS and first.key.vllm == importlib.metadata.version("vllm")
    assert first.report()["written_bytes"] == 0, "the only file held the token, so nothing was written"
    first.close()
    monkeypatch.delenv("HF_TOKEN")
    second = spawned_run(volume, monkeypatch, tmp_path)
    assert second.outcome == MISS and second.report()["written_bytes"] > 0
    second.close()
    third = spawned_run(volume, monkeypatch, tmp_path)
    assert third.outcome == HIT and third.key == second.key
    seen = json.loads((third.local / "vllm" / "compiled-1").read_text())
    assert seen["found"] == ["compiled-0"], "the third server found what the second compiled"


def test_a_vllm_command_whose_interpreter_cannot_be_told_gets_no_cache(tmp_path, monkeypatch):
    fake_vllm(tmp_path / "bin", "/bin/sh")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert served_versions() == {}
    fake_vllm(tmp_path / "bin", sys.executable)
    assert served_versions()["vllm"] == importlib.metadata.version("vllm")


class FillingFleet:
    """A fleet whose replicas all serve from its third look on."""

    def __init__(self) -> None:
        self.looks = 0

    def full(self) -> bool:
        self.looks += 1
        return self.looks > 2


def test_the_served_shape_writes_the_cache_once_every_replica_serves_and_at_the_end_only_what_came_later(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(served, "FLEET_POLL_S", 0.01)
    cache = open_engine_cache(str(tmp_path), KEY)
    compiled(cache, "a")
    fleet = FillingFleet()
    asyncio.run(served.publish_once_serving(fleet, cache))
    assert fleet.looks == 3 and cache.report()["written_bytes"] > 0
    notes = len(cache.notes)
    cache.publish()
    assert len(cache.notes) == notes, "nothing new since: nothing written again"
    extra = Path(cache.environment()["TRITON_CACHE_DIR"]) / "late-kernel.bin"
    extra.write_bytes(b"compiled while serving")
    cache.publish()
    cache.close()
    later = open_engine_cache(str(tmp_path), KEY)
    assert later.outcome == HIT and contents(later)["triton/late-kernel.bin"] == b"compiled while serving"


def test_a_run_works_in_the_same_folder_every_job_and_a_second_run_here_in_its_own(tmp_path, monkeypatch):
    """Compiled artifacts may name the path they were built under, so each job unpacks to the same path; a second
    run of the same key on one machine must not write into the first one's folder."""
    first = open_engine_cache(str(tmp_path / "volume"), KEY)
    assert first.local == tmp_path / "work" / KEY.name
    second = open_engine_cache(str(tmp_path / "volume"), KEY)
    assert second.local != first.local and second.local.parent == first.local.parent
    first.close()
    second.close()
    third = open_engine_cache(str(tmp_path / "volume"), KEY)
    assert third.local == first.local
    third.close()


def test_a_run_that_starts_no_server_opens_no_cache(tmp_path):
    volume = tmp_path / "volume"
    for server in ("https://example.org:8000", "http://127.0.0.1:8000,http://127.0.0.1:8001"):
        argv = ["IN", "./OUT", "--engine-cache", str(volume), "--server", server]
        settings = parse_arguments(build_parser("x-server.py", SERVED, "server"), argv)
        plan = make_run_plan(settings, SERVED, "server", World(answering=lambda policy: False))
        assert not plan.starts_servers and plan.cache.key is None
    assert not volume.exists() and not (tmp_path / "work").exists()


def test_a_volume_that_cannot_rename_gets_the_archive_copied(tmp_path, monkeypatch):
    def no_rename(source, target):
        raise OSError(38, "Function not implemented")

    with monkeypatch.context() as no_renames:
        no_renames.setattr(os, "replace", no_rename)
        written = first_run(tmp_path)
    warm = open_engine_cache(str(tmp_path), KEY)
    assert warm.outcome == HIT and contents(warm) == written
    assert [path.name for path in tmp_path.iterdir() if path.is_file()] == [f"{KEY.name}.tar"]


def test_two_jobs_whose_temp_folders_differ_unpack_at_the_same_path(tmp_path, monkeypatch):
    """On an H200 (2026-12-02, vLLM 0.26.0) a job with another TMPDIR unpacked the archive elsewhere and every engine
    core died on FileNotFoundError: vLLM's AOT-compiled function names the absolute folder it was compiled in."""
    runs = []
    for temp in ("tmp-cold", "tmp-warm"):
        (tmp_path / temp).mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / temp))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / temp))
        cache = open_engine_cache(str(tmp_path / "volume"), KEY)
        runs.append((cache.local, cache.outcome, contents(cache)))
        if cache.outcome == MISS:
            written = compiled(cache, "a")
        cache.publish()
        cache.close()
    assert runs[0][0] == runs[1][0] == tmp_path / "work" / KEY.name
    assert runs[1][1:] == (HIT, written)


def test_a_work_root_that_cannot_be_made_or_written_turns_the_cache_off_with_a_note(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the root should be")
    monkeypatch.setattr(engine_cache, "WORK_ROOT", blocker / "work")
    cache = open_engine_cache(str(tmp_path / "volume"), KEY)
    assert cache.outcome == OFF and cache.environment() == {}
    assert str(blocker / "work") in cache.notes[0]
    cache.publish()
    cache.close()


def test_an_archive_built_in_another_folder_is_skipped_with_a_note_naming_both(tmp_path, monkeypatch):
    volume = tmp_path / "volume"
    first_run(volume)
    monkeypatch.setattr(engine_cache, "WORK_ROOT", tmp_path / "elsewhere")
    cache = open_engine_cache(str(volume), KEY)
    assert cache.outcome == MISS and contents(cache) == {}
    note = " ".join(cache.notes)
    assert "skipped" in note and str(tmp_path / "work" / KEY.name) in note
    assert str(tmp_path / "elsewhere" / KEY.name) in note
