"""The line of Python a run ends with opens that folder's rows as they are now, and so does a run's own reading of
a local input dataset (issue 35).

A datasets cache keys a local folder by its basename, config and card, not by its files, so a plain
`load_dataset(folder)` can answer with another folder's rows of the same name, or with this folder's rows of an
earlier run. Each test here leaves such an entry in its (own) cache first, then runs the advised line. What the
folder holds is read with pyarrow, past every cache. Runs use the fake vLLM server: the engine does not matter.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from tests.test_resume_publish import SAMPLES, run_main, served
from tests.testbed.env import UV
from tests.testbed.fake_server import fake_server

SCRIPT = "lighton-ocr3-saturate.py"


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


def ocr(capsys, server, folder: Path, *flags: str) -> str:
    """Runs the recipe into `folder`; returns the advised line of Python, inside the closing sentence's command."""
    code, _, err = run_main(SCRIPT, [str(SAMPLES), str(folder), *served(server, *flags)], capsys)
    assert code == 0, err
    sentence = err.strip().splitlines()[-1]
    code = shlex.split(sentence[sentence.index("open it with ") :].removesuffix("."))[-1]
    return code.removeprefix("import datasets; print(").removesuffix(")")


def opened(line: str) -> datasets.Dataset:
    return eval(line, {"datasets": datasets})


def from_the_card(folder: Path) -> datasets.Dataset:
    """What the folder's own card says opens it locally, run with the folder's path in place of the placeholder."""
    card = (folder / "README.md").read_text()
    line = card[card.index("In a local folder, open it with `") :].split("`")[1]
    return eval(line.replace("<this folder>", str(folder)), {"load_dataset": datasets.load_dataset})


def cached_the_old_way(folder: Path, config: str | None = None) -> int:
    """What a run used to advise: it leaves an entry keyed by the folder's name and card in the datasets cache."""
    return len(datasets.load_dataset(str(folder), config, split="train"))


def on_disk(folder: Path, config: str | None = None) -> list[str]:
    """The folder's page ids, read from its parquet files alone."""
    files = sorted((folder / (config or "data")).glob("train-*.parquet"))
    return [page for name in files for page in pq.read_table(name, columns=["page_id"])["page_id"].to_pylist()]


def test_another_output_of_the_same_name_does_not_answer(capsys, server, tmp_path):
    other, mine = tmp_path / "other" / "out", tmp_path / "mine" / "out"
    ocr(capsys, server, other, "--max-samples", "3")
    assert cached_the_old_way(other) == 3
    rows = opened(ocr(capsys, server, mine))
    assert list(rows["page_id"]) == on_disk(mine) and len(rows) == 12
    assert list(from_the_card(mine)["page_id"]) == on_disk(mine)


def test_an_extended_run_opens_with_every_row_it_added(capsys, server, tmp_path):
    out = tmp_path / "out"
    assert len(opened(ocr(capsys, server, out, "--max-samples", "3"))) == 3
    assert cached_the_old_way(out) == 3
    rows = opened(ocr(capsys, server, out, "--max-samples", "7"))
    assert list(rows["page_id"]) == on_disk(out) and len(rows) == 7


def test_a_rerun_over_the_same_rows_opens_with_its_own_text(capsys, server, tmp_path):
    out = tmp_path / "out"
    first = list(opened(ocr(capsys, server, out, "--max-samples", "4"))["markdown"])
    rerun = ocr(capsys, server, out, "--max-samples", "4", "--temperature", "0.5", "--overwrite")
    written = pq.read_table(sorted((out / "data").glob("train-*.parquet"))[0])["markdown"].to_pylist()
    assert written != first and list(opened(rerun)["markdown"]) == written


def test_a_config_opens_with_its_own_rows_beside_another_folders_config(capsys, server, tmp_path):
    other, mine = tmp_path / "other" / "out", tmp_path / "mine" / "out"
    ocr(capsys, server, other, "--max-samples", "2", "--config", "tiny")
    assert cached_the_old_way(other, "tiny") == 2
    line = ocr(capsys, server, mine, "--max-samples", "5", "--config", "tiny")
    assert "'tiny'" in line
    rows = opened(line)
    assert list(rows["page_id"]) == on_disk(mine, "tiny") and len(rows) == 5
    assert list(from_the_card(mine)["page_id"]) == on_disk(mine, "tiny")


def test_a_local_input_is_read_as_it_is_not_as_another_folder_of_its_name_was(capsys, server, tmp_path):
    """Our sample input's card has the same `configs:` as our outputs', so a folder named `dataset` is keyed alike."""
    fewer = tmp_path / "fewer" / "dataset"
    shutil.copytree(SAMPLES, fewer)
    table = pq.read_table(SAMPLES / "data" / "train-00000-of-00001.parquet").slice(0, 5)
    pq.write_table(table, fewer / "data" / "train-00000-of-00001.parquet")
    ocr(capsys, server, tmp_path / "all-pages", "--max-samples", "12")
    code, summary, err = run_main(SCRIPT, [str(fewer), str(tmp_path / "five-pages"), *served(server)], capsys)
    assert code == 0, err
    assert summary["rows"] == 5 and on_disk(tmp_path / "five-pages") == table["page_id"].to_pylist()


def test_the_closing_sentence_opens_the_output_with_a_command_any_shell_with_uv_runs(capsys, server, tmp_path):
    """The sentence offered `datasets.load_dataset(...)`, a line of Python that needs datasets and Pillow, which the
    user's Python (the demo's machine) may lack. It now offers a command that uv runs with both, here offline, from
    a folder that holds another project (uv must not sync it) and with only uv on PATH."""
    out = tmp_path / "scans-ocr"
    code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, "--max-samples", "3")], capsys)
    assert code == 0, err
    sentence = err.strip().splitlines()[-1]
    command = sentence[sentence.index("open it with ") + len("open it with ") :].removesuffix(".")
    assert command.startswith("uv run "), sentence
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "unrelated"\nversion = "0"\ndependencies = ["nope-x"]\n'
    )
    env = {
        "PATH": f"{UV.parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), "UV_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "cache"), "UV_PYTHON": sys.executable,
    }  # fmt: skip
    opened = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert opened.returncode == 0, opened.stderr[-3000:]
    assert "num_rows: 3" in opened.stdout, opened.stdout
