"""The answer judge: loops, one resample, trimming, --ignore-eos, truncation and values a column cannot hold.

Both shapes grade answers through `judge`, so these scenarios cover the server and the offline recipes alike.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import ModuleType

import datasets
import pyarrow as pa

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.facts import ModelFacts
from ocr_core.inputs.columns import Columns
from ocr_core.inputs.source import InputSelection, load_source
from ocr_core.judging.answers import judge
from ocr_core.planning.plan_records import answer_rules
from ocr_core.publishing.assembly import assemble
from ocr_core.settings import Settings
from ocr_core.store.progress import ResultLog, RowResult, read_results
from ocr_models import hpd_parsing
from tests.testbed.recipes import model_facts

SAMPLE_DATASET = Path(__file__).resolve().parent.parent / "samples" / "dataset"
PAGE = "# Survey\n\nRiver levels rose in March."
LOOP_UNIT = "<td>0</td>"


def recipe(module: ModuleType, *argv: str) -> tuple[ModelFacts, Settings]:
    facts = model_facts(module)
    return facts, parse_arguments(build_parser("recipe.py", facts, "server"), ["in", "./out", *argv])


def looping_page() -> str:
    return PAGE + "\n\n" + LOOP_UNIT * 300


def test_finished_page_is_a_clean_success():
    facts, args = recipe("nanonets_ocr2")
    verdict = judge(f"  {PAGE}\n", "stop", facts, answer_rules(args), resampled=False, attempts=1)
    assert (verdict.resample, verdict.text, verdict.error) == (False, PAGE, None)


def test_repeating_text_that_finished_is_not_a_loop():
    facts, args = recipe("nanonets_ocr2")
    verdict = judge(looping_page(), "stop", facts, answer_rules(args), resampled=False, attempts=1)
    assert verdict.error is None
    assert verdict.text == looping_page()


def test_loop_is_resampled_once_where_the_card_allows_sampling():
    facts, args = recipe("lighton_ocr3")
    assert facts.retry_temperature is not None
    assert judge(looping_page(), "length", facts, answer_rules(args), resampled=False, attempts=1).resample


def test_loop_after_the_resample_is_flagged_and_trimmed():
    facts, args = recipe("lighton_ocr3")
    verdict = judge(looping_page(), "length", facts, answer_rules(args), resampled=True, attempts=2)
    assert not verdict.resample
    assert verdict.error.startswith("repetition loop") and "after 2 attempt(s)" in verdict.error
    assert verdict.text == PAGE + "\n\n" + LOOP_UNIT


def test_loop_of_a_model_without_a_trimmer_keeps_one_copy():
    facts, args = recipe("nanonets_ocr2")
    assert facts.retry_temperature is None
    verdict = judge(looping_page(), "length", facts, answer_rules(args), resampled=False, attempts=1)
    assert not verdict.resample
    assert verdict.error.startswith("repetition loop")
    assert "text holds the trimmed output" in verdict.error
    assert verdict.text.count(LOOP_UNIT) == 1
    assert verdict.text.startswith(PAGE)


def test_ignore_eos_runs_are_neither_loops_nor_truncated():
    facts, args = recipe("lighton_ocr3", "--ignore-eos")
    verdict = judge(looping_page(), "length", facts, answer_rules(args), resampled=False, attempts=1)
    assert (verdict.resample, verdict.error) == (False, None)
    assert verdict.text == looping_page()


def test_truncated_page_keeps_its_text_and_says_so():
    facts, args = recipe("nanonets_ocr2", "--max-tokens", "700")
    verdict = judge(PAGE, "length", facts, answer_rules(args), resampled=False, attempts=1)
    assert verdict.text == PAGE
    assert verdict.error.startswith("truncated: the answer hit max_tokens (700)")
    assert "raise --max-tokens" in verdict.error


def test_page_that_filled_the_context_names_max_model_len():
    facts, args = recipe("nanonets_ocr2", "--max-model-len", "20000")
    args = dataclasses.replace(args, max_tokens=None)
    verdict = judge(PAGE, "length", facts, answer_rules(args), resampled=False, attempts=1)
    assert verdict.text == PAGE
    assert verdict.error.startswith("truncated: the answer filled the context (--max-model-len 20000)")
    assert "raise --max-model-len" in verdict.error


def test_loop_that_finished_by_its_stop_token_is_not_resampled():
    facts, args = recipe("lighton_ocr3")
    verdict = judge(looping_page(), "stop", facts, answer_rules(args), resampled=False, attempts=1)
    assert (verdict.resample, verdict.error, verdict.text) == (False, None, looping_page())


def test_hpd_parse_survives_absurd_numbers():
    facts, args = recipe("hpd_parsing")
    answer = f"<BLOCK>text [1, 2, {'9' * 400}, 4.5]<CHILD>Hello"
    parsed = facts.parse(answer, args)
    assert parsed.text == "Hello"
    assert parsed.extra["hpd_blocks"][0]["bbox"][:2] == [1, 2]
    assert parsed.extra["hpd_blocks"][0]["bbox"][3] == 4


def hpd_answer(bbox: list[int]) -> str:
    return f"<BLOCK>title [{', '.join(map(str, bbox))}]<CHILD>Annual report<BLOCK>text [0, 60, 1000, 900]<CHILD>Body"


def test_value_that_does_not_fit_its_column_makes_the_row_an_error():
    facts, args = recipe("hpd_parsing")
    verdict = judge(hpd_answer([0, 0, 2**40, 50]), "stop", facts, answer_rules(args), resampled=False, attempts=1)
    assert verdict.text == "Annual report\n\nBody"
    assert "cannot be stored in column hpd_blocks" in verdict.error
    assert verdict.extra is None


def test_values_that_fit_are_kept():
    facts, args = recipe("hpd_parsing")
    verdict = judge(hpd_answer([0, 0, 1000, 50]), "stop", facts, answer_rules(args), resampled=False, attempts=1)
    assert verdict.error is None
    assert json.loads(verdict.extra)["hpd_blocks"][0]["bbox"] == [0, 0, 1000, 50]


def test_rows_with_an_unstorable_value_still_publish(tmp_path):
    facts, args = recipe("hpd_parsing")
    source = load_source(InputSelection(str(SAMPLE_DATASET), max_samples=2))
    log = ResultLog(tmp_path / "progress", "20260101T000000Z-aaaaaa")
    bboxes = ([0, 0, 2**40, 50], [0, 0, 1000, 50])
    for index, row_id, bbox in zip(source.selected, source.ids, bboxes):
        verdict = judge(hpd_answer(bbox), "stop", facts, answer_rules(args), resampled=False, attempts=1)
        log.add(RowResult(index, row_id, verdict.text, verdict.error, "stop", extra=verdict.extra))
    log.flush()
    columns = Columns("markdown", "ocr_error", dict(facts.extra_columns))
    files = assemble(source, read_results(tmp_path / "progress"), columns, lambda record: {}, tmp_path / "out", "data")
    output = datasets.Dataset.from_parquet([str(path) for path in files.values()], cache_dir=str(tmp_path / "cache"))
    assert output["markdown"] == ["Annual report\n\nBody"] * 2
    assert "cannot be stored in column hpd_blocks" in output["ocr_error"][0]
    assert output["ocr_error"][1] is None
    assert output["hpd_blocks"][0] is None
    assert output["hpd_blocks"][1][0]["bbox"] == [0, 0, 1000, 50]
    assert output.features.arrow_schema.field("hpd_blocks").type == pa.list_(hpd_parsing.BLOCK_TYPE)
