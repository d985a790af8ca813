"""The documents as a set: every relative link leads somewhere, no document keeps a diary, the fault catalogue
names tests that exist, and ARCHITECTURE.md's stage table follows the layer order the layers test enforces.

Each document has one reader: the README a user's quick start, SERVING.md the design and operations guide,
RELIABILITY.md the fault catalogue, PERFORMANCE.md the measurements, ARCHITECTURE.md and CONTRIBUTING.md the
contributors'. These tests keep them honest to each other and to the code; nothing here starts an engine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.test_layers import ENTRY, RECORDS, STAGES
from tools import docs
from tools.release import core_version

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
DATE = re.compile(r"20\d{2}-\d{2}-\d{2}")
RESULT_PATH = re.compile(r"bench/results/[\w./-]+")
RESULT_LINK = re.compile(r"\]\((?:\.?/)?[\w.-]+(?:\.json|/)\)")
ISSUE = re.compile(r"\b[Ii]ssues? #?\d|(?<![\w/&#])#\d+\b")
HISTORY = "CHANGELOG.md"
RESULTS_INDEX = "bench/results/README.md"
# The size each guide is written to: a guide that outgrows it is split by reader, not trimmed.
WORD_CAPS = {"README.md": 3500, "SERVING.md": 6000}


def tracked_documents() -> list[str]:
    """Every Markdown file git tracks here; outside a checkout (a copied tree), every one under the root but the
    hidden folders and the test bed's environments."""
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.strip():
        return sorted(name for name in listed.stdout.splitlines() if (ROOT / name).is_file())
    return sorted(
        path.relative_to(ROOT).as_posix()
        for path in ROOT.rglob("*.md")
        if not any(part.startswith(".") for part in path.relative_to(ROOT).parts)
    )


DOCUMENTS = tracked_documents()


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks: code shows commands, not links."""
    lines, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.replace("`", "").lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a document offers: its headings' slugs (a repeated one numbered, as GitHub does) and any
    explicit `<a id=...>`."""
    found: set[str] = set()
    for _, line in prose_lines(path.read_text()):
        if heading := HEADING.match(line):
            base = slug(heading.group(2))
            name, count = base, 0
            while name in found:
                count += 1
                name = f"{base}-{count}"
            found.add(name)
        found.update(HTML_ANCHOR.findall(line))
    return found


def test_slugs_follow_githubs_rule():
    assert slug("Replicas per GPU, and more than one GPU") == "replicas-per-gpu-and-more-than-one-gpu"
    assert slug("Figures recorded in models.json") == "figures-recorded-in-modelsjson"
    assert slug("The `--plan` flag") == "the---plan-flag"


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_every_relative_link_leads_to_a_file_and_anchor_of_the_repository(doc):
    """A relative link names a file (or folder) of the repository, resolved from the document's own folder, and
    the heading its `#anchor` names, where it gives one; a link to an anchor of the same page is checked too."""
    path = ROOT / doc
    broken = []
    for number, line in prose_lines(path.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            file_part, _, anchor = target.partition("#")
            destination = (path.parent / file_part).resolve() if file_part else path
            if not destination.is_relative_to(ROOT) or not destination.exists():
                broken.append(f"{doc}:{number}: {target} (no such file)")
            elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
                broken.append(f"{doc}:{number}: {target} (no heading #{anchor} in {destination.name})")
    assert broken == []


def dated_lines(doc: str, text: str) -> list[str]:
    """The lines of a document that carry a date which names no result file."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if doc == RESULTS_INDEX and (RESULT_LINK.search(line) or RESULT_PATH.search(line)):
            continue
        if DATE.search(RESULT_PATH.sub("", line)):
            found.append(f"{doc}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("doc", [doc for doc in DOCUMENTS if doc != HISTORY])
def test_no_document_keeps_a_diary(doc):
    """Every document but the changelog says what is, in the present tense: no issue numbers and no dates.

    The one kind of date a document may show is a result file's name (`bench/results/<bench>-<date>.json`), which
    a link to that file must give. In the results index (bench/results/README.md, written by
    tools/results_index.py) a line that names a result file, by its path or a link to it or its folder, may also
    show that run's date in a column: the date is part of what the row describes. A figure cited from elsewhere
    shows no date there (models.json keeps it). The history, with its dates and issue numbers, is CHANGELOG.md's.
    """
    text = (ROOT / doc).read_text()
    issues = [
        f"{doc}:{number}: {line.strip()}"
        for number, line in prose_lines(text)
        if ISSUE.search(re.sub(r"`[^`]*`", "", line))  # code (a kernel's `{lambda()#3}`) is not prose
    ]
    assert dated_lines(doc, text) + issues == []


def test_the_diary_rule_catches_what_it_should():
    assert ISSUE.search("as issue 42 asked") and ISSUE.search("(vLLM issue #14126)") and ISSUE.search("see #12")
    assert not ISSUE.search("https://github.com/vllm-project/vllm/issues/14126") and not ISSUE.search("&#123;")
    assert dated_lines("SERVING.md", "measured on 2026-12-01 ([results](bench/results/h200-2026-12-01.json))")
    assert not dated_lines("SERVING.md", "([results](bench/results/h200-late-2026-12-02.json))")
    assert not dated_lines(RESULTS_INDEX, "| [`a-2031-01-01.json`](a-2031-01-01.json) | 2031-01-01 |")
    assert dated_lines(RESULTS_INDEX, "| `lighton-ocr3.py` | 0.9 pages/s | a10g-small | 2031-01-01 | seed |")


@pytest.mark.parametrize(("doc", "cap"), list(WORD_CAPS.items()))
def test_each_guide_stays_within_its_size(doc, cap):
    assert len((ROOT / doc).read_text().split()) <= cap


def catalogue_rows() -> list[tuple[int, str, list[str]]]:
    """(line, fault, tests named) of every row of RELIABILITY.md's table; the tests are its last column."""
    rows = []
    for number, line in prose_lines((ROOT / "RELIABILITY.md").read_text()):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 4 or cells[0] in ("fault", "---") or set(cells[0]) <= {"-"}:
            continue
        rows.append((number, cells[0], [name.strip() for name in cells[-1].split(",") if name.strip()]))
    return rows


def test_the_catalogue_has_its_columns_and_rows():
    header = next(line for _, line in prose_lines((ROOT / "RELIABILITY.md").read_text()) if line.startswith("|"))
    assert [cell.strip() for cell in header.strip().strip("|").split("|")] == ["fault", "what you see", "lost", "test"]
    assert len(catalogue_rows()) >= 100


@pytest.mark.parametrize(("line", "fault", "tests"), catalogue_rows(), ids=lambda value: str(value)[:60])
def test_every_fault_names_tests_that_exist(line, fault, tests):
    """A row says which test reproduces its fault; a renamed or deleted test must take the row's claim with it."""
    assert tests, f"RELIABILITY.md:{line}: {fault} names no test"
    missing = [
        name
        for name in tests
        if not re.fullmatch(r"test_\w+", name)
        or not ((ROOT / "tests" / f"{name}.py").is_file() or (ROOT / "tests" / "pinned" / f"{name}.py").is_file())
    ]
    assert missing == [], f"RELIABILITY.md:{line}: no such test file under tests/: {missing}"


def stage_column() -> list[str]:
    """The first column of ARCHITECTURE.md's stage table, top first."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = text.split("<!-- generated:stages -->", 1)[1].split("<!-- /generated:stages -->", 1)[0]
    return [line.split("|")[1].strip() for line in block.splitlines() if line.startswith("| `")]


def test_the_stage_table_follows_the_layer_order():
    """ARCHITECTURE.md lists the layers top down exactly as tests/test_layers.py orders them: the entry, the
    stages from the last to the first, then the shared records."""
    entry = [f"`{name}.py`" for name in ENTRY if name != "__init__"]
    records = ", ".join(f"`{name}.py`" for name in RECORDS)
    assert stage_column() == [*entry, *(f"`{stage}/`" for stage in reversed(STAGES)), records]
    assert docs.layer_order() == {"RECORDS": RECORDS, "STAGES": STAGES, "ENTRY": ENTRY}


def test_the_changelog_is_kept_by_release_version():
    """CHANGELOG.md's sections are release versions, newest first, the first the version pyproject.toml builds: a
    version bump opens its section, and the history reads as what each release brings."""
    text = (ROOT / HISTORY).read_text()
    versions = re.findall(r"^## (\S+)", text, flags=re.MULTILINE)
    assert versions and all(re.fullmatch(r"\d+\.\d+\.\d+", version) for version in versions), versions
    assert versions[0] == core_version()
    assert versions == sorted(versions, key=lambda version: tuple(map(int, version.split("."))), reverse=True)
