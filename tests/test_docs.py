"""The docs against the code: models.json against the model modules, every command shown against its parser.

Nothing here starts a server; a drifted fact or a command that no longer parses fails in a second.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.publishing.outcome import load_call
from ocr_models import RECIPES
from tools.recipes import facts_of

ROOT = Path(__file__).resolve().parent.parent
# The guides that show recipe commands; every fenced command in these and in the contributors' pages is parsed.
DOCS = ("README.md", "SERVING.md", "serving-unlimited-ocr.md")
PARSED = (*DOCS, "CONTRIBUTING.md", "ARCHITECTURE.md")
RECIPE_BY_SCRIPT = {recipe.script: recipe for recipe in RECIPES}
SEPARATORS = {"&&", "||", ";", "|"}
FENCE = re.compile(r"^\s*(```|~~~)")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def models_json() -> dict:
    return json.loads((ROOT / "models.json").read_text())


def entries() -> dict[str, dict]:
    return {name: entry for name, entry in models_json().items() if not name.startswith("_")}


def mode_of(script: str) -> str:
    """The shape a script's name promises: the convention the docs and the build tool share."""
    stem = script.removesuffix(".py")
    return "server" if stem.endswith("-server") else "saturate" if stem.endswith("-saturate") else "offline"


# ---- (a) models.json and the scripts agree, both ways ----


def test_every_recipe_has_an_entry_and_every_entry_a_script():
    listed = set(entries())
    assert set(RECIPE_BY_SCRIPT) - listed == set(), "recipes without a models.json entry"
    assert listed - set(RECIPE_BY_SCRIPT) == set(), "models.json entries that are not recipes"
    assert all((ROOT / script).is_file() for script in listed)


def test_meta_says_when_and_how():
    meta = models_json()["_meta"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", meta["updated"])
    assert "<script>" in meta["run_pattern"] and meta["description"]


@pytest.mark.parametrize("script", sorted(RECIPE_BY_SCRIPT))
def test_mode_matches_the_name_and_the_script(script):
    assert entries()[script]["mode"] == mode_of(script) == RECIPE_BY_SCRIPT[script].shape
    assert f"raise SystemExit(run_{mode_of(script)}(FACTS, __file__))" in (ROOT / script).read_text()


@pytest.mark.parametrize("script", sorted(RECIPE_BY_SCRIPT))
def test_twins_point_at_each_other(script):
    entry = entries()[script]
    twin = entry["twin"]
    if twin is None:
        return
    assert entries()[twin]["twin"] == script
    assert entries()[twin]["model_id"] == entry["model_id"]
    assert {entry["mode"], entries()[twin]["mode"]} & {"offline"}, "a twin pair is one offline and one server script"


@pytest.mark.parametrize("script", sorted(RECIPE_BY_SCRIPT))
def test_measured_figures_say_what_when_where_and_whose(script):
    for figure in entries()[script]["measured"]:
        assert isinstance(figure["value"], (int, float)), figure
        assert re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", figure["date"]), figure
        assert all(isinstance(figure[key], str) and figure[key] for key in ("metric", "unit", "hardware", "source"))


# ---- (b) every command the docs show parses with its script's own parser ----


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines inside fenced code blocks, backslash continuations joined, each with its first line number."""
    lines: list[tuple[int, str]] = []
    inside, pending, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append((start, pending + line))
        pending = ""
    return lines


def segments(tokens: list[str]) -> list[list[str]]:
    """Splits a shell line at && || ; | and opens `bash -lc '...'` payloads, which may run a script too."""
    found: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS:
            found.append([])
        elif " " in token and re.search(r"\b(uv run|python3?)\b", token):
            found.extend(segments(shlex.split(token)))
        else:
            found[-1].append(token)
    return [segment for segment in found if segment]


def make_call(segment: list[str]) -> tuple[str, list[str]] | None:
    """(script, arguments) of `make run|submit|demo VAR=...`, as the Makefile hands them to the recipe: INPUT and
    OUTPUT first, then ARGS split as the recipe's shell splits them, and submit's --jobs; the demo's defaults where
    it has them. A line asking for --help is left to tests/test_from_a_clone.py, which runs it."""
    if segment[:1] != ["make"] or segment[1:2] not in (["run"], ["submit"], ["demo"]):
        return None
    given = dict(word.split("=", 1) for word in segment[2:] if ENV_ASSIGNMENT.match(word))
    flags = shlex.split(given.get("ARGS", ""))
    if "--help" in flags:
        return None
    script = given.get("SCRIPT", "lighton-ocr3-saturate.py" if segment[1] == "demo" else "")
    jobs = ["--jobs", given.get("JOBS", "1")] if segment[1] == "submit" else []
    return script, [given.get("INPUT", "samples/dataset"), given.get("OUTPUT", "./out"), *flags, *jobs]


def script_call(segment: list[str]) -> tuple[str, list[str]] | None:
    """(script, arguments) when the segment launches one of our scripts, else None (curl, vllm serve, ...)."""
    if (call := make_call(segment)) is not None:
        return call
    while segment and ENV_ASSIGNMENT.match(segment[0]):
        segment = segment[1:]
    launched = (
        segment[:4] == ["hf", "jobs", "uv", "run"]
        or segment[:2] == ["uv", "run"]
        or (segment and Path(segment[0]).name in ("python", "python3"))
    )
    if not launched:
        return None
    for index, token in enumerate(segment):
        name = token.rsplit("/", 1)[-1]
        if name in RECIPE_BY_SCRIPT:
            return name, segment[index + 1 :]
    return None


def invocations() -> list[tuple[str, str, list[str]]]:
    """(where, script, arguments) for every invocation of a recipe in the docs' code blocks."""
    found = []
    for doc in PARSED:
        for number, line in logical_lines((ROOT / doc).read_text()):
            if not any(script in line for script in RECIPE_BY_SCRIPT) and not line.lstrip().startswith("make "):
                continue
            where = f"{doc}:{number}: {' '.join(line.split())}"
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError as exc:
                found.append((where, "", [f"<cannot split: {exc}>"]))
                continue
            for segment in segments(tokens):
                call = script_call(segment)
                if call is not None:
                    found.append((where, *call))
    return found


def docstring_invocations() -> list[tuple[str, str, list[str]]]:
    """(where, script, arguments) for every command a generated script's own docstring shows (its indented lines),
    the first thing a user opening it from its URL reads."""
    found = []
    for recipe in RECIPES:
        text = ast.get_docstring(ast.parse((ROOT / recipe.script).read_text())) or ""
        for number, line in enumerate(text.splitlines(), 1):
            if not line.startswith("    ") or not any(script in line for script in RECIPE_BY_SCRIPT):
                continue
            for segment in segments(shlex.split(line)):
                call = script_call(segment)
                if call is not None:
                    found.append((f"{recipe.script} docstring:{number}: {line.strip()}", *call))
    return found


INVOCATIONS = invocations() + docstring_invocations()


@pytest.mark.parametrize("doc", DOCS)
def test_each_doc_shows_at_least_one_command(doc):
    assert any(where.startswith(f"{doc}:") for where, _, _ in INVOCATIONS)


@pytest.mark.parametrize(("where", "script", "arguments"), INVOCATIONS, ids=[where for where, _, _ in INVOCATIONS])
def test_shown_command_parses(where, script, arguments, capsys):
    assert script, f"{where}\n{arguments[0]}"
    parser = build_parser(script, facts_of(script), mode_of(script))
    try:
        parse_arguments(parser, arguments)
    except SystemExit:
        error = capsys.readouterr().err
    else:
        return
    pytest.fail(f"{where}\ndoes not parse with {script}'s parser:\n{error}", pytrace=False)


@pytest.mark.parametrize("recipe", RECIPES, ids=[recipe.script for recipe in RECIPES])
def test_a_generated_docstring_shows_its_own_commands_and_only_flags_its_parser_has(recipe):
    shown = [(where, script) for where, script, _ in INVOCATIONS if where.startswith(f"{recipe.script} docstring:")]
    assert {script for _, script in shown} == {recipe.script}, shown
    text = ast.get_docstring(ast.parse((ROOT / recipe.script).read_text())) or ""
    assert ("--server" in text) == (recipe.shape != "offline")
    if recipe.twin:
        assert f"Its twin {recipe.twin}" in " ".join(text.split())
        assert RECIPE_BY_SCRIPT[recipe.twin].twin == recipe.script


def test_the_launcher_forms_are_recognised():
    url = "https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main/ovis-ocr2.py"
    lines = [
        f"hf jobs uv run --flavor l4x1 -s HF_TOKEN {url} a b --max-samples 2",
        f"HF_TOKEN=x uv run {url} a b",
        "python lighton-ocr3.py a b",
        f"hf jobs run img bash -lc 'pip install -q uv && uv run {url} a b'",
        "hf jobs run img vllm serve ATH-MaaS/OvisOCR2 --port 8000",
        "curl -s http://127.0.0.1:8000/v1/models",
    ]
    calls = [script_call(segment) for line in lines for segment in segments(shlex.split(line))]
    assert [call for call in calls if call] == [
        ("ovis-ocr2.py", ["a", "b", "--max-samples", "2"]),
        ("ovis-ocr2.py", ["a", "b"]),
        ("lighton-ocr3.py", ["a", "b"]),
        ("ovis-ocr2.py", ["a", "b"]),
    ]


# ---- (c) the generated blocks are current ----


def test_generated_blocks_are_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "docs.py"), "--check"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_new_recipe_gets_its_facts_and_empty_hand_kept_fields():
    from tools import docs

    data = models_json()
    del data["ovis-ocr2.py"]
    entry = docs.with_model_facts(data)["ovis-ocr2.py"]
    assert entry["model_id"] == "ATH-MaaS/OvisOCR2" and entry["twin"] == "ovis-ocr2-server.py"
    assert {key: entry[key] for key in docs.HAND_KEPT} == docs.HAND_KEPT


@pytest.mark.parametrize(
    ("docs", "arguments"),
    [(("README.md", "SERVING.md"), []), (("SERVING.md",), ["--config", "tiny"])],
    ids=["default", "config"],
)
def test_the_docs_show_the_local_loader_a_run_prints(docs, arguments):
    """The line a run into a local folder ends with, as the docs quote it (its `data_files` are the fix of issue 35)."""
    script = RECIPES[0].script
    settings = parse_arguments(
        build_parser(script, facts_of(script), mode_of(script)), ["in", "/abs/scans-ocr", *arguments]
    )
    printed = load_call(settings.output, settings.split, settings.config)
    for doc in docs:
        assert printed in " ".join((ROOT / doc).read_text().split()), f"{doc} does not show {printed}"


FIRST_SCREEN = 45


def test_the_readmes_first_screen_shows_every_way_to_run():
    """A user who opens the README sees, before any explanation, the command for each place a recipe runs: HF Jobs
    (and `make submit` until a release), a GPU box (`uv run`, `make run` from a clone), a running server, and this
    machine without a GPU (the clone, `make demo`, `make test`); and how to get uv, which the first ones need."""
    text = (ROOT / "README.md").read_text()
    screen = "\n".join(text.splitlines()[:FIRST_SCREEN])
    commands = [line.strip() for _, line in logical_lines(screen)]
    starts = ("hf jobs uv run ", "make submit ", "uv run https://", "make run ", "git clone ", "make demo", "make test")
    for start in starts:
        assert any(command.startswith(start) for command in commands), f"no `{start}...` in the first screen"
    assert any("--server http" in command for command in commands)
    assert "python3 -m pip install --user uv" in screen
    assert "make run SCRIPT=lighton-ocr3-saturate.py ARGS=--help" in text
