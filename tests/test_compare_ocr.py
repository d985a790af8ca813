"""compare-ocr.py: CER against jiwer, the normalized lane, and whole runs over small local datasets."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import datasets
import jiwer
import pytest
from rapidfuzz.distance import Levenshtein

from tests.testbed.env import script_command, user_env

SCRIPT = Path(__file__).resolve().parent.parent / "compare-ocr.py"


def load_script() -> ModuleType:
    """Imports the script by path: its name has a dash, and dataclasses need it registered in sys.modules."""
    spec = importlib.util.spec_from_file_location("compare_ocr", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_ocr"] = module
    spec.loader.exec_module(module)
    return module


compare = load_script()

ALPHABET = "abcdefgh XYZ .,-ÄéßøЖж漢字🙂\u0301"


def random_text(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(low, high)))


def mutate(rng: random.Random, text: str) -> str:
    """Substitutions, deletions and insertions, sometimes many more insertions than the text is long."""
    chars = list(text)
    for _ in range(rng.randint(0, 2 * len(chars) + 3)):
        kind = rng.choice(("sub", "del", "ins", "ins"))
        position = rng.randint(0, len(chars))
        if kind == "ins":
            chars.insert(position, rng.choice(ALPHABET))
        elif chars and position < len(chars):
            if kind == "sub":
                chars[position] = rng.choice(ALPHABET)
            else:
                del chars[position]
    return "".join(chars)


def random_pairs(seed: int, count: int) -> tuple[list[str], list[str]]:
    """Non-empty references (jiwer strips both ends, so the strings are stripped too) and varied hypotheses."""
    rng = random.Random(seed)
    references, hypotheses = [], []
    while len(references) < count:
        reference = random_text(rng, 1, 60).strip()
        if not reference:
            continue
        roll = rng.random()
        if roll < 0.1:
            hypothesis = ""
        elif roll < 0.2:
            hypothesis = random_text(rng, 0, 200).strip()
        else:
            hypothesis = mutate(rng, reference).strip()
        references.append(reference)
        hypotheses.append(hypothesis)
    return references, hypotheses


@pytest.mark.parametrize("seed", range(5))
def test_cer_matches_jiwer_per_page_and_micro(seed):
    references, hypotheses = random_pairs(seed, 200)
    for reference, hypothesis in zip(references, hypotheses):
        assert compare.cer(reference, hypothesis) == pytest.approx(jiwer.cer(reference, hypothesis))
    score = compare.score_lane(references, hypotheses)
    per_page = [jiwer.cer(ref, hyp) for ref, hyp in zip(references, hypotheses)]
    assert score.pages == len(references)
    assert score.micro_cer == pytest.approx(jiwer.cer(references, hypotheses))
    assert score.mean_cer == pytest.approx(statistics.fmean(per_page))
    assert score.median_cer == pytest.approx(statistics.median(per_page))
    assert max(per_page) > 1  # insertions push some pages past 1, and that must not be clipped


def test_cer_edge_cases():
    assert compare.cer("abc", "") == 1.0
    assert compare.cer("ab", "abcdef") == 2.0
    assert compare.cer("🙂x", "🙂y") == 0.5  # one code point each, not UTF-16 halves
    assert compare.similarity("", "") == 1.0
    assert compare.similarity("abcd", "abce") == 0.75
    assert compare.similarity("abc", "") == 0.0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("# Title\n\nSome **bold**, *italic* and __under__ text", "title some bold, italic and under text"),
        ("## Part 2\n- first item\n* second\n1. third\n2) fourth", "part 2 first item second third fourth"),
        ("| Name | Age |\n|---|:---:|\n| Ann | 31 |", "name age ann 31"),
        ("<table><tr><td>Ann</td><td>31</td></tr></table>", "ann 31"),
        ('<p class="x">A &amp; B</p><br/><!-- note -->', "a & b"),
        ("an exam-\nple of a hyphen-  \n  ated break", "an example of a hyphenated break"),
        ("a well-known fact - really", "a well-known fact - really"),
        ("mass $E = mc^2$ and $$x$$ or \\(y\\)", "mass e = mc^2 and x or y"),
        ("ﬁne STRASSE\u00a0straße", "fine strasse strasse"),
        ("snake_case_name and 2 * 3 * 4", "snake_case_name and 2 * 3 * 4"),
        ("a < b > c", "a < b > c"),
        ("  lots\n\n of \t  space  ", "lots of space"),
    ],
)
def test_normalized_lane(raw, expected):
    assert compare.normalized_text(raw) == expected


def test_nfc_lane_only_composes_and_collapses_whitespace():
    assert compare.nfc_text("  Cafe\u0301\n\n**X**  ") == "Café **X**"


def write_dataset(folder: Path, columns: dict[str, list]) -> Path:
    datasets.Dataset.from_dict(columns).to_parquet(folder / "data" / "train-00000-of-00001.parquet")
    return folder


A_ROWS = {
    "id": ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"],
    "markdown": [
        "The quick brown fox",
        "abcdefghij klmnopqrst",
        "0123456789 0123456789",
        None,
        "short",
        "# Heading\n\n**Bold** text here",
        "Hi",
        "x",
    ],
    "text": [
        "The quick brown fox",
        "abcdefghij klmnopqrst",
        "0123456789 0123456789",
        "a long enough reference text",
        "a long enough reference text",
        "Heading\nBold text here",
        "Hi",
        None,
    ],
}
B_MARKDOWN = [
    "The quick brown fox",
    "abcdefghij klmnopqrsX",
    "0123456789",
    "anything",
    None,
    "<h1>Heading</h1>\n<p><b>Bold</b> text here</p>",
    "Hi",
    "y",
]


def expected_lane(normalize, hypotheses: list[str]) -> dict[str, float]:
    """The lane's figures from jiwer, over the four pages that qualify (p0, p1, p2, p5)."""
    pages = [0, 1, 2, 5]
    references = [normalize(A_ROWS["text"][i]) for i in pages]
    hyps = [normalize(hypotheses[i]) for i in pages]
    per_page = [jiwer.cer(ref, hyp) for ref, hyp in zip(references, hyps)]
    return {
        "micro_cer": jiwer.cer(references, hyps),
        "mean_cer": statistics.fmean(per_page),
        "median_cer": statistics.median(per_page),
    }


def test_end_to_end(tmp_path):
    folder_a = write_dataset(tmp_path / "a" / "out", A_ROWS)
    folder_b = write_dataset(tmp_path / "b" / "out", {"id": A_ROWS["id"], "markdown": B_MARKDOWN})
    report_path = tmp_path / "report.json"
    command = [sys.executable, str(SCRIPT), str(folder_a), str(folder_b), "--ground-truth", "text"]
    command += ["--min-gt-chars", "5", "--json", str(report_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    table = result.stdout
    report = json.loads(report_path.read_text())

    assert report["rows"] == 8
    assert report["error_rows"] == {"total": 2, "a": 1, "b": 1}
    assert report["compared"] == 6
    assert report["identical"] == {"count": 2, "share": pytest.approx(2 / 6)}
    markup_similarity = Levenshtein.normalized_similarity(A_ROWS["markdown"][5], B_MARKDOWN[5])
    similarities = [20 / 21, 10 / 21, markup_similarity, 0.0]
    assert report["differing"] == 4
    assert report["similarity_of_differing"] == {
        "median": pytest.approx(statistics.median(similarities)),
        "min": 0.0,
        "mean": pytest.approx(statistics.fmean(similarities)),
    }

    truth = report["ground_truth"]
    assert truth["pages"] == {"without_ground_truth": 1, "below_min_gt_chars": 1}
    for lane, normalize in compare.NORMALIZERS.items():
        for side, hypotheses in (("a", A_ROWS["markdown"]), ("b", B_MARKDOWN)):
            score = truth["lanes"][lane][side]
            assert score["pages"] == 4
            for key, value in expected_lane(normalize, hypotheses).items():
                assert score[key] == pytest.approx(value), (lane, side, key)
    assert truth["lanes"]["normalized"]["a"]["micro_cer"] == 0.0  # only markup differed from the reference
    assert truth["lanes"]["normalized"]["b"]["micro_cer"] < truth["lanes"]["nfc"]["b"]["micro_cer"]

    assert "error rows (skipped)    2 (A failed: 1, B failed: 1)" in table
    assert "byte-identical          2 (33.3%)" in table
    assert f"median {statistics.median(similarities):.4f}  min 0.0000" in table
    nfc_a = truth["lanes"]["nfc"]["a"]
    assert f"nfc         A           4{nfc_a['micro_cer']:>10.4f}{nfc_a['mean_cer']:>10.4f}" in table
    assert "normalized  A           4    0.0000    0.0000    0.0000" in table


def test_local_folders_are_never_read_from_a_stale_cache(tmp_path):
    """A folder rewritten in place (mtime kept, as a copy with preserved times does) must show its new rows.

    With one shared cache `datasets` serves the old rows here; the script's fresh cache dir per load prevents it.
    """
    first = write_dataset(tmp_path / "one" / "out", {"markdown": ["alpha", "beta"]})
    second = write_dataset(tmp_path / "two" / "out", {"markdown": ["gamma", "delta"]})
    report_path = tmp_path / "r.json"
    assert compare.main([str(first), str(second), "--json", str(report_path)]) == 0
    assert json.loads(report_path.read_text())["identical"]["count"] == 0

    parquet = first / "data" / "train-00000-of-00001.parquet"
    stat = parquet.stat()
    write_dataset(first, {"markdown": ["gamma", "delta"]})
    os.utime(parquet, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert compare.main([str(first), str(second), "--json", str(report_path)]) == 0
    assert json.loads(report_path.read_text())["identical"]["count"] == 2


def test_id_alignment_second_column_and_errors(tmp_path, capsys):
    folder_a = write_dataset(
        tmp_path / "a", {"id": ["x", "y", "z"], "markdown": ["one", "two", "three"], "v2": ["one", "tw0", None]}
    )
    folder_b = write_dataset(tmp_path / "b", {"id": ["z", "w", "x"], "markdown": ["three", "extra", "one"]})
    report_path = tmp_path / "r.json"

    assert compare.main([str(folder_a), str(folder_b), "--id-column", "id", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert (report["rows"], report["identical"]["count"], report["unmatched_ids"]) == (2, 2, {"a": 1, "b": 1})

    assert compare.main([str(folder_a), "--column-b", "v2", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert (report["compared"], report["error_rows"]["b"], report["identical"]["count"]) == (2, 1, 1)
    assert report["similarity_of_differing"]["min"] == pytest.approx(2 / 3)

    capsys.readouterr()
    write_dataset(tmp_path / "c", {"markdown": ["only one row"]})
    assert compare.main([str(folder_a), str(tmp_path / "c")]) == 2
    assert "A has 3 rows and B has 1" in capsys.readouterr().err
    assert compare.main([str(folder_a)]) == 2
    assert "--column-b" in capsys.readouterr().err
    assert compare.main([str(folder_a), str(folder_b), "--ground-truth", "nope"]) == 2
    assert "no column 'nope'" in capsys.readouterr().err


def test_failed_pages_are_error_rows_not_compared_nor_scored(tmp_path):
    """Issue 44: the recipes write a failed page as `[OCR ERROR]` (its reason in ocr_error), and compare-ocr took the
    marker for text: one failed row on each side counted as byte-identical, and scored against ground truth."""
    texts = ["alpha page", "beta page", "gamma page"]
    failed = "[OCR ERROR]"
    reason = "image: cannot identify image file"
    side_a = {"markdown": [texts[0], failed, texts[2]], "ocr_error": [None, reason, None], "text": texts}
    side_b = {"markdown": [texts[0], failed, "gamma pag"], "ocr_error": [None, reason, None]}
    folder_a = write_dataset(tmp_path / "a", side_a)
    folder_b = write_dataset(tmp_path / "b", side_b)
    report_path = tmp_path / "r.json"
    assert compare.main([str(folder_a), str(folder_b), "--ground-truth", "text", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["error_rows"] == {"total": 1, "a": 1, "b": 1}
    assert (report["compared"], report["identical"]["count"], report["differing"]) == (2, 1, 1)
    nfc_a = report["ground_truth"]["lanes"]["nfc"]["a"]
    assert (nfc_a["pages"], nfc_a["micro_cer"]) == (2, 0.0), "the marker was scored as the model's text"


def test_a_row_with_text_and_an_error_is_an_error_row_as_the_runs_summary_counts_it(tmp_path):
    """A multi-frame TIFF's row keeps frame 1's text with a note in ocr_error; the run's summary counts it among its
    errors, and compare-ocr compared it as a clean row."""
    note = "only frame 1 of 3 of this multi-frame image was read; split it into one row per page"
    side_a = {"markdown": ["alpha page", "frame one", "gamma page"], "ocr_error": [None, note, None]}
    side_b = {"markdown": ["alpha page", "frame one", "gamma page"], "ocr_error": [None, None, None]}
    report_path = tmp_path / "r.json"
    folder_a, folder_b = write_dataset(tmp_path / "a", side_a), write_dataset(tmp_path / "b", side_b)
    assert compare.main([str(folder_a), str(folder_b), "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["error_rows"] == {"total": 1, "a": 1, "b": 0}
    assert (report["compared"], report["identical"]["count"]) == (2, 2)


def test_a_second_column_of_a_reads_its_own_error_column_only_when_named(tmp_path):
    side = {
        "markdown": ["alpha", "beta", "gamma"],
        "ocr_error": [None, "only frame 1 of 2 of this multi-frame image was read", None],
        "v2": ["alpha", "beta", "gamma"],
        "v2_error": [None, None, "bad image: not a readable image"],
    }
    folder, report_path = write_dataset(tmp_path / "a", side), tmp_path / "r.json"
    assert compare.main([str(folder), "--column-b", "v2", "--json", str(report_path)]) == 0
    assert json.loads(report_path.read_text())["error_rows"] == {"total": 1, "a": 1, "b": 0}
    argv = [str(folder), "--column-b", "v2", "--error-column-b", "v2_error", "--json", str(report_path)]
    assert compare.main(argv) == 0
    assert json.loads(report_path.read_text())["error_rows"] == {"total": 2, "a": 1, "b": 1}


@pytest.mark.parametrize("side", ["a", "b"])
def test_a_folder_of_page_images_on_either_side_is_a_clear_error_not_a_traceback(tmp_path, side):
    """`uv run compare-ocr.py ./scans ./scans-ocr` (the run's own INPUT on one side) ended in a traceback: the
    script's environment has no Pillow, which `datasets` needs to read a folder of images at all. Such a folder
    holds no text to compare; the script says so, and which folder to give instead. Run as a user runs it."""
    pages = tmp_path / "scans"
    pages.mkdir()
    for name in ("page-1.png", "page-2.jpg", "scan.pdf"):
        (pages / name).write_bytes(b"not read")
    output = write_dataset(tmp_path / "scans-ocr", {"markdown": ["x", "y", "z"]})
    sides = [str(pages), str(output)] if side == "a" else [str(output), str(pages)]
    result = subprocess.run(
        script_command(SCRIPT, *sides), capture_output=True, text=True, timeout=600, env=user_env()
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert f"{pages} holds page images or PDFs and no text" in result.stderr, result.stderr
    assert "the OUTPUT a recipe wrote" in result.stderr
