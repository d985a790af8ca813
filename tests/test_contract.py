"""CONTRACT.md against an output a recipe builds: every file, column, type, field and the resume rule it states.

The statements are read from CONTRACT.md's tables and its reader code, and the output is checked with pyarrow and
json alone, so the document cannot drift from what a run writes. A fake vLLM server answers (the engine is not
the point); the output is a local folder, whose layout is the Hub's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from ocr_core.store import layout
from ocr_core.store.progress import RESULT_SCHEMA, ResultLog, RowResult, finished_ids, read_results
from tests.testbed.env import REPO_ROOT
from tests.testbed.fake_server import fake_server
from tests.testbed.recipes import run_entry

CONTRACT = REPO_ROOT / "CONTRACT.md"
PAGES = REPO_ROOT / "samples" / "pages"
SAMPLES = REPO_ROOT / "samples" / "dataset"
SCRIPT = "ovis-ocr2-server.py"
PROGRESS = Path(".ocr-progress") / "default" / "train"
CODE = re.compile(r"`([^`]+)`")


# ---- CONTRACT.md, read as data ----


def tables() -> list[list[dict[str, str]]]:
    """Every table of CONTRACT.md, as rows keyed by the header's cells (`\\|` inside a cell is a `|`)."""
    found, rows = [], None
    for line in [*CONTRACT.read_text().splitlines(), ""]:
        if not line.startswith("|"):
            if rows:
                found.append(rows)
            rows = None
            continue
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if rows is None:
            header, rows = cells, []
        elif not set("".join(cells)) <= set("-:"):
            rows.append(dict(zip(header, cells, strict=True)))
    return found


def table(*columns: str) -> list[dict[str, str]]:
    """The one table whose header is exactly these columns."""
    (found,) = [rows for rows in tables() if list(rows[0]) == list(columns)]
    return found


def code(cell: str) -> str:
    """A cell's first code span: the name it states."""
    return CODE.search(cell)[1]


def file_patterns() -> dict[str, tuple[re.Pattern[str], str]]:
    """Each documented path, as a regular expression over paths inside OUTPUT, with where it is written."""
    placeholders = {
        code(row["placeholder"]): code(row["pattern"]) for row in table("placeholder", "pattern", "meaning")
    }
    patterns = {}
    for row in table("path", "where", "what it holds"):
        path = code(row["path"])
        pieces = re.split(r"(<[A-Za-z]+>)", path)
        regex = "".join(f"(?:{placeholders[piece]})" if piece in placeholders else re.escape(piece) for piece in pieces)
        patterns[path] = (re.compile(regex), row["where"])
    return patterns


def reader_code() -> str:
    return CONTRACT.read_text().split("```python\n")[1].split("```")[0]


# ---- an output, built as a user builds one ----


def served(server) -> list[str]:
    model = ["--server", server.url, "--model", server.state.model, "--max-model-len", "1024"]
    return [*model, "--max-tokens", "16", "--temperature", "0"]


@pytest.fixture(scope="module")
def sharded_output(tmp_path_factory) -> Path:
    """Four pages, one of them torn (an error row), written as two shards into one local OUTPUT."""
    folder = tmp_path_factory.mktemp("contract")
    pages = folder / "scans"
    pages.mkdir()
    for page in sorted(PAGES.iterdir())[:3]:
        shutil.copy(page, pages)
    whole = (PAGES / "page-01-report.png").read_bytes()
    (pages / "page-00-torn.png").write_bytes(whole[: len(whole) // 2])
    out = folder / "scans-ocr"
    with fake_server() as server:
        for shard in ("0/2", "1/2"):
            assert run_entry(SCRIPT, [str(pages), str(out), *served(server), "--shard", shard]) == 0
    return out


def files_of(out: Path) -> list[str]:
    return sorted(path.relative_to(out).as_posix() for path in out.rglob("*") if path.is_file())


def test_every_file_of_the_output_is_one_the_contract_names(sharded_output):
    patterns = file_patterns()
    unnamed = [name for name in files_of(sharded_output) if not any(p.fullmatch(name) for p, _ in patterns.values())]
    assert unnamed == []
    seen = {path for path, (pattern, _) in patterns.items() if any(map(pattern.fullmatch, files_of(sharded_output)))}
    local = {path for path, (_, where) in patterns.items() if where in ("both", "local")}
    merged, set_aside = (
        f".ocr-progress/<config>/<split>/{name}" for name in ("merged-<tag><run>.parquet", "<name>.unreadable")
    )
    assert local - {merged, set_aside} <= seen, "a file the contract promises is missing"


def test_the_layout_module_names_files_as_the_contract_says():
    """Names a short local run never writes (merged files, leases) are checked from the module that names them."""
    patterns = [pattern for pattern, _ in file_patterns().values()]
    shard = (1, 4)
    run = layout.shard_tag(shard) + "20250101T000000Z-0a1b2c"
    prefix = layout.progress_prefix("tiny", "test")
    names = [
        layout.CARD,
        layout.data_file_name(layout.data_prefix("tiny"), "test", shard, 3),
        layout.data_file_name(layout.data_prefix(None), "train", (0, 1), 0),
        f"{prefix}/{layout.MANIFEST}",
        f"{prefix}/{layout.part_name(run, 7)}",
        f"{prefix}/{layout.merged_name(layout.shard_tag(shard), '20250101T000000Z-0a1b2c')}",
        f"{prefix}/{layout.merged_name('', '20250101T000000Z-0a1b2c')}",
        f"{prefix}/{layout.slice_facts_name(shard)}",
        f"{prefix}/{layout.lease_file_name('1-of-4', run)}",
        f"{prefix}/{layout.lease_file_name('launcher', '20250101T000000Z-0a1b2c')}",
        f"{prefix}/{layout.lease_lock_name('all')}",
        f"{prefix}/{layout.FOLDER_LOCK}",
        f"{prefix}/{layout.part_name(run, 7)}{layout.SET_ASIDE_SUFFIX}",
    ]
    assert [name for name in names if not any(pattern.fullmatch(name) for pattern in patterns)] == []


def test_progress_records_hold_the_contracts_columns_in_its_order(sharded_output):
    documented = [(code(row["column"]), row["type"]) for row in table("column", "type", "meaning")]
    parts = sorted((sharded_output / PROGRESS).glob("part-*.parquet"))
    assert parts
    for part in parts:
        schema = pq.read_schema(part)
        assert [(field.name, str(field.type)) for field in schema] == documented, part.name
    assert [(field.name, str(field.type)) for field in RESULT_SCHEMA] == documented


def test_published_rows_hold_the_input_then_the_contracts_columns_and_errors_are_rows(sharded_output):
    rows = table("column", "type", "set by", "meaning")
    documented = [(code(row["column"]), row["type"]) for row in rows if row["column"].startswith("`")]
    files = sorted((sharded_output / "data").glob("*.parquet"))
    published = [row for file in files for row in pq.read_table(file).to_pylist()]
    schema = pq.read_schema(files[0])
    assert [(field.name, str(field.type)) for field in schema][-len(documented) :] == documented
    assert schema.names[: -len(documented)] == ["image", "source_file", "page_index"], "the input's own columns"
    assert [row["source_file"] for row in published] == sorted(
        path.name for path in (sharded_output.parent / "scans").iterdir()
    )
    failed_text = code(rows[0]["meaning"].split("; ")[1])
    (torn,) = [row for row in published if row["ocr_error"] is not None]
    assert torn["source_file"] == "page-00-torn.png" and torn["markdown"] == failed_text == "[OCR ERROR]"
    assert all(row["markdown"] and row["markdown"] != failed_text for row in published if row is not torn)
    assert all(isinstance(json.loads(row["inference_info"]), list) for row in published)
    records = [row for part in (sharded_output / PROGRESS).glob("*.parquet") for row in pq.read_table(part).to_pylist()]
    (record,) = [row for row in records if row["row_id"] == "page-00-torn.png"]
    assert record["text"] is None and record["error"] == torn["ocr_error"] and record["strikes"] is None


def test_the_manifest_holds_the_contracts_fields(sharded_output):
    rows = table("field", "present", "meaning")
    manifest = json.loads((sharded_output / PROGRESS / "manifest.json").read_text())
    assert set(manifest) <= {code(row["field"]) for row in rows}
    assert {code(row["field"]) for row in rows if row["present"] == "always"} <= set(manifest)
    assert manifest["shards"] == 2 and manifest["input_rows"] == 4


def test_each_shards_slice_facts_hold_the_contracts_fields_and_name_its_files(sharded_output):
    fields = {code(row["field"]) for row in table("field", "meaning")}
    for index in range(2):
        facts = json.loads((sharded_output / PROGRESS / f"slice-{index:05d}-of-00002.json").read_text())
        assert set(facts) == fields and facts["shard"] == [index, 2]
        assert facts["files"] == [f"data/train-{index:05d}-of-00002-00000.parquet"]
        assert all((sharded_output / name).is_file() for name in facts["files"])


def test_the_cards_data_files_pattern_is_the_contracts(sharded_output):
    stated = "`<prefix>/<split>-*`"
    assert stated in CONTRACT.read_text()
    front = yaml.safe_load((sharded_output / "README.md").read_text().split("---\n")[1])
    (config,) = front["configs"]
    assert config["config_name"] == "default"
    assert config["data_files"] == [{"split": "train", "path": "data/train-*"}]


# ---- a program that does not import this project resumes as a rerun does ----


def contract_reader(progress: Path, retry_errors: bool) -> list[str]:
    """CONTRACT.md's reader, run by a Python that cannot import ocr_core: the rows a rerun still has to do."""
    harness = (
        "import json, sys\n"
        "sys.modules['ocr_core'] = sys.modules['ocr_models'] = None\n"
        f"exec(compile({reader_code()!r}, 'CONTRACT.md', 'exec'))\n"
        f"progress = Path({str(progress)!r})\n"
        f"print(json.dumps(rows_to_do(progress, dataset_row_ids(progress), retry_errors={retry_errors})))\n"
    )
    done = subprocess.run([sys.executable, "-c", harness], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def project_to_do(progress: Path, retry_errors: bool) -> list[str]:
    """The rows this project's resume skips none of, over the 12 rows of the sample dataset."""
    done = finished_ids(read_results(progress, ["error"]), retry_errors)
    return [row_id for row_id in (f"train-{position}" for position in range(12)) if row_id not in done]


def test_a_program_that_does_not_import_the_project_finds_the_rows_a_rerun_does(tmp_path, monkeypatch):
    """A first run of 5 rows, one of which never gets an answer (an error row, after failed-attempts records), and
    then a failed-attempts record of that row newer than its error row, as a --retry-errors run that is stopped
    leaves it: the reader's rows to do, with and without --retry-errors, are the ones the project does not skip,
    and the ones the full rerun then works on."""
    from ocr_core.shapes import page_requests

    monkeypatch.setattr(page_requests, "BACKOFF_BASE_S", 0.05)
    out = tmp_path / "out"
    progress = out / PROGRESS
    with fake_server() as server:
        server.state.poison = True
        first = [str(SAMPLES), str(out), *served(server), "--retry-budget", "2", "--max-samples", "5"]
        assert run_entry(SCRIPT, first) == 0
        assert contract_reader(progress, retry_errors=False) == project_to_do(progress, False)
        assert len(project_to_do(progress, False)) == 7
        results = read_results(progress, ["error"])
        (failed,) = results.filter(pc.is_valid(results["error"]))["row_id"].to_pylist()
        log = ResultLog(progress, "20250101T000000Z-0a1b2c")
        log.add(RowResult(int(failed.removeprefix("train-")), failed, error="no answer", attempts=1, strikes=1))
        log.flush()
        for retry_errors in (False, True):
            assert contract_reader(progress, retry_errors) == project_to_do(progress, retry_errors)
        to_do = contract_reader(progress, retry_errors=True)
        assert len(to_do) == 8 and failed in contract_reader(progress, retry_errors=False)

        server.state.poison = False
        before = {path.name for path in progress.glob("*.parquet")}
        assert run_entry(SCRIPT, [str(SAMPLES), str(out), *served(server), "--retry-errors"]) == 0
    new = [path for path in progress.glob("*.parquet") if path.name not in before]
    redone = {row["row_id"] for path in new for row in pq.read_table(path).to_pylist() if row["strikes"] is None}
    assert redone == set(to_do)
    assert contract_reader(progress, retry_errors=True) == []
