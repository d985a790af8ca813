"""Each shard publishes its own slice: contiguous ranges of the selected rows, its own data files and facts file in
its own commit, a card that counts the shards that are in (settled against concurrent shards), and --columns.

A fake vLLM server answers (its text is derived from the request, so a page's text is the same whichever shard
sends it); the Hub is the folder double.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ocr_core.inputs.source import InputSelection, load_source
from ocr_core.publishing import assembly as assemble_module
from ocr_core.publishing import slices as slices_module
from ocr_core.publishing.card import CardFacts
from ocr_core.publishing.slices import publish_slice, slice_facts, slice_results
from ocr_core.store.compaction import FAN_IN, compact
from ocr_core.store.front_matter import split_front_matter
from ocr_core.store.output import Destination
from ocr_core.store.progress import RESULT_SCHEMA, ResultLog, RowResult, part_files
from tests.test_resume_publish import REPO, SAMPLES, load, repeated, run_main, served
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub

SCRIPT = "ovis-ocr2-server.py"
COMPARED = ["image", "page_id", "format", "width", "height", "markdown", "ocr_error"]


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


def hub_card(hub: FolderHub) -> str:
    return (hub.repo(REPO) / "README.md").read_text()


def rows(dataset: datasets.Dataset, names: list[str] = COMPARED) -> list[dict]:
    """The rows as plain values, each image as its bytes."""
    plain = dataset.cast_column("image", datasets.Image(decode=False))
    return [{name: row[name]["bytes"] if name == "image" else row[name] for name in names} for row in plain]


def test_a_shard_reads_and_owns_only_its_contiguous_range():
    whole = load_source(InputSelection(str(SAMPLES)))
    second = load_source(InputSelection(str(SAMPLES), shard=(1, 2)))
    assert second.owned() == whole.ids[6:]
    assert [row.index for row in second.rows(skip=set())] == whole.selected[6:]
    shuffled = load_source(InputSelection(str(SAMPLES), max_samples=5, shuffle=True, seed=3, shard=(0, 2)))
    assert shuffled.owned() == load_source(InputSelection(str(SAMPLES), max_samples=5, shuffle=True, seed=3)).ids[:2]


def test_each_shard_publishes_its_own_slice_and_the_union_is_the_unsharded_run(server, tmp_path, capsys, monkeypatch):
    """One row per data file, so the file names must sort in shard order and, within a shard, in part order."""
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(assemble_module, "SHARD_BYTES", 1)
    hub = FolderHub(tmp_path / "hub")
    source = repeated(tmp_path / "in", copies=2)
    argv = [str(source), REPO, *served(server)]

    code, summary, err = run_main(SCRIPT, [*argv, "--shard", "1/2"], capsys, hub=hub)
    assert code == 0 and summary["rows"] == 12 and summary["done_this_run"] == 12, err
    publishes = [commit for commit in hub.commits if commit.message.startswith("OCR with")]
    assert len(publishes) == 1 and all("-00001-of-00002-" in name for name in publishes[0].added if "/train-" in name)
    assert "**1 of 2 shards are in.**" in hub_card(hub)
    expected = rows(datasets.load_from_disk(str(source)).select(range(12, 24)), COMPARED[:5])
    assert rows(load(hub.repo(REPO)), COMPARED[:5]) == expected

    code, summary, err = run_main(SCRIPT, [*argv, "--shard", "0/2"], capsys, hub=hub)
    assert code == 0 and summary["done_this_run"] == 12, err
    sharded = load(hub.repo(REPO))
    card = hub_card(hub)
    assert "**2 of 2 shards are in.**" in card and "| rows | 24 |" in card
    assert "load_dataset returns the finished shards" not in card
    assert len([name for name in hub.list_files(REPO) if name.startswith("data/")]) == 24

    other = "someone/unsharded"
    assert run_main(SCRIPT, [str(source), other, *served(server)], capsys, hub=hub)[0] == 0
    unsharded = datasets.load_dataset(str(hub.repo(other)), split="train", cache_dir=str(tmp_path / "cache"))
    assert rows(sharded) == rows(unsharded)
    assert [json.loads(info)[0]["model_id"] for info in sharded["inference_info"]] == [server.state.model] * 24


def test_another_number_of_shards_is_refused(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    argv = [str(SAMPLES), REPO, *served(server)]
    assert run_main(SCRIPT, [*argv, "--shard", "0/2"], capsys, hub=hub)[0] == 0
    code, _, err = run_main(SCRIPT, [*argv, "--shard", "0/3"], capsys, hub=hub)
    assert code == 2 and "shards: 2 -> 3" in err


def test_columns_carries_only_the_named_input_columns_and_the_card_shows_the_join(server, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server), "--columns", "page_id"], capsys)
    assert code == 0, err
    output = load(out)
    assert output.column_names == ["page_id", "markdown", "ocr_error", "inference_info"]
    assert output["page_id"] == datasets.load_dataset(str(SAMPLES), split="train")["page_id"]
    card = (out / "README.md").read_text()
    assert 'text = dict(zip(ocr["page_id"], ocr["markdown"]))' in card
    code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server), "--columns", "nope"], capsys)
    assert code == 2 and "--columns names ['nope']" in err


def test_a_shard_publishes_only_its_own_rows_of_a_shared_progress_folder(tmp_path):
    log = ResultLog(tmp_path, "20260101T000000Z-aaaaaa")
    for index in range(6):
        log.add(RowResult(index, f"train-{index}", text=f"old {index}"))
    log.flush()
    newer = ResultLog(tmp_path, "20260101T000001Z-bbbbbb")
    newer.add(RowResult(4, "train-4", text="new 4"))
    newer.flush()
    results = slice_results(tmp_path, ["train-3", "train-4", "train-5"])
    assert dict(zip(results["row_id"].to_pylist(), results["text"].to_pylist())) == {
        "train-3": "old 3",
        "train-4": "new 4",
        "train-5": "old 5",
    }


def test_stale_files_are_this_shard_s_own_and_other_layouts_never_another_shard_s():
    destination = Destination("./out", "train", None, None)
    names = [
        "data/train-00000-of-00002-00000.parquet",
        "data/train-00001-of-00002-00000.parquet",
        "data/train-00001-of-00002-00001.parquet",
        "data/train-00000-of-00001.parquet",
        "data/train-00000-of-00003-00000.parquet",
        "data/test-00000-of-00001-00000.parquet",
    ]
    assert destination.stale_data_files(names, ["data/train-00001-of-00002-00000.parquet"], (1, 2)) == [
        "data/train-00000-of-00001.parquet",
        "data/train-00000-of-00003-00000.parquet",
        "data/train-00001-of-00002-00001.parquet",
    ]


def template(rows: int) -> CardFacts:
    return CardFacts(
        source="someone/scans", split="train", config=None, data_prefix="data", model="m/m", script=SCRIPT,
        image="vllm/vllm-openai:v0", mode="server", command="uv run x.py", output_column="markdown",
        error_column="ocr_error", rows=rows, errors=0, truncated=0, failed_text="[OCR ERROR]", runs=(),
        pages_per_s=1.0, tokens_per_s=10.0, window=8,
    )  # fmt: skip


def slice_file(folder: Path, shard: int) -> dict[str, Path]:
    name = f"data/train-{shard:05d}-of-00002-00000.parquet"
    path = folder / f"slice-{shard}.parquet"
    pq.write_table(pa.table({"markdown": [f"text {shard}"]}), path)
    return {name: path}


@pytest.mark.parametrize("attempts", [slices_module.CARD_SETTLE_ATTEMPTS, 0])
def test_two_shards_committing_at_once_leave_a_card_that_counts_both(tmp_path, monkeypatch, attempts):
    """Shard 1 publishes while shard 0 is between reading the facts and its commit: shard 0's card, committed
    last, was rendered without shard 1; settling it afterwards must count both (and without settling it does not)."""
    monkeypatch.setattr(slices_module, "CARD_SETTLE_ATTEMPTS", attempts)
    hub = FolderHub(tmp_path / "hub")
    hub.create_repo(REPO, private=False)
    destination = Destination(REPO, "train", None, hub)

    def shard_1_meanwhile(message: str, create_pr: bool) -> None:
        if message == "shard 0":
            hub.refuse = None
            facts = slice_facts((1, 2), template(1), ["data/train-00001-of-00002-00000.parquet"])
            publish_slice(destination, slice_file(tmp_path, 1), facts, template(1), "shard 1")

    hub.refuse = shard_1_meanwhile
    facts = slice_facts((0, 2), template(1), ["data/train-00000-of-00002-00000.parquet"])
    publish_slice(destination, slice_file(tmp_path, 0), facts, template(1), "shard 0")
    card = hub_card(hub)
    meta, _ = split_front_matter(card)
    assert meta["configs"] == [{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*"}]}]
    assert ("**2 of 2 shards are in.**" in card and "| rows | 2 |" in card) == bool(attempts)
    assert sorted(name for name in hub.list_files(REPO) if name.startswith("data/")) == [
        "data/train-00000-of-00002-00000.parquet",
        "data/train-00001-of-00002-00000.parquet",
    ]


def progress_part(folder: Path, name: str, index: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([RowResult(index, f"train-{index}", text="t").__dict__], schema=RESULT_SCHEMA)
    pq.write_table(table, folder / name)


def test_a_shard_fetches_only_its_own_progress_files_and_unsharded_ones(tmp_path):
    hub = FolderHub(tmp_path / "hub")
    hub.create_repo(REPO, private=False)
    prefix = hub.repo(REPO) / ".ocr-progress" / "default" / "train"
    names = [
        "part-shard-00000-of-00002-20261130T000000Z-aaaaaa-00000.parquet",
        "merged-shard-00000-of-00002-20261130T000001Z-bbbbbb.parquet",
        "part-shard-00001-of-00002-20261130T000000Z-cccccc-00000.parquet",
        "merged-shard-00001-of-00002-20261130T000001Z-dddddd.parquet",
        "part-20261129T000000Z-eeeeee-00000.parquet",
        "merged-20261129T000001Z-ffffff.parquet",
    ]
    for index, name in enumerate(names):
        progress_part(prefix, name, index)
    shard_1 = Destination(REPO, "train", None, hub, work_dir=tmp_path / "machine", shard=(1, 2))
    assert shard_1.pull_progress() == 4
    assert sorted(path.name for path in part_files(shard_1.progress_dir)) == sorted(names[2:])
    whole = Destination(REPO, "train", None, hub, work_dir=tmp_path / "other-machine")
    assert whole.pull_progress() == 6


def test_a_shard_merges_only_its_own_progress_files(tmp_path):
    mine = [f"part-shard-00001-of-00002-20261130T000000Z-aaaaaa-{n:05d}.parquet" for n in range(FAN_IN)]
    theirs = [f"part-shard-00000-of-00002-20261130T000000Z-bbbbbb-{n:05d}.parquet" for n in range(FAN_IN)]
    for index, name in enumerate(mine + theirs):
        progress_part(tmp_path, name, index)
    removed = [name for names in compact(tmp_path, "shard-00001-of-00002-") for name in names]
    assert sorted(removed) == sorted(mine)
    merged, *left = sorted(path.name for path in part_files(tmp_path))
    assert merged.startswith("merged-shard-00001-of-00002-") and left == sorted(theirs)


def parquet_input(folder: Path, files: int = 4) -> Path:
    """The 12 sample pages as `files` parquet files of 3 rows each, as a Hub dataset stores them."""
    samples = datasets.load_dataset(str(SAMPLES), split="train")
    for number in range(files):
        part = samples.shard(files, number, contiguous=True)
        part.to_parquet(str(folder / "data" / f"train-{number:05d}-of-{files:05d}.parquet"))
    return folder


@pytest.mark.parametrize(
    ("shard", "samples", "files", "offset"),
    [((1, 4), None, 1, 3), ((1, 3), None, 2, 3), ((0, 2), None, 2, 0), ((1, 2), 5, 2, 0), ((3, 4), 5, 1, 3)],
)
def test_a_shard_of_parquet_files_loads_only_the_files_of_its_range(tmp_path, shard, samples, files, offset):
    folder = parquet_input(tmp_path / "in")
    whole = load_source(InputSelection(str(folder), max_samples=samples))
    part = load_source(InputSelection(str(folder), max_samples=samples, shard=shard))
    assert (len(part.dataset), part.offset, part.input_rows) == (3 * files, offset, 12)
    assert part.owned() == whole.ids[part.span.start : part.span.stop]
    positions = list(part.span)
    assert part.cells(positions) == whole.cells(positions)
    assert part.input_table(positions).to_pylist() == whole.input_table(positions).to_pylist()


def test_two_shards_of_parquet_files_publish_the_unsharded_run_s_rows(server, tmp_path, capsys):
    folder = parquet_input(tmp_path / "in")
    out, whole = tmp_path / "out", tmp_path / "whole"
    for shard in ("1/2", "0/2"):
        code, _, err = run_main(SCRIPT, [str(folder), str(out), *served(server), "--shard", shard], capsys)
        assert code == 0 and "reading 2 of the input's 4 file(s)" in err, err
    assert run_main(SCRIPT, [str(folder), str(whole), *served(server)], capsys)[0] == 0
    assert rows(load(out)) == rows(load(whole))
    manifest = json.loads((out / ".ocr-progress" / "default" / "train" / "manifest.json").read_text())
    assert (manifest["input_rows"], manifest["shards"]) == (12, 2)


def test_overwrite_with_other_settings_removes_every_shard_s_published_rows(server, tmp_path, capsys, monkeypatch):
    """Shards publish one by one, so after --overwrite no slice made the old way may stay loadable beside new ones."""
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    argv = [str(SAMPLES), REPO, *served(server)]
    for shard in ("0/2", "1/2"):
        assert run_main(SCRIPT, [*argv, "--shard", shard], capsys, hub=hub)[0] == 0
    code, _, err = run_main(SCRIPT, [*argv, "--shard", "0/2", "--temperature", "0.5", "--overwrite"], capsys, hub=hub)
    assert code == 0, err
    assert [name for name in hub.list_files(REPO) if "-00001-of-00002" in name] == []
    assert load(hub.repo(REPO))["page_id"] == datasets.load_dataset(str(SAMPLES), split="train")["page_id"][:6]
    assert "**1 of 2 shards are in.**" in hub_card(hub)
