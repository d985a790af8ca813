# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "datasets>=4.0",
#     "rapidfuzz>=3.0",
# ]
#
# [tool.uv]
# exclude-newer = "2026-12-01T00:00:00Z"
# ///
"""Compare two OCR outputs page by page, and score both against ground truth when there is some.

A and B are dataset references: a Hub dataset id or a local folder (any path that exists or starts with `.`, `/`
or `~`), optionally followed by `:config`, e.g. `./out:ovis`. B may be left out when --column-b names a second
column of A. Rows are paired by position (then both sides must have the same length) or by --id-column.

It reports how many pages are byte-identical and how similar the others are (similarity = 1 - Levenshtein
distance / length of the longer text), and with --ground-truth the character error rate of A and of B in two
lanes: `nfc` (exact text, only whitespace runs collapsed) and `normalized` (NFKC, casefolded, markup stripped,
line-end hyphenation joined), so a model is not charged for writing a table as HTML rather than as pipes.
A row that failed on either side (no text, the `[OCR ERROR]` the recipes write, or a value in the side's error
column, as the run's summary counts it: a multi-frame image keeps frame 1's text and says so there) is an error
row: counted as such, and neither compared nor scored.

Examples:
    uv run compare-ocr.py ./out-ovis ./out-lighton --ground-truth text --min-gt-chars 20 --json report.json
    uv run compare-ocr.py user/pages:ovis --column-a markdown --column-b markdown_v2 --id-column id
"""

from __future__ import annotations

import argparse
import html
import json
import re
import statistics
import sys
import tempfile
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import datasets
from datasets.exceptions import DatasetGenerationError
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder
from rapidfuzz.distance import Levenshtein

LANES = ("nfc", "normalized")
# What the recipes write as the text of a page that failed (its reason in the error column, ocr_error by default);
# ocr-bench leaves it out of judging too. Such a row, or one with no text at all, is an error row: never compared.
FAILED_TEXT = "[OCR ERROR]"
# The recipes' error column (--error-column): a value there makes the row an error row, as the run's summary counts.
DEFAULT_ERROR_COLUMN = "ocr_error"
# The files a recipe reads as pages (its INPUT: images as datasets knows them, and PDFs); none holds text to compare.
PAGE_SUFFIXES = frozenset({*ImageFolder.EXTENSIONS, ".pdf"})


class CompareError(ValueError):
    """The inputs cannot be compared as asked; the message says what to change."""


@dataclass(frozen=True)
class DatasetRef:
    path: str
    config: str | None
    local: bool


@dataclass
class Pairs:
    """Aligned rows: one text per side (None or FAILED_TEXT for an error row) and the ground truth when asked for."""

    a: list[str | None]
    b: list[str | None]
    truth: list[str | None] | None
    unmatched_a: int = 0
    unmatched_b: int = 0


@dataclass
class LaneScore:
    pages: int
    edits: int
    reference_chars: int
    micro_cer: float | None
    mean_cer: float | None
    median_cer: float | None


# ---------------------------------------------------------------------------------------------------------------
# Loading and alignment


def parse_ref(ref: str) -> DatasetRef:
    """Splits `path:config`; a path that exists is taken whole, so a folder name with a colon still works."""
    local_prefix = ref.startswith((".", "/", "~"))
    if Path(ref).expanduser().exists():
        return DatasetRef(str(Path(ref).expanduser().resolve()), None, True)
    path, config = ref, None
    if ":" in ref:
        path, config = ref.rsplit(":", 1)
        config = config or None
    local = local_prefix or Path(path).expanduser().exists()
    return DatasetRef(str(Path(path).expanduser().resolve()) if local else path, config, local)


def load_columns(
    ref: DatasetRef, split: str, columns: list[str], optional: tuple[str, ...] = ()
) -> dict[str, list[Any]]:
    """Reads only the text columns needed, as Python lists, and the `optional` ones the dataset has.

    A local folder gets a fresh cache dir: `datasets` keys its cache on the folder's name, so a second folder
    with the same name (say two runs' `out/`) would otherwise silently load the first one's rows.
    """
    label = ref.path + (f":{ref.config}" if ref.config else "")
    if ref.local and not Path(ref.path).exists():
        raise CompareError(f"{label}: no such folder")
    if ref.local and holds_only_pages(Path(ref.path)):
        raise CompareError(
            f"{label} holds page images or PDFs and no text (a recipe's INPUT): compare the OUTPUT a recipe wrote "
            "from it (for example ./scans-ocr), or a dataset with a text column"
        )
    with tempfile.TemporaryDirectory(prefix="compare-ocr-") as cache_dir:
        try:
            dataset = datasets.load_dataset(
                ref.path, ref.config, split=split, cache_dir=cache_dir if ref.local else None
            )
        except (ValueError, FileNotFoundError, ImportError, DatasetGenerationError) as exc:
            cause = exc.__cause__ if isinstance(exc, DatasetGenerationError) and exc.__cause__ else exc
            raise CompareError(f"{label} cannot be read as a dataset: {cause}") from exc
        missing = [column for column in columns if column not in dataset.column_names]
        if missing:
            raise CompareError(f"{label} has no column {missing[0]!r}; its columns are {dataset.column_names}")
        present = [column for column in optional if column in dataset.column_names]
        return {column: list(dataset[column]) for column in dict.fromkeys([*columns, *present])}


def holds_only_pages(folder: Path) -> bool:
    """Whether a folder's files are all page images or PDFs (hidden ones aside): nothing in it is text, and reading
    it as a dataset would decode every image (with Pillow, which this script does not need) only to find that."""
    files = [path for path in folder.rglob("*") if path.is_file() and not path.name.startswith(".")]
    return bool(files) and all(path.suffix.lower() in PAGE_SUFFIXES for path in files)


def without_error_rows(texts: list[str | None], errors: list[Any] | None) -> list[str | None]:
    """A side's texts with None where its error column holds a value: an error row, whatever text it kept."""
    if errors is None:
        return texts
    return [None if error is not None else text for text, error in zip(texts, errors)]


def align_by_position(a: list[str | None], b: list[str | None], truth: list[str | None] | None) -> Pairs:
    """Row i of A against row i of B; different lengths mean the outputs cover different pages."""
    if len(a) != len(b):
        raise CompareError(
            f"A has {len(a)} rows and B has {len(b)}: pair them with --id-column, or compare outputs of the same input"
        )
    return Pairs(a, b, truth)


def align_by_id(
    a: list[str | None],
    b: list[str | None],
    truth: list[str | None] | None,
    ids_a: list[Any],
    ids_b: list[Any],
) -> Pairs:
    """Pairs rows with equal ids, in A's order; ids on one side only are counted, not compared."""
    for side, ids in (("A", ids_a), ("B", ids_b)):
        if len(set(ids)) != len(ids):
            raise CompareError(f"the id column has repeated values in {side}, so it cannot pair rows")
    where_b = {row_id: index for index, row_id in enumerate(ids_b)}
    kept = [(index, where_b[row_id]) for index, row_id in enumerate(ids_a) if row_id in where_b]
    return Pairs(
        a=[a[i] for i, _ in kept],
        b=[b[j] for _, j in kept],
        truth=[truth[i] for i, _ in kept] if truth is not None else None,
        unmatched_a=len(ids_a) - len(kept),
        unmatched_b=len(ids_b) - len(kept),
    )


def truncate(pairs: Pairs, max_samples: int | None) -> Pairs:
    """Keeps the first N aligned rows, so a quick look scores the same pages on both sides."""
    if max_samples is None:
        return pairs
    truth = pairs.truth[:max_samples] if pairs.truth is not None else None
    return Pairs(pairs.a[:max_samples], pairs.b[:max_samples], truth, pairs.unmatched_a, pairs.unmatched_b)


def load_pairs(args: argparse.Namespace) -> Pairs:
    """Loads both sides and aligns them as the options ask."""
    ref_a = parse_ref(args.a)
    columns_a = [args.column_a, args.ground_truth, args.id_column]
    if args.b is None:
        if args.column_b == args.column_a:
            raise CompareError("B is missing: give a second dataset, or --column-b naming a second column of A")
        columns_a.append(args.column_b)
    error_b = error_column_b(args)
    optional_a = (args.error_column_a, error_b) if args.b is None and error_b else (args.error_column_a,)
    data_a = load_columns(ref_a, args.split, [column for column in columns_a if column], optional_a)
    if args.b is None:
        data_b = {column: data_a[column] for column in (args.column_b, args.id_column, error_b) if column in data_a}
    else:
        columns_b = [args.column_b, args.id_column]
        data_b = load_columns(parse_ref(args.b), args.split, [column for column in columns_b if column], (error_b,))
    a = without_error_rows(data_a[args.column_a], data_a.get(args.error_column_a))
    b = without_error_rows(data_b[args.column_b], data_b.get(error_b) if error_b else None)
    truth = data_a[args.ground_truth] if args.ground_truth else None
    if args.id_column:
        pairs = align_by_id(a, b, truth, data_a[args.id_column], data_b[args.id_column])
    else:
        pairs = align_by_position(a, b, truth)
    return truncate(pairs, args.max_samples)


def error_column_b(args: argparse.Namespace) -> str | None:
    """B's error column: the one named, or the recipes' default for a dataset B; a second column of A has none
    unless --error-column-b names it (A's own error column says how A's text column fared, not B's)."""
    if args.error_column_b:
        return args.error_column_b
    return None if args.b is None else DEFAULT_ERROR_COLUMN


# ---------------------------------------------------------------------------------------------------------------
# Text normalization

WHITESPACE = re.compile(r"\s+")
LINE_END_HYPHEN = re.compile(r"(\w)-[ \t]*\r?\n[ \t]*(\w)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.MULTILINE)
LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]+", re.MULTILINE)
TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-{2,}:?[ \t]*(?:\|[ \t]*:?-{2,}:?[ \t]*)*\|?[ \t]*$", re.MULTILINE)
HORIZONTAL_RULE = re.compile(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$", re.MULTILINE)
STAR_EMPHASIS = re.compile(r"(\*{1,3}|~~)(?=\S)(.+?)(?<=\S)\1")
UNDERSCORE_EMPHASIS = re.compile(r"(?<!\w)(_{1,3})(?=\S)(.+?)(?<=\S)\1(?!\w)")  # not inside snake_case words
MATH_DELIMITERS = re.compile(r"\$+|\\[()\[\]]")


def nfc_text(text: str) -> str:
    """The strict lane: exact characters, but line breaks and indentation are layout, not text."""
    return WHITESPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def strip_markup(text: str) -> str:
    """Drops HTML/XML tags, markdown structure markers and LaTeX math delimiters, keeping the words they wrap.

    Line-anchored markers (headings, list bullets, table rules) go first, while the line breaks still exist.
    """
    text = HTML_COMMENT.sub(" ", text)
    text = HTML_TAG.sub(" ", text)
    text = html.unescape(text)
    text = TABLE_RULE.sub(" ", text)
    text = HORIZONTAL_RULE.sub(" ", text)
    text = HEADING.sub("", text)
    text = LIST_ITEM.sub("", text)
    text = STAR_EMPHASIS.sub(r"\2", text)
    text = UNDERSCORE_EMPHASIS.sub(r"\2", text)
    text = text.replace("|", " ")
    return MATH_DELIMITERS.sub("", text)


def normalized_text(text: str) -> str:
    """The lenient lane: the same words in a different dress (markup, case, ligatures, hyphenation) score equal."""
    text = unicodedata.normalize("NFKC", text)
    text = LINE_END_HYPHEN.sub(r"\1\2", text)
    text = strip_markup(text)
    return WHITESPACE.sub(" ", text.casefold()).strip()


NORMALIZERS = {"nfc": nfc_text, "normalized": normalized_text}


# ---------------------------------------------------------------------------------------------------------------
# Scores


def similarity(a: str, b: str) -> float:
    """1 - normalized edit distance: 1.0 for equal texts (two empty ones included), 0.0 for nothing in common."""
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1.0 - Levenshtein.distance(a, b) / longest


def cer(reference: str, hypothesis: str) -> float:
    """Edits per reference character at the code point level; above 1 when the hypothesis adds much text."""
    return Levenshtein.distance(reference, hypothesis) / len(reference)


def score_lane(references: list[str], hypotheses: list[str]) -> LaneScore:
    """Micro CER weighs pages by length (the corpus rate); mean and median show how typical pages fare."""
    edits = [Levenshtein.distance(ref, hyp) for ref, hyp in zip(references, hypotheses)]
    lengths = [len(ref) for ref in references]
    per_page = [edit / length for edit, length in zip(edits, lengths)]
    total = sum(lengths)
    return LaneScore(
        pages=len(per_page),
        edits=sum(edits),
        reference_chars=total,
        micro_cer=sum(edits) / total if total else None,
        mean_cer=statistics.fmean(per_page) if per_page else None,
        median_cer=statistics.median(per_page) if per_page else None,
    )


def score_against_truth(
    triples: list[tuple[str, str, str | None]], min_gt_chars: int
) -> tuple[dict[str, Any], dict[str, dict[str, LaneScore]]]:
    """CER of A and B per lane over the same pages.

    A page counts when its ground truth, in the nfc lane, has at least `min_gt_chars` characters (and at least
    one), so both lanes score the same pages; the normalized lane also skips a page whose reference was all markup.
    """
    eligible = [(a, b, truth) for a, b, truth in triples if truth is not None]
    long_enough = [(a, b, truth) for a, b, truth in eligible if len(nfc_text(truth)) >= max(min_gt_chars, 1)]
    counts = {
        "without_ground_truth": len(triples) - len(eligible),
        "below_min_gt_chars": len(eligible) - len(long_enough),
    }
    lanes: dict[str, dict[str, LaneScore]] = {}
    for lane, normalize in NORMALIZERS.items():
        rows = [(normalize(truth), normalize(a), normalize(b)) for a, b, truth in long_enough]
        rows = [row for row in rows if row[0]]
        references = [ref for ref, _, _ in rows]
        lanes[lane] = {
            "a": score_lane(references, [a for _, a, _ in rows]),
            "b": score_lane(references, [b for _, _, b in rows]),
        }
    return counts, lanes


def distribution(values: list[float]) -> dict[str, float] | None:
    """Median, minimum and mean; None when there is nothing to describe."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "mean": statistics.fmean(values)}


def failed(text: str | None) -> bool:
    """Whether a side's row is an error row: no text, or the marker a recipe writes for a page that failed."""
    return text is None or text == FAILED_TEXT


def build_report(pairs: Pairs, args: argparse.Namespace) -> dict[str, Any]:
    """Everything the table shows, and a little more, as plain JSON-ready values."""
    truth = pairs.truth if pairs.truth is not None else [None] * len(pairs.a)
    scored = [(a, b, t) for a, b, t in zip(pairs.a, pairs.b, truth) if not failed(a) and not failed(b)]
    identical = sum(a == b for a, b, _ in scored)
    report: dict[str, Any] = {
        "a": {"dataset": args.a, "column": args.column_a},
        "b": {"dataset": args.b or args.a, "column": args.column_b},
        "split": args.split,
        "aligned_by": f"id column {args.id_column!r}" if args.id_column else "position",
        "rows": len(pairs.a),
        "unmatched_ids": {"a": pairs.unmatched_a, "b": pairs.unmatched_b} if args.id_column else None,
        "error_rows": {
            "total": len(pairs.a) - len(scored),
            "a": sum(map(failed, pairs.a)),
            "b": sum(map(failed, pairs.b)),
        },
        "compared": len(scored),
        "identical": {"count": identical, "share": identical / len(scored) if scored else None},
        "similarity_of_differing": distribution([similarity(a, b) for a, b, _ in scored if a != b]),
        "differing": len(scored) - identical,
        "ground_truth": None,
    }
    if args.ground_truth:
        counts, lanes = score_against_truth(scored, args.min_gt_chars)
        report["ground_truth"] = {
            "column": args.ground_truth,
            "min_gt_chars": args.min_gt_chars,
            "pages": counts,
            "lanes": {lane: {side: asdict(score) for side, score in sides.items()} for lane, sides in lanes.items()},
        }
    return report


# ---------------------------------------------------------------------------------------------------------------
# Output


def number(value: float | None, digits: int = 4) -> str:
    """A fixed-width figure, or a dash where there is nothing to measure."""
    return "-" if value is None else f"{value:.{digits}f}"


def render_table(report: dict[str, Any]) -> str:
    """The report as a short plain-text table for the terminal."""
    errors, identical = report["error_rows"], report["identical"]
    share = "" if identical["share"] is None else f" ({identical['share']:.1%})"
    lines = [
        f"A: {report['a']['dataset']} [{report['a']['column']}]",
        f"B: {report['b']['dataset']} [{report['b']['column']}]",
        f"split {report['split']}, rows aligned by {report['aligned_by']}",
        "",
        f"{'rows':<24}{report['rows']}",
        f"{'error rows (skipped)':<24}{errors['total']} (A failed: {errors['a']}, B failed: {errors['b']})",
        f"{'compared':<24}{report['compared']}",
        f"{'byte-identical':<24}{identical['count']}{share}",
    ]
    if report["unmatched_ids"]:
        unmatched = report["unmatched_ids"]
        lines.insert(5, f"{'ids on one side only':<24}A: {unmatched['a']}, B: {unmatched['b']}")
    spread = report["similarity_of_differing"]
    if spread:
        lines.append(
            f"{'similarity (differing)':<24}median {number(spread['median'])}  min {number(spread['min'])}  "
            f"mean {number(spread['mean'])}  over {report['differing']} pairs"
        )
    if report["ground_truth"]:
        lines += ["", *render_cer(report["ground_truth"])]
    return "\n".join(lines)


def render_cer(truth: dict[str, Any]) -> list[str]:
    """One row per lane and side: micro, mean and median CER over the pages scored."""
    pages = truth["pages"]
    lines = [
        f"CER against ground truth {truth['column']!r} (pages with >= {truth['min_gt_chars']} reference chars; "
        f"skipped: {pages['without_ground_truth']} without ground truth, {pages['below_min_gt_chars']} shorter)",
        f"{'lane':<12}{'side':<6}{'pages':>7}{'micro':>10}{'mean':>10}{'median':>10}",
    ]
    for lane, sides in truth["lanes"].items():
        for side, score in sides.items():
            lines.append(
                f"{lane:<12}{side.upper():<6}{score['pages']:>7}{number(score['micro_cer']):>10}"
                f"{number(score['mean_cer']):>10}{number(score['median_cer']):>10}"
            )
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Compare two OCR outputs and score them against ground truth.",
        epilog="A dataset is a Hub id or a local folder, optionally with :config (e.g. ./out:ovis).",
    )
    parser.add_argument("a", help="dataset A")
    parser.add_argument("b", nargs="?", help="dataset B (default: A itself, with --column-b naming another column)")
    parser.add_argument("--column-a", default="markdown", help="text column of A (default: markdown)")
    parser.add_argument("--column-b", default="markdown", help="text column of B (default: markdown)")
    parser.add_argument(
        "--error-column-a",
        default=DEFAULT_ERROR_COLUMN,
        help=f"error column of A, read where A has it: a row with a value there is an error row (default: "
        f"{DEFAULT_ERROR_COLUMN})",
    )
    parser.add_argument(
        "--error-column-b",
        help=f"error column of B (default: {DEFAULT_ERROR_COLUMN} of a dataset B; none for a second column of A)",
    )
    parser.add_argument("--split", default="train", help="split of both datasets (default: train)")
    parser.add_argument("--id-column", help="pair rows by this column, present in both (default: by position)")
    parser.add_argument("--ground-truth", metavar="COLUMN", help="column of A holding the reference text")
    parser.add_argument(
        "--min-gt-chars", type=int, default=0, metavar="N", help="score CER only on pages with >= N reference chars"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the full report here as JSON")
    parser.add_argument("--max-samples", type=int, metavar="N", help="compare only the first N aligned rows")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        pairs = load_pairs(args)
    except CompareError as exc:
        print(f"compare-ocr: error: {exc}", file=sys.stderr)
        return 2
    report = build_report(pairs, args)
    print(render_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\nreport written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
