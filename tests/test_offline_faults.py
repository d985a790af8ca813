"""The offline shape's fault suite: an engine double that refuses, or answers oddly, fed by the real OfflineRunner.

The runner needs vllm's SamplingParams (imported, never run); the engine itself is a small fake, so each failure
is exact and costs nothing.
"""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError
from PIL import Image

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.errors import JobFailed
from ocr_core.facts import ModelFacts, Parsed, default_parse
from ocr_core.inputs.source import RowInput
from ocr_core.planning.plan_records import engine_request, rules_of
from ocr_core.settings import Settings
from ocr_core.shapes.llm_batches import OfflineRunner
from ocr_core.shapes.signals import Interrupted, StopSignals
from ocr_core.shapes.tally import ProgressBar
from ocr_core.store.progress import ResultLog, read_results
from tests.testbed.recipes import model_facts

Reply = Callable[[int], "SimpleNamespace | Exception"]


def page_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(buffer, format="PNG")
    return buffer.getvalue()


PAGE = page_png()


def completion(text: str = "page text", finish_reason: str = "stop") -> SimpleNamespace:
    return SimpleNamespace(text=text, finish_reason=finish_reason, token_ids=[1, 2, 3])


class FakeLLM:
    """Answers the n-th conversation it is ever given with `reply(n)`; a raised reply fails the whole batch.

    `calls` keeps each call's number of conversations and its sampling parameters.
    """

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.asked = 0
        self.calls: list[tuple[int, object]] = []
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(get_diff_sampling_param=dict))

    def chat(self, conversations: list, params: object, use_tqdm: bool, chat_template_kwargs: object) -> list:
        self.calls.append((len(conversations), params))
        replies = []
        for _ in conversations:
            replies.append(self.reply(self.asked))
            self.asked += 1
        failed = [reply for reply in replies if isinstance(reply, Exception)]
        if failed:
            raise failed[0]
        return [SimpleNamespace(outputs=[reply], prompt_token_ids=[0] * 10) for reply in replies]


def recipe(*argv: str) -> tuple[ModelFacts, Settings]:
    facts = model_facts("nanonets_ocr2")
    return facts, parse_arguments(build_parser("recipe.py", facts, "offline"), ["in", "./out", *argv])


def run_offline(
    folder: Path,
    reply: Reply,
    count: int = 4,
    facts: ModelFacts | None = None,
    batch_size: int = 4,
    page: bytes = PAGE,
) -> tuple[dict[str, dict], ProgressBar, JobFailed | None]:
    default_facts, args = recipe()
    progress = ProgressBar(count, 0)
    log = ResultLog(folder, "20260101T000000Z-aaaaaa", flush_rows=1000)
    runner = OfflineRunner(
        FakeLLM(reply), facts or default_facts, rules_of(facts or default_facts, args), log, progress
    )
    rows = [RowInput(index, f"train-{index}", {"bytes": page, "path": None}) for index in range(count)]
    failure = None
    try:
        runner.run(iter(rows), batch_size)
    except JobFailed as exc:
        failure = exc
    return {row["row_id"]: row for row in read_results(folder).to_pylist()}, progress, failure


def test_every_page_refused_by_the_engine_stops_the_job(tmp_path):
    refused = ValueError("chat_template_kwargs enable_thinking is not accepted")
    results, _, failure = run_offline(tmp_path, lambda n: refused, count=40)
    assert failure is not None
    message = str(failure)
    assert "engine rejected the page" in message and "chat template" in message and "--retry-errors" in message
    assert len(results) == 8
    assert all(row["error"].startswith("engine rejected the page") for row in results.values())


def test_a_failing_parse_hook_fails_its_row_only(tmp_path):
    facts, _ = recipe()

    def parse(text: str, options: Mapping[str, Any]) -> Parsed:
        if text == "poison":
            raise ValueError("cannot parse")
        return default_parse(text, options)

    replies = {1: completion("poison")}
    results, _, failure = run_offline(
        tmp_path, lambda n: replies.get(n, completion()), facts=dataclasses.replace(facts, parse=parse)
    )
    assert failure is None
    assert results["train-1"]["error"] == "internal error while parsing the answer: ValueError: cannot parse"
    assert [results[f"train-{i}"]["text"] for i in (0, 2, 3)] == ["page text"] * 3


def test_a_failing_build_content_hook_fails_its_row_only(tmp_path, monkeypatch):
    facts, _ = recipe()
    calls = []

    def build_content(self: ModelFacts, image_part: dict) -> list[dict]:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("prompt template broke")
        return [image_part]

    monkeypatch.setattr(ModelFacts, "build_content", build_content)  # a message that cannot be built for one page

    results, _, failure = run_offline(tmp_path, lambda n: completion(), facts=facts)
    assert failure is None
    errors = [results[f"train-{i}"]["error"] for i in range(4)]
    assert errors.count(None) == 3
    assert "internal error while preparing the page: RuntimeError: prompt template broke" in errors


@pytest.mark.parametrize("batch_size", [1, 4])
def test_truncated_pages_keep_their_text_and_are_counted(tmp_path, batch_size):
    replies = {0: completion("half a pa", "length")}
    results, progress, failure = run_offline(tmp_path, lambda n: replies.get(n, completion()), batch_size=batch_size)
    assert failure is None
    assert results["train-0"]["text"] == "half a pa"
    assert results["train-0"]["error"].startswith("truncated: the answer hit max_tokens")
    assert (progress.tally.truncated, progress.tally.errors, progress.tally.loops) == (1, 1, 0)


def test_a_multi_frame_page_keeps_its_text_and_says_what_was_not_read(tmp_path):
    frames = [Image.new("RGB", (64, 48), colour) for colour in ("white", "gray")]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
    results, _, failure = run_offline(tmp_path, lambda n: completion(), count=1, page=buffer.getvalue())
    assert failure is None
    assert results["train-0"]["text"] == "page text"
    assert results["train-0"]["error"].startswith("only frame 1 of 2")


LOOPING_PAGE = "# Survey\n\n" + "<td>0</td>" * 300


def run_with_a_loop(folder: Path, second: SimpleNamespace) -> tuple[dict[str, dict], FakeLLM, ModelFacts, float]:
    """Three pages in one batch on LightOnOCR's card; page 1 loops, and its resample answers `second`."""
    facts = model_facts("lighton_ocr3")
    args = parse_arguments(build_parser("recipe.py", facts, "offline"), ["in", "./out"])
    replies = {1: completion(LOOPING_PAGE, "length"), 3: second}
    llm = FakeLLM(lambda n: replies.get(n, completion()))
    runner = OfflineRunner(
        llm, facts, rules_of(facts, args), ResultLog(folder, "20260101T000000Z-aaaaaa"), ProgressBar(3, 0)
    )
    runner.run(iter([RowInput(index, f"train-{index}", {"bytes": PAGE, "path": None}) for index in range(3)]), 3)
    return {row["row_id"]: row for row in read_results(folder).to_pylist()}, llm, facts, args.temperature


def test_only_the_looping_page_is_resampled_once_at_the_retry_temperature(tmp_path):
    results, llm, facts, temperature = run_with_a_loop(tmp_path, completion(LOOPING_PAGE, "length"))
    assert [(count, params.temperature) for count, params in llm.calls] == [(3, temperature), (1, 0.2)]
    assert facts.retry_temperature == 0.2 != temperature
    looped = results["train-1"]
    assert looped["attempts"] == 2 and looped["text"] == "# Survey\n\n<td>0</td>"
    assert looped["error"].startswith("repetition loop") and "after 2 attempt(s)" in looped["error"]
    assert [results[f"train-{i}"]["error"] for i in (0, 2)] == [None, None]


def test_a_resample_that_finishes_is_a_clean_row_offline(tmp_path):
    results, llm, _, _ = run_with_a_loop(tmp_path, completion("# Survey"))
    assert len(llm.calls) == 2
    assert (results["train-1"]["text"], results["train-1"]["error"], results["train-1"]["attempts"]) == (
        "# Survey",
        None,
        2,
    )


def test_offline_sustained_counts_the_batches_done_before_the_last_was_sent(tmp_path):
    """An engine of known speed (each batch of 4 takes 0.1 s): the sustained interval runs from the first batch
    sent (the engine is loaded before it) to the last one sent, and counts the batches done by then: 40 pages/s."""

    def slow(n: int) -> SimpleNamespace:
        if n % 4 == 0:
            time.sleep(0.1)
        return completion()

    results, progress, failure = run_offline(tmp_path, slow, count=16, batch_size=4)
    assert failure is None and len(results) == 16
    figures = progress.tally.sustained()
    assert figures["sustained_pages"] == 12, "the last batch finishes after it was sent: not counted"
    assert 30 <= figures["sustained_pages_per_s"] <= 40 * 1.05


def engine_that_cannot_fetch_its_model(**_: Any) -> None:
    """What vLLM raises (CPU build, 2026-12-02) when the model's files must come from a Hub it cannot connect to."""
    try:
        try:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        except httpx.ConnectError as exc:
            raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub") from exc
    except LocalEntryNotFoundError as exc:
        raise OSError("We couldn't connect to 'http://127.0.0.1:9' to load the files") from exc


def engine_that_refuses_a_setting(**_: Any) -> None:
    raise ValueError("max_num_seqs must be at least 1")


def failure_to_build(monkeypatch, engine: Callable[..., None], *argv: str) -> str:
    """Why the engine could not be built, as the run says it (the GPU check passes: the engine is the one asked)."""
    import vllm

    from ocr_core.shapes import llm_batches

    monkeypatch.setattr(llm_batches, "check_gpu", lambda: None)
    monkeypatch.setattr(vllm, "LLM", engine)
    facts, settings = recipe(*argv)
    with pytest.raises(JobFailed) as failed:
        llm_batches.open_llm(engine_request(facts, settings), settings.verbose)
    return str(failed.value)


def test_an_engine_that_cannot_fetch_its_model_says_so_and_names_no_flag(monkeypatch):
    """Issue 44: a model download that could not connect ended with a hint about `--extra-serve-settings`, a flag
    that does not exist, about flags that had nothing to do with the failure."""
    said = failure_to_build(monkeypatch, engine_that_cannot_fetch_its_model)
    assert "cannot reach the Hub" in said and "--model" in said, said
    assert "--extra-serve" not in said, said


def test_an_engine_that_refuses_its_settings_names_the_flag_that_passed_them(monkeypatch):
    said = failure_to_build(monkeypatch, engine_that_refuses_a_setting, "--extra-serve-args=--max-num-seqs 0")
    assert "max_num_seqs must be at least 1" in said and "--extra-serve-args" in said, said
    assert "--extra-serve-settings" not in said


class SignalledLog(ResultLog):
    """A results log whose `at`-th added row is followed at once by a SIGTERM to this process: the stop lands in the
    middle of the runner's bookkeeping for that row, where a killed run's count once drifted from what it published."""

    def __init__(self, folder: Path, at: int) -> None:
        super().__init__(folder, "20260101T000000Z-bbbbbb", flush_rows=1000)
        self.at = at
        self.added = 0

    def add(self, result) -> None:
        super().add(result)
        self.added += 1
        if self.added == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("at", [1, 3, 6])
def test_a_stop_mid_row_counts_exactly_the_rows_it_publishes(tmp_path, at):
    """The summary's `done_this_run` is the tally's count and the rerun's `resumed` is what the log published; a
    SIGTERM between the two once published a row the summary did not count (16 resumed after a summary of 15)."""
    facts, args = recipe()
    progress = ProgressBar(8, 0)
    log = SignalledLog(tmp_path, at)
    stop = StopSignals()
    stop.install()
    try:
        runner = OfflineRunner(FakeLLM(lambda n: completion()), facts, rules_of(facts, args), log, progress, stop=stop)
        rows = [RowInput(index, f"train-{index}", {"bytes": PAGE, "path": None}) for index in range(8)]
        with pytest.raises(Interrupted):
            runner.run(iter(rows), 4)
    finally:
        stop.restore()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    published = read_results(tmp_path).num_rows
    assert published >= at
    assert progress.tally.done == published


def test_an_engine_that_takes_long_to_build_says_it_is_still_building(monkeypatch, capsys):
    """An offline recipe said "building the engine" and then nothing for the 2-3 minutes the build takes, where a
    server recipe says where its start stands every few seconds (here) until it is up."""
    import vllm

    from ocr_core.shapes import llm_batches

    monkeypatch.setattr(llm_batches, "BUILDING_NOTE_EVERY_S", 0.4)
    monkeypatch.setattr(llm_batches, "check_gpu", lambda: None)
    monkeypatch.setattr(vllm, "LLM", lambda **_: time.sleep(1.5) or "engine")
    facts, settings = recipe()
    assert llm_batches.open_llm(engine_request(facts, settings), settings.verbose) == "engine"
    notes = [line for line in capsys.readouterr().err.splitlines() if "engine still building after" in line]
    assert len(notes) >= 2, notes
    time.sleep(1.0)
    assert "still building" not in capsys.readouterr().err, "the notes went on after the engine was built"
