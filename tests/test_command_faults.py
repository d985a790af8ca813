"""Commands that looked fine and cost money later (issue 23): each is refused at start with exit 2 and the fix, or
fingerprinted so that a rerun which would mix text stops. A fake vLLM server answers; Hub runs use the folder double.
"""

from __future__ import annotations

import pytest

from ocr_core.store import hub as hub_module
from tests.test_resume_publish import REPO, SAMPLES, load, run_main, served, snapshot
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub

SCRIPT = "ovis-ocr2-server.py"


@pytest.fixture(autouse=True)
def quick_hub_retries(monkeypatch):
    monkeypatch.setattr(hub_module, "UPLOAD_BACKOFF_S", 0.01)


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


def refused(server, tmp_path, capsys, *flags: str) -> str:
    """Runs SCRIPT with `flags` into a fresh local OUTPUT; asserts exit 2 before any page, returns what it said."""
    out = tmp_path / "out"
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, *flags)], capsys)
    assert code == 2, err[-2000:]
    assert summary["exit_code"] == 2
    assert server.state.answered == 0, "pages were sent before the command was refused"
    assert not list(out.rglob("*.parquet")), "results were written before the command was refused"
    return err


# ---- item 12: a count of rows that is zero or negative ----


@pytest.mark.parametrize("count", ["-1", "0"])
def test_max_samples_of_zero_or_less_is_a_command_error(server, tmp_path, capsys, count):
    err = refused(server, tmp_path, capsys, "--max-samples", count)
    assert "--max-samples" in err and "at least 1" in err


@pytest.mark.parametrize(
    "flags",
    [("--max-tokens", "0"), ("--data-parallel-size", "0"), ("--api-server-count", "-2"), ("--max-restarts", "-1")],
    ids=lambda flags: " ".join(flags),
)
def test_other_counts_below_their_floor_are_command_errors(server, tmp_path, capsys, flags):
    err = refused(server, tmp_path, capsys, *flags)
    assert flags[0] in err and "at least" in err


# ---- item 9: uploads without pause ----


@pytest.mark.parametrize("seconds", ["0", "-5", "0.01"])
def test_upload_every_below_a_second_is_a_command_error(server, tmp_path, capsys, seconds):
    err = refused(server, tmp_path, capsys, "--upload-every", seconds)
    assert "--upload-every" in err and "at least 1" in err


# ---- item 8: two of the output's columns under one name ----


@pytest.mark.parametrize(
    "flags",
    [
        ("--error-column", "markdown"),
        ("--output-column", "inference_info"),
        ("--error-column", "inference_info"),
        ("--output-column", "ocr_error"),
    ],
    ids=["error=markdown", "output=inference_info", "error=inference_info", "output=ocr_error"],
)
def test_output_columns_that_clash_are_refused_at_start(server, tmp_path, capsys, flags):
    err = refused(server, tmp_path, capsys, *flags)
    assert "column" in err and "--output-column" in err and "--error-column" in err


def test_an_output_column_that_clashes_with_a_kept_input_column_is_refused_even_with_overwrite(
    server, tmp_path, capsys
):
    err = refused(server, tmp_path, capsys, "--output-column", "page_id", "--columns", "page_id", "--overwrite")
    assert "page_id" in err and "--columns" in err


# ---- item 3: config names that are the layout's own ----


@pytest.mark.parametrize("name", ["data", "default", "Default", ".ocr-progress", "a/b", "README.md", ""])
def test_config_names_that_collide_with_the_layout_are_refused(server, tmp_path, capsys, name):
    err = refused(server, tmp_path, capsys, "--config", name)
    assert "--config" in err and "letters" in err


def test_a_second_model_in_config_data_would_have_replaced_the_default_configs_rows(server, tmp_path, capsys):
    """What the refusal prevents: `--config data` wrote its files where the default config's live."""
    out = tmp_path / "out"
    assert run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, "--max-samples", "4")], capsys)[0] == 0
    before = snapshot(out)
    code, summary, _ = run_main(
        "nanonets-ocr2-server.py", [str(SAMPLES), str(out), "--config", "data", *served(server)], capsys
    )
    assert (code, summary["exit_code"]) == (2, 2)
    assert snapshot(out) == before and len(load(out)) == 4


# ---- item 4: serve flags that change the text ----


def test_a_rerun_with_other_text_changing_serve_flags_is_refused_and_names_them(server, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(SAMPLES), str(out), *served(server, "--max-samples", "3")]
    assert run_main(SCRIPT, argv, capsys)[0] == 0
    changed = [*argv, "--extra-serve-args", "--override-generation-config '{\"repetition_penalty\": 1.3}'"]
    code, _, err = run_main(SCRIPT, changed, capsys)
    assert code == 2, err[-2000:]
    assert "serve_args" in err and "--override-generation-config" in err


def test_serve_flags_that_only_change_speed_still_resume(server, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(SAMPLES), str(out), *served(server, "--max-samples", "3")]
    assert run_main(SCRIPT, argv, capsys)[0] == 0
    faster = [*argv, "--extra-serve-args", "--gpu-memory-utilization 0.8 --max-num-seqs 64"]
    code, summary, err = run_main(SCRIPT, faster, capsys)
    assert code == 0, err[-2000:]
    assert summary["resumed"] == 3 and summary["done_this_run"] == 0


# ---- item 5: shards that cut the rows differently ----


@pytest.mark.parametrize(
    "other",
    [("--max-samples", "8"), ("--shuffle",), ("--shuffle", "--seed", "7")],
    ids=["max-samples", "shuffle", "seed"],
)
def test_shards_with_another_selection_are_refused(server, tmp_path, capsys, monkeypatch, other):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    first = ["--shard", "0/2", "--max-samples", "10", "--shuffle"] if "--seed" in other else ["--shard", "0/2"]
    assert run_main(SCRIPT, [str(SAMPLES), REPO, *served(server, *first)], capsys, hub=hub)[0] == 0
    second = ["--shard", "1/2", *(["--max-samples", "10"] if "--seed" in other else []), *other]
    code, _, err = run_main(SCRIPT, [str(SAMPLES), REPO, *served(server, *second)], capsys, hub=hub)
    assert code == 2, err[-2000:]
    assert "selection" in err


def test_shards_with_one_selection_publish_every_row_once(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    for shard in ("0/2", "1/2"):
        argv = [str(SAMPLES), REPO, *served(server, "--shard", shard, "--max-samples", "7", "--shuffle")]
        assert run_main(SCRIPT, argv, capsys, hub=hub)[0] == 0
    ids = load(hub.repo(REPO))["page_id"]
    assert len(ids) == 7 and len(set(ids)) == 7


# ---- issue 32: flags as typed ----


def test_an_abbreviated_flag_is_refused_and_the_whole_one_named(server, tmp_path, capsys):
    """`--max-sample 2` must not pass for --max-samples: an abbreviation that works today breaks when a flag with
    the same start is added, and a job command copied from a log should say what it means."""
    err = refused(server, tmp_path, capsys, "--max-sample", "2")
    assert "--max-sample " in err and "did you mean --max-samples?" in err


def test_batch_size_on_a_server_recipe_names_max_inflight(server, tmp_path, capsys):
    err = refused(server, tmp_path, capsys, "--batch-size", "8")
    assert "--batch-size" in err and "--max-inflight" in err


def test_max_inflight_on_an_offline_recipe_names_batch_size(capsys):
    from ocr_core.command.checks import parse_arguments
    from ocr_core.command.parser import build_parser
    from tests.testbed.recipes import model_facts

    with pytest.raises(SystemExit) as stopped:
        parse_arguments(
            build_parser("lighton-ocr3.py", model_facts("lighton_ocr3"), "offline"), ["a", "./b", "--max-inflight", "4"]
        )
    assert stopped.value.code == 2 and "--batch-size" in capsys.readouterr().err
