"""The error paths a new user met (issue 50, items 7 and 8): an OUTPUT that cannot be created, and a folder input
holding a file that is not an image. A fake vLLM server answers; nothing reaches the Hub.

An OUTPUT nobody can write must end as a command to change (exit 2, with the fix), before any work, not as an
internal error that promises a resume; and the dataset a run publishes must open row by row the way the run's own
last line says, also where a page could not be read.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import datasets
import pytest

from tests.test_resume_publish import SAMPLES, run_main, served
from tests.testbed.fake_server import fake_server

SCRIPT = "lighton-ocr3-saturate.py"
PAGES = Path(__file__).resolve().parents[1] / "samples" / "pages"
NOT_CREATABLE = ["/sys/ocr-vllm-test-out", "/proc/ocr-vllm-test-out"]
"""Folders even root cannot create (sysfs and procfs refuse them), where a chmod'ed folder would not stop root."""


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


@pytest.mark.parametrize("output", NOT_CREATABLE)
def test_an_output_that_cannot_be_created_is_a_command_to_change(server, tmp_path, capsys, output):
    """It ended with exit 1, "internal error: OSError ..." and the advice to rerun the same command."""
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), output, *served(server)], capsys)
    assert code == 2, err[-2000:]
    assert summary["exit_code"] == 2 and "internal error" not in summary["failure"]
    assert output in summary["failure"] and "writable folder" in summary["failure"]
    assert "rerun the same command" not in err.lower()
    assert server.state.answered == 0


def test_a_read_only_output_folder_is_refused_before_any_work(server, tmp_path, capsys, monkeypatch):
    """A read-only mount answers EROFS; as root no chmod reproduces it, so the file system's answer is injected."""
    out = tmp_path / "out"

    mkdir = Path.mkdir

    def read_only_under_out(path: Path, *args, **kwargs) -> None:
        if path == out or out in path.parents:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        mkdir(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only_under_out)
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server)], capsys)
    assert code == 2, err[-2000:]
    assert "Read-only file system" in summary["failure"] and "writable folder" in summary["failure"]
    assert "rows to do" not in err and "row(s) selected" not in err


def folder_with_a_text_jpg(folder: Path) -> Path:
    """The sample pages as files, one `.jpg` among them holding text: what a scanner folder with a stray note has."""
    shutil.copytree(PAGES, folder)
    note = folder / "page-06b-note.jpg"
    note.write_text("not an image, a note saved under the wrong name\n")
    return note


def run_line(err: str) -> str:
    sentence = err.strip().splitlines()[-1]
    return sentence[sentence.index("datasets.load_dataset(") :].removesuffix(')".')


def test_every_row_of_a_folder_with_a_file_that_is_not_an_image_opens(server, tmp_path, capsys):
    """The run's own `load_dataset` line opened the output, and reading the text file's row raised
    UnidentifiedImageError: its bytes were kept in the Image column as they came."""
    pages = tmp_path / "scans"
    note = folder_with_a_text_jpg(pages)
    code, summary, err = run_main(SCRIPT, [str(pages), str(tmp_path / "out"), *served(server)], capsys)
    assert code == 0, err[-2000:]
    assert summary["errors"] == 1
    rows = eval(run_line(err), {"datasets": datasets})
    assert len(rows) == 13
    read = [rows[index] for index in range(len(rows))]
    broken = [row for row in read if row["source_file"] == note.name]
    assert len(broken) == 1 and broken[0]["image"] is None
    begin = note.read_bytes()[:16]
    assert (
        broken[0]["ocr_error"]
        == f"bad image: not a readable image: in no image format Pillow reads (its bytes begin {begin!r})"
    )
    assert all(row["image"] is not None and row["ocr_error"] is None for row in read if row is not broken[0])


def test_a_refused_run_leaves_no_new_output_folder_behind(server, tmp_path, capsys):
    """Refused after it had taken OUTPUT (a --columns name the input lacks), a run left a folder of lock files."""
    out = tmp_path / "out"
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, "--columns", "nosuch")], capsys)
    assert code == 2 and "nosuch" in summary["failure"], err[-2000:]
    assert not out.exists()


def test_a_refused_run_keeps_an_output_folder_it_did_not_create(server, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, "--columns", "nosuch")], capsys)
    assert code == 2, err[-2000:]
    assert out.is_dir()


def test_a_run_stopped_after_its_first_results_keeps_the_folder_it_created(server, tmp_path, capsys):
    """Only bookkeeping goes: a folder with results in it stays, whatever ended the run."""
    out = tmp_path / "out"
    code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, "--max-samples", "2")], capsys)
    assert code == 0, err[-2000:]
    code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, "--columns", "nosuch")], capsys)
    assert code == 2 and (out / "README.md").exists()


def test_a_run_refused_by_the_server_it_meets_leaves_no_new_output_folder(server, tmp_path, capsys):
    """Refused once the pages' reader had opened the progress folder (a --server of another model): it left the
    manifest and the progress folder's read lock behind."""
    out = tmp_path / "out"
    argv = [str(SAMPLES), str(out), *served(server, "--model", "another/model")]
    code, summary, err = run_main(SCRIPT, argv, capsys)
    assert code == 2 and "another/model" in summary["failure"], err[-2000:]
    assert not out.exists()
