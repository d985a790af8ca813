"""The progress store's contract without a server: durable parts, newest record wins, unreadable parts set aside,
merging that keeps every row, what in OUTPUT counts as ours, the card merge, and leases."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from ocr_core.preparation.claim import claim_lease, hold_lease
from ocr_core.preparation.job import release
from ocr_core.publishing.card import CardFacts, render_card
from ocr_core.store.compaction import FAN_IN, TOP_CLASS, compact, plan_merges, size_class
from ocr_core.store.front_matter import split_front_matter
from ocr_core.store.layout import foreign_files, owned_configs
from ocr_core.store.lease import (
    WHOLE,
    Lease,
    LeaseTaken,
    LocalLocks,
    RunningHere,
    conflicts,
    first_landed,
    lease_commit_title,
    lease_key,
    overlaps,
)
from ocr_core.store.manifest import differences, limit_changes, settings_mismatch_message
from ocr_core.store.mirror import ProgressMirror
from ocr_core.store.output import Destination
from ocr_core.store.output_checks import unsafe_local_output
from ocr_core.store.progress import ResultLog, RowResult, finished_ids, part_files, read_results, read_strikes
from tests.testbed.handles import fingerprint_of
from tests.testbed.hub_double import FolderHub


def write_parts(folder: Path, count: int, rows_per_part: int, text: str = "t") -> list[str]:
    log = ResultLog(folder, "20260101T000000Z-aaaaaa", flush_rows=rows_per_part)
    ids = []
    for index in range(count * rows_per_part):
        ids.append(f"train-{index}")
        log.add(RowResult(index, f"train-{index}", text=f"{text}{index}"))
    return ids


def texts(folder: Path) -> dict[str, str]:
    results = read_results(folder)
    return dict(zip(results["row_id"].to_pylist(), results["text"].to_pylist()))


def test_the_newest_record_wins_whatever_the_file_names(tmp_path):
    late = ResultLog(tmp_path, "00000000T000000Z-zzzzzz", flush_rows=1)
    early = ResultLog(tmp_path, "99999999T999999Z-aaaaaa", flush_rows=1)
    early.add(RowResult(0, "train-0", error="server rejected the page (400)", recorded_at=100.0))
    late.add(RowResult(0, "train-0", text="redone", recorded_at=200.0))
    assert texts(tmp_path) == {"train-0": "redone"}
    assert finished_ids(read_results(tmp_path), retry_errors=True) == {"train-0"}


def test_parts_are_written_whole_under_their_final_name(tmp_path):
    log = ResultLog(tmp_path, "run", flush_rows=2)
    log.add(RowResult(0, "a", text="x"))
    assert part_files(tmp_path) == []
    log.add(RowResult(1, "b", text="y"))
    assert [pq.read_table(part).num_rows for part in part_files(tmp_path)] == [2]
    assert [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")] == []


@pytest.mark.parametrize("damage", [b"", b"PAR1 not really parquet"], ids=["zero-length", "corrupt"])
def test_an_unreadable_part_is_set_aside_and_its_rows_count_as_not_done(tmp_path, capsys, damage):
    ids = write_parts(tmp_path, count=3, rows_per_part=4)
    parts = part_files(tmp_path)
    parts[1].write_bytes(damage)
    done = finished_ids(read_results(tmp_path, ["error"]), retry_errors=False)
    assert done == set(ids[:4] + ids[8:])
    assert "skipped unreadable progress part" in capsys.readouterr().err
    assert parts[1].name not in {path.name for path in part_files(tmp_path)}
    assert (tmp_path / (parts[1].name + ".unreadable")).exists()


def test_a_part_from_before_recorded_at_existed_still_reads(tmp_path):
    write_parts(tmp_path, count=1, rows_per_part=3)
    part = part_files(tmp_path)[0]
    pq.write_table(pq.read_table(part).drop_columns(["recorded_at"]), part)
    assert texts(tmp_path) == {"train-0": "t0", "train-1": "t1", "train-2": "t2"}


@pytest.mark.parametrize(
    ("rows", "groups"),
    [
        ({f"p{i}": 32 for i in range(FAN_IN - 1)}, []),
        ({f"p{i}": 32 for i in range(FAN_IN)}, [sorted(f"p{i}" for i in range(FAN_IN))]),
        ({**{f"p{i}": 32 for i in range(FAN_IN)}, "big": 600}, [sorted(f"p{i}" for i in range(FAN_IN))]),
        ({f"top{i}": FAN_IN**TOP_CLASS for i in range(40)}, []),
        ({f"a{i}": 3 for i in range(FAN_IN)} | {f"b{i}": 40 for i in range(FAN_IN)}, "two"),
    ],
    ids=["too-few", "one-class-full", "other-classes-wait", "top-class-never-merges", "two-classes"],
)
def test_merge_plan(rows, groups):
    planned = plan_merges(rows)
    if groups == "two":
        assert [sorted(group)[0][0] for group in planned] == ["a", "b"]
    else:
        assert planned == groups


def test_size_classes_are_a_factor_of_fan_in_apart():
    assert [size_class(rows) for rows in (1, FAN_IN - 1, FAN_IN, FAN_IN**2, FAN_IN**3, FAN_IN**9)] == [
        0, 0, 1, 2, 3, TOP_CLASS,
    ]  # fmt: skip


def test_compaction_keeps_every_row_and_bounds_the_file_count(tmp_path):
    write_parts(tmp_path, count=300, rows_per_part=16)
    before = texts(tmp_path)
    removed = [name for names in compact(tmp_path) for name in names]
    assert len(part_files(tmp_path)) < 2 * FAN_IN
    assert len(removed) >= 300 - 2 * FAN_IN
    assert texts(tmp_path) == before and len(before) == 4800


def test_compaction_keeps_the_newest_record_of_a_row_merged_with_an_older_one(tmp_path):
    log = ResultLog(tmp_path, "run", flush_rows=1)
    for attempt in range(FAN_IN):
        log.add(RowResult(0, "train-0", text=f"attempt {attempt}", recorded_at=1000.0 + attempt))
    list(compact(tmp_path))
    assert len(part_files(tmp_path)) == 1
    assert texts(tmp_path) == {"train-0": f"attempt {FAN_IN - 1}"}


# ---- the manifest ----


def manifest_args(**changes):
    from ocr_core.command.checks import parse_arguments
    from ocr_core.command.parser import build_parser
    from tests.testbed.recipes import model_facts

    facts = model_facts("ovis_ocr2")
    flags = [[f"--{key}"] if value is None else [f"--{key}", value] for key, value in changes.items()]
    argv = ["in", "./out", *[item for flag in flags for item in flag]]
    return parse_arguments(build_parser("ovis-ocr2-server.py", facts, "server"), argv), facts


def test_the_fingerprint_sees_every_setting_that_changes_a_rows_text():
    base = fingerprint_of(*manifest_args(), "ovis-ocr2-server.py", None, 12)
    for option, value, field in [
        ("input-config", "fr", "input_config"),
        ("image-column", "scan", "image_column"),
        ("id-column", "page", "id_column"),
        ("temperature", "0.3", "sampling"),
        ("model", "other/model", "model"),
    ]:
        changed = fingerprint_of(*manifest_args(**{option: value}), "ovis-ocr2-server.py", None, 12)
        assert differences(json.loads(json.dumps(base)), changed) == [field], option
    parse = fingerprint_of(*manifest_args(), "ovis-ocr2-server.py", None, 12)
    keeping_tags = fingerprint_of(*manifest_args(**{"keep-image-tags": None}), "ovis-ocr2-server.py", None, 12)
    assert differences(parse, keeping_tags) == ["parse_options"]
    assert differences(base, fingerprint_of(*manifest_args(), "ovis-ocr2.py", None, 12)) == ["script"]
    assert differences(base, fingerprint_of(*manifest_args(), "ovis-ocr2-server.py", "abc123", 12)) == [
        "input_revision"
    ]
    assert differences(base, fingerprint_of(*manifest_args(), "ovis-ocr2-server.py", None, 13)) == ["input_rows"]


def test_a_limit_that_cuts_pages_off_is_recorded_but_changes_no_row_s_text():
    """A larger --max-tokens (or a --max-model-len among the serve flags) only redoes the pages it cut off, which
    are error rows; under --ignore-eos every page runs to max_tokens on purpose, so there it changes the text."""
    base = fingerprint_of(*manifest_args(), "ovis-ocr2-server.py", None, 12)
    raised = fingerprint_of(*manifest_args(**{"max-tokens": "100"}), "ovis-ocr2-server.py", None, 12)
    assert differences(base, raised) == [] and limit_changes(base, raised) == [
        f"max_tokens {base['sampling']['max_tokens']} -> 100"
    ]
    longer = fingerprint_of(
        *manifest_args(**{"extra-serve-args=--max-model-len=9000": None}), "ovis-ocr2-server.py", None, 12
    )
    assert differences(base, longer) == [] and limit_changes(base, longer) == ["--max-model-len None -> 9000"]
    eos = fingerprint_of(*manifest_args(**{"ignore-eos": None}), "ovis-ocr2-server.py", None, 12)
    eos_raised = fingerprint_of(
        *manifest_args(**{"ignore-eos": None, "max-tokens": "100"}), "ovis-ocr2-server.py", None, 12
    )
    assert differences(eos, eos_raised) == ["sampling"]


def edited_facts(facts, **changes):
    """The facts of an edited copy of the script: its FACTS with `changes`."""
    return dataclasses.replace(facts, **changes)


def test_the_fingerprint_sees_the_facts_that_change_text_whatever_their_source():
    settings, facts = manifest_args()
    base = fingerprint_of(settings, facts, "ovis-ocr2-server.py", None, 12)
    band = list(facts.serve_args)
    band[band.index("--mm-processor-kwargs") + 1] = '{"images_kwargs": {"min_pixels": 3136, "max_pixels": 1003520}}'
    for changes, field in [
        ({"serve_args": band}, "serve_args"),
        ({"prompt": "Read the page."}, "prompt"),
        ({"sampling": {**facts.sampling, "top_p": 0.5}}, "sampling"),
        ({"max_pixels": 1003520}, "image_limits"),
        ({"retry_temperature": 0.7}, "retry_temperature"),
    ]:
        edited = fingerprint_of(settings, edited_facts(facts, **changes), "ovis-ocr2-server.py", None, 12)
        assert differences(json.loads(json.dumps(base)), edited) == [field], changes
    faster = edited_facts(facts, serve_args=[*facts.serve_args, "--max-num-seqs", "8"])
    assert differences(base, fingerprint_of(settings, faster, "ovis-ocr2-server.py", None, 12)) == []


def test_the_mismatch_message_names_the_fields_and_both_ways_out():
    message = settings_mismatch_message(
        "./out (config default, split train)", {"model": "a"}, {"model": "b"}, ["model"]
    )
    assert "model: 'a' -> 'b'" in message and "--config" in message and "--overwrite" in message


# ---- what in OUTPUT is ours ----


def test_only_files_of_configs_with_a_manifest_are_ours():
    names = [
        ".gitattributes", "README.md", ".ocr-progress/ovis/train/manifest.json",
        ".ocr-progress/ovis/train/part-1.parquet", "ovis/train-00000-of-00001.parquet",
        "data/train-00000-of-00001.parquet", "notes.txt", ".ocr-progress/default/test/part-2.parquet",
    ]  # fmt: skip
    owned = owned_configs(names)
    assert owned == {"ovis"}
    assert foreign_files(names, owned) == ["data/train-00000-of-00001.parquet", "notes.txt"]
    assert foreign_files(names, owned | {"default"}) == ["notes.txt"]


def test_root_home_current_and_input_folders_are_unsafe_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "in" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert "root" in unsafe_local_output("/", "x")
    assert "home" in unsafe_local_output("~", "x")
    assert "current" in unsafe_local_output(".", "x")
    assert "INPUT" in unsafe_local_output("./in", "./in")
    assert "INPUT" in unsafe_local_output("./in/sub", "./in")
    monkeypatch.chdir(tmp_path / "home")
    assert "INPUT" in unsafe_local_output(str(tmp_path), str(tmp_path / "in"))
    assert unsafe_local_output("./out", "./in") is None


# ---- the card ----


def card_facts(config: str | None, **changes) -> CardFacts:
    values = dict(
        source="in/ds", split="train", config=config, data_prefix=config or "data", model="m/x", script="s.py",
        image="img", mode="server", command="hf jobs uv run ...", output_column="markdown", error_column="ocr_error",
        rows=3, errors=1, truncated=0, failed_text="[OCR ERROR]", runs=(), pages_per_s=1.5, tokens_per_s=100.0,
        window=32,
    )  # fmt: skip
    return CardFacts(**{**values, **changes})


def test_the_card_keeps_other_configs_their_metadata_and_the_prose_outside_our_section():
    theirs = {
        "license": "mit",
        "configs": [{"config_name": "nano", "data_files": [{"split": "train", "path": "nano/train-*"}]}],
        "dataset_info": [
            {"config_name": "nano", "features": [{"name": "markdown", "dtype": "string"}]},
            {"config_name": "ovis", "features": [{"name": "old", "dtype": "int64"}]},
        ],
    }
    existing = f"---\n{yaml.safe_dump(theirs)}---\n# Comparison\n\nMy notes.\n"
    first = render_card(existing, card_facts("ovis"))
    second = render_card(first, card_facts("ovis", rows=7))
    meta, body = split_front_matter(second)
    assert meta["license"] == "mit"
    assert [config["config_name"] for config in meta["configs"]] == ["nano", "ovis"]
    assert [info["config_name"] for info in meta["dataset_info"]] == ["nano"]
    assert body.count("My notes.") == 1 and body.count("config `ovis`") == 1
    assert "| rows | 7 |" in body and "| rows | 3 |" not in body


def test_a_single_config_dataset_info_of_the_replaced_config_goes():
    existing = "---\ndataset_info:\n  features:\n  - name: old\n    dtype: int64\n---\n"
    meta, _ = split_front_matter(render_card(existing, card_facts(None)))
    assert "dataset_info" not in meta


# ---- leases ----


REPO = "someone/ocr-out"


def lease(run_id: str, key: str, started: float, expires: float) -> Lease:
    return Lease(run_id, key, "host", 1, started, expires)


def test_which_slices_overlap():
    assert overlaps("all", "0-of-2") and overlaps("1-of-2", "1-of-2") and overlaps("0-of-2", "0-of-4")
    assert not overlaps("0-of-2", "1-of-2")
    assert lease_key(None) == "all" and lease_key((1, 4)) == "1-of-4"


def test_live_overlapping_leases_of_other_runs_conflict():
    mine = lease("me", "0-of-2", 100.0, 1000.0)
    leases = [
        mine,
        lease("expired", "0-of-2", 50.0, 99.0),
        lease("neighbour", "1-of-2", 60.0, 1000.0),
        lease("whole", "all", 70.0, 1000.0),
        lease("twin", "0-of-2", 80.0, 1000.0),
    ]
    assert [other.run_id for other in conflicts(leases, mine, now=100.0)] == ["whole", "twin"]


def two_runs_of_one_command(tmp_path):
    """Two machines' view of one Hub output, and each run's lease, the first started before the second."""
    from ocr_core.command.checks import parse_arguments
    from ocr_core.command.parser import build_parser
    from ocr_core.planning.make_plan import command_plan
    from tests.testbed.recipes import model_facts

    hub = FolderHub(tmp_path / "hub")
    facts = model_facts("ovis_ocr2")
    settings = parse_arguments(build_parser("ovis-ocr2-server.py", facts, "server"), ["in", REPO])
    plan = command_plan(settings, facts, "server")
    runs = []
    for name in ("early", "late"):
        destination = Destination(REPO, "train", None, hub, work_dir=tmp_path / name)
        destination.progress_dir.mkdir(parents=True)
        runs.append((destination, claim_lease(destination, destination.listing(), f"run-{name}", plan)))
    return plan, runs


@pytest.mark.parametrize("landing", [["late", "early"], ["early", "late"]], ids=["crossed", "in-order"])
def test_of_two_runs_started_at_once_the_lease_that_landed_first_wins_whatever_the_start_times(tmp_path, landing):
    """The race: the later run pushed and confirmed its lease while the earlier run's commit was in flight; the
    earlier run then saw it but, having started first, did not step back, and both did every page."""
    plan, runs = two_runs_of_one_command(tmp_path)
    by_name = dict(zip(("early", "late"), runs))
    first, second = (by_name[name] for name in landing)
    mirror = hold_lease(first[0], first[0].listing(), first[1], plan)
    try:
        with pytest.raises(LeaseTaken, match=first[1].run_id):
            hold_lease(second[0], second[0].listing(), second[1], plan)
        assert [lease.run_id for lease in first[0].leases(first[0].listing())] == [first[1].run_id]
    finally:
        release(first[0], first[1], LocalLocks(first[0].progress_dir, WHOLE), mirror)


def test_the_history_names_the_first_landed_lease_for_every_run_alike():
    early, late = lease("early", "all", 100.0, 1000.0), lease("late", "all", 101.0, 1000.0)
    titles = ["OCR progress: manifest", lease_commit_title(late), lease_commit_title(early), lease_commit_title(late)]
    assert first_landed([early, late], titles) is late
    assert first_landed([late, early], titles) is late
    legacy = lease("legacy", "all", 102.0, 1000.0)
    assert first_landed([early, late, legacy], titles) is legacy, "a lease older than the titles counts as first"


def test_two_runs_on_one_machine_cannot_hold_one_slice(tmp_path):
    first = LocalLocks(tmp_path, "all")
    first.acquire("here")
    with pytest.raises(RunningHere, match=f"pid {os.getpid()}"):
        LocalLocks(tmp_path, "0-of-2").acquire("here")
    first.release()
    shard_0, shard_1 = LocalLocks(tmp_path, "0-of-2"), LocalLocks(tmp_path, "1-of-2")
    shard_0.acquire("here")
    shard_1.acquire("here")
    with pytest.raises(RunningHere):
        LocalLocks(tmp_path, "all").acquire("here")
    shard_0.release()
    shard_1.release()


def test_the_card_says_which_inference_info_entry_describes_which_column():
    _, body = split_front_matter(render_card(None, card_facts(None, runs=(("text_v1", "earlier/model"),))))
    assert "1. `text_v1`: earlier/model\n2. `markdown`: m/x (this run)" in body
    assert "`[OCR ERROR]` where the row failed" in body


def mirrored_store(tmp_path: Path) -> tuple[ProgressMirror, FolderHub, list[str]]:
    """FAN_IN parts of 4 rows (one merge due), every one of them already mirrored to a folder Hub."""
    hub = FolderHub(tmp_path / "hub")
    hub.create_repo("someone/out", private=False)
    destination = Destination("someone/out", "train", None, hub, work_dir=tmp_path / "work")
    ids = write_parts(destination.progress_dir, count=FAN_IN, rows_per_part=4)
    mirror = ProgressMirror(destination, 300.0, {"model": "m"})
    mirror.upload()
    return mirror, hub, ids


def hub_rows(hub: FolderHub) -> set[str]:
    folder = hub.repo("someone/out") / ".ocr-progress" / "default" / "train"
    return set(read_results(folder)["row_id"].to_pylist())


def test_an_os_error_while_reading_a_part_sets_nothing_aside_and_deletes_nothing_on_the_hub(tmp_path, monkeypatch):
    """A brief 'too many open files' is no sign of bad bytes: the part stays, and so does its Hub copy."""
    mirror, hub, ids = mirrored_store(tmp_path)
    folder = mirror.destination.progress_dir
    victim = part_files(folder)[3]
    monkeypatch.setattr(pq, "ParquetFile", partial(guarded_parquet_file, pq.ParquetFile, victim))
    with pytest.raises(OSError):
        read_results(folder)
    with pytest.raises(OSError):
        list(compact(folder))
    monkeypatch.undo()
    assert victim.exists() and not list(folder.glob("*.unreadable"))
    mirror.compact()
    mirror.upload()
    assert hub_rows(hub) == set(ids)
    assert texts(folder).keys() == set(ids)


def guarded_parquet_file(real, victim: Path, source, *args, **kwargs):
    """pyarrow opens a path itself; fail it as the OS would for the one crowded file."""
    if Path(str(source)) == victim:
        raise OSError(errno.EMFILE, "Too many open files", str(source))
    return real(source, *args, **kwargs)


def test_a_part_with_bad_bytes_here_keeps_its_hub_copy_through_compaction(tmp_path):
    """This machine's copy is damaged; the Hub's may be the only good one, so merging never deletes it."""
    mirror, hub, ids = mirrored_store(tmp_path)
    folder = mirror.destination.progress_dir
    damaged = part_files(folder)[5]
    damaged.write_bytes(b"PAR1 not really parquet")
    mirror.compact()
    mirror.upload()
    assert not damaged.exists() and damaged.with_name(damaged.name + ".unreadable").exists()
    assert hub_rows(hub) == set(ids), "compaction deleted the Hub's copy of a part set aside here"


def test_a_failed_attempts_record_is_not_a_result_and_an_outcome_replaces_it(tmp_path):
    log = ResultLog(tmp_path, "run")
    log.add(RowResult(0, "train-0", text="done"))
    log.add(RowResult(1, "train-1", error="server answered 500", strikes=2))
    log.add(RowResult(2, "train-2", error="earlier error"))
    log.flush()
    assert sorted(read_results(tmp_path)["row_id"].to_pylist()) == ["train-0", "train-2"]
    assert read_strikes(tmp_path) == {"train-1": 2}
    log.add(RowResult(2, "train-2", error="retried", strikes=1))
    log.add(RowResult(1, "train-1", error="failed every attempt: 3 attempts got no answer"))
    log.flush()
    assert read_strikes(tmp_path) == {"train-2": 1}, "a set-aside row starts from none; a retry in progress counts"
    assert sorted(read_results(tmp_path)["row_id"].to_pylist()) == ["train-0", "train-1"]
