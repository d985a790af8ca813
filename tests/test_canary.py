"""The canary: a job whose first answers are no text ("!!!!", empty, loops, cut off) stops at once with the image
tag and the exact job command; a job with one real answer among its first pages never does.

The decision is tested as scenarios; the whole path runs in-process against the fake vLLM server answering
"!!!!!!!!" for every page (the engine is not the point: the real CPU engine's no-false-alarm check is every
recipe test that runs the tiny model with the canary on, which is the default).
"""

from __future__ import annotations

import datasets
import pytest

from ocr_core.errors import JobFailed
from ocr_core.inputs.source import RowInput
from ocr_core.judging.canary import (
    EMPTY,
    REPEATED,
    Canary,
    CanaryContext,
    canary_verdict,
    degenerate_kind,
    repeated_unit,
)
from ocr_core.planning.plan_records import rules_of
from ocr_core.shapes.llm_batches import OfflineRunner
from ocr_core.shapes.tally import ProgressBar
from ocr_core.store.progress import ResultLog, RowResult, read_results
from tests.test_offline_faults import PAGE, FakeLLM, completion, recipe
from tests.test_resume_publish import SAMPLES, run_main, served
from tests.testbed.fake_server import fake_server

LOOP_ERROR = "repetition loop: output hit max_tokens repeating '!' 900 times after 2 attempt(s); text holds the trimmed"
CUT_ERROR = "truncated: the answer hit max_tokens (16) before the model finished; text holds what was written"
CONTEXT = CanaryContext("nanonets/Nanonets-OCR2-3B", "vllm/vllm-openai:v0.10.2", "hf jobs uv run ... --retry-errors")


# ---- the decision ----


@pytest.mark.parametrize(
    ("text", "error", "kind"),
    [
        ("!!!!!!!!", None, REPEATED),
        ("! ! ! ! ! ! ! !", None, REPEATED),
        ("<unk><unk><unk><unk>", None, REPEATED),
        ("", None, EMPTY),
        ("  \n ", None, EMPTY),
        ("!", LOOP_ERROR, "repetition loop"),
        ("A long page that ran out of tokens", CUT_ERROR, "truncated"),
        ("# Minutes\n\nThe meeting opened at 7 pm.", None, None),
        ("...", None, None),
        ("Page 14", "only frame 1 of 3 of this multi-frame image was read", None),
        (None, "bad image: not a readable image", None),
    ],
)
def test_degenerate_kinds(text, error, kind):
    assert degenerate_kind(text, error) == kind


def test_a_repeated_unit_must_cover_the_whole_answer():
    assert repeated_unit("!!!!") == "!"
    assert repeated_unit("abcabcabcabc") == "abc"
    assert repeated_unit("!!!") is None
    assert repeated_unit("!!!!!!!x") is None
    assert repeated_unit("word1 word2 word1 word2") is None


def test_every_answer_degenerate_is_a_verdict_one_real_answer_clears_it():
    assert canary_verdict([REPEATED] * 7 + [EMPTY]) == REPEATED
    assert canary_verdict([REPEATED] * 7 + [None]) is None
    assert canary_verdict([]) is None


def canary(folder, pages: int = 8) -> tuple[Canary, ResultLog]:
    log = ResultLog(folder, "20260101T000000Z-aaaaaa", flush_rows=1000)
    return Canary(log, CONTEXT, pages), log


def answered(index: int, text: str | None, error: str | None = None) -> RowResult:
    return RowResult(index, f"train-{index}", text=text, error=error)


def test_eight_bang_answers_stop_the_job_and_flag_their_rows(tmp_path):
    watcher, log = canary(tmp_path)
    results = [answered(index, "!!!!!!!!") for index in range(8)]
    for result in results[:7]:
        log.add(result)
        watcher.record(result)
    log.add(results[7])
    with pytest.raises(JobFailed) as caught:
        watcher.record(results[7])
    message = str(caught.value)
    assert "first 8 answers are all degenerate" in message and "'!!!!!!!!'" in message
    assert "vllm/vllm-openai:v0.10.2" in message and "hf jobs uv run" in message and "--no-canary" in message
    stored = read_results(tmp_path).to_pylist()
    assert len(stored) == 8
    assert all(row["error"].startswith("degenerate answer: one character or token repeated") for row in stored)


def test_the_verdict_reads_the_answers_among_the_first_pages(tmp_path):
    watcher, _ = canary(tmp_path, pages=3)
    watcher.record(answered(0, None, "bad image: empty"))
    watcher.record(answered(1, "!!!!!!!!"))
    with pytest.raises(JobFailed, match="the first 2 answers are all degenerate"):
        watcher.record(answered(2, ""))


def test_pages_without_an_answer_are_the_breakers_to_judge(tmp_path):
    watcher, _ = canary(tmp_path, pages=2)
    for index in range(6):
        watcher.record(answered(index, None, "bad image: empty"))


def test_the_canary_looks_only_at_the_first_answers(tmp_path):
    watcher, _ = canary(tmp_path, pages=2)
    watcher.record(answered(0, "real text"))
    watcher.record(answered(1, "!!!!!!!!"))
    for index in range(2, 40):
        watcher.record(answered(index, "!!!!!!!!"))


def test_all_truncated_names_max_tokens(tmp_path):
    watcher, _ = canary(tmp_path, pages=3)
    watcher.record(answered(0, "long page", CUT_ERROR))
    watcher.record(answered(1, "long page", CUT_ERROR))
    with pytest.raises(JobFailed) as caught:
        watcher.record(answered(2, "long page", CUT_ERROR))
    assert "raise --max-tokens" in str(caught.value)


# ---- offline shape: the runner consults the canary ----


def test_the_offline_runner_stops_on_the_canary(tmp_path):
    facts, args = recipe()
    log = ResultLog(tmp_path, "20260101T000000Z-aaaaaa", flush_rows=1000)
    runner = OfflineRunner(
        FakeLLM(lambda n: completion("!!!!!!!!")),
        facts,
        rules_of(facts, args),
        log,
        ProgressBar(40, 0),
        Canary(log, CONTEXT),
    )
    rows = [RowInput(index, f"train-{index}", {"bytes": PAGE, "path": None}) for index in range(40)]
    with pytest.raises(JobFailed, match="canary"):
        runner.run(iter(rows), 16)
    stored = read_results(tmp_path).to_pylist()
    assert len(stored) == 8 and all(row["error"].startswith("degenerate answer") for row in stored)


# ---- server shape, end to end against the fake endpoint ----


@pytest.fixture
def bang_input(tmp_path):
    samples = datasets.load_dataset(str(SAMPLES), split="train")
    folder = tmp_path / "in"
    datasets.concatenate_datasets([samples] * 4).save_to_disk(str(folder))
    return folder


def test_a_bang_endpoint_stops_the_job_within_sixteen_pages_and_a_fixed_one_redoes_them(bang_input, tmp_path, capsys):
    out = tmp_path / "out"
    with fake_server(text="!!!!!!!!") as server:
        argv = [str(bang_input), str(out), *served(server, "--max-inflight", "4")]
        code, summary, _ = run_main("nanonets-ocr2-server.py", argv, capsys)
        assert code == 1 and summary["exit_code"] == 1
        assert 8 <= summary["done_this_run"] <= 16 and summary["rows"] == 48
        failure = summary["failure"]
        assert failure.startswith("canary:") and "vllm/vllm-openai:v0.10.2" in failure
        assert "hf jobs" not in failure, "a job cannot read this machine's folders or reach its loopback server"
        assert f"uv run nanonets-ocr2-server.py {bang_input} {out}" in failure
        assert "--retry-errors" in failure and "this run used vLLM fake" in failure
        server.state.text = None
        code, summary, _ = run_main("nanonets-ocr2-server.py", [*argv, "--retry-errors"], capsys)
    assert code == 0, summary
    assert summary["errors"] == 0 and summary["resumed"] == 0 and summary["done_this_run"] == 48


def test_no_canary_lets_the_same_job_finish(bang_input, tmp_path, capsys):
    with fake_server(text="!!!!!!!!") as server:
        argv = [str(bang_input), str(tmp_path / "out"), *served(server), "--no-canary"]
        code, summary, _ = run_main("nanonets-ocr2-server.py", argv, capsys)
    assert code == 0 and summary["done_this_run"] == 48 and summary["errors"] == 0


def test_a_hub_runs_job_command_leaves_a_loopback_server_to_the_job():
    """Hub input, output and model: a job can redo the run, and it starts its own server; the loopback address of
    the machine that ran it names nothing there."""
    from ocr_core.command.checks import parse_arguments
    from ocr_core.command.parser import build_parser
    from ocr_core.command.rerun import rerun_command
    from tests.testbed.recipes import model_facts

    facts = model_facts("nanonets_ocr2")
    argv = ["someone/scans", "someone/scans-ocr", "--server", "http://127.0.0.1:8000", "--retry-errors"]
    command = rerun_command(
        "nanonets-ocr2-server.py", facts, argv, parse_arguments(build_parser("s", facts, "server"), argv)
    )
    assert command.startswith("hf jobs uv run --flavor l4x1") and "someone/scans someone/scans-ocr" in command
    assert "127.0.0.1" not in command and command.endswith("--retry-errors")
    remote = ["someone/scans", "someone/scans-ocr", "--server=https://ocr.example.com"]
    kept = rerun_command(
        "nanonets-ocr2-server.py", facts, remote, parse_arguments(build_parser("s", facts, "server"), remote)
    )
    assert kept.endswith("--server=https://ocr.example.com")
