"""Renders the generated tables in README.md and SERVING.md from models.json.

models.json is the one place that says which script runs which model on which image and what was measured; the
docs show it between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` markers, and `--check` fails when
a block differs from what this tool would write (the tests run it), so the prose never drifts from the facts.
Usage: python tools/docs.py [--check]
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_JSON = ROOT / "models.json"
CLI_SOURCE = ROOT / "src" / "ocr_core" / "cli.py"
BLOCKS = {"README.md": ("scripts",), "SERVING.md": ("scripts", "measurements")}


def cli_constant(name: str, source: Path = CLI_SOURCE) -> object:
    """A module-level constant of the shared command line, read from its source so the tables quote its defaults.

    Read, not imported: this tool runs without the recipes' dependencies (datasets, httpx) installed.
    """
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == name for target in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{source} defines no {name}")


SHAPES = {
    "offline": f"offline (`vllm.LLM`), batches of {cli_constant('OFFLINE_BATCH')}",
    "server": f"server, fixed window of {cli_constant('SERVER_WINDOW')}",
    "saturate": "server, adaptive window",
}
EDIT_NOTE = "<!-- rendered by tools/docs.py from models.json: edit that file, then run python tools/docs.py -->"


class MissingMarker(ValueError):
    """A document lacks the markers of a block it should carry."""


def load_entries(path: Path = MODELS_JSON) -> dict[str, dict]:
    """The per-script entries in file order; `_meta` and any other underscore key are not scripts."""
    data = json.loads(path.read_text())
    return {name: entry for name, entry in data.items() if not name.startswith("_")}


def cell(text: object) -> str:
    """A value that cannot break a markdown table row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def shown_image(image: str) -> str:
    """The image as a reader types it; a vendor registry's host is left to the job command, which has it whole."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first):
        return f"`{rest}` (vendor image; see the script's job command)"
    return f"`{image}`"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
    lines += [f"| {' | '.join(cell(value) for value in row)} |" for row in rows]
    return "\n".join(lines)


def scripts_table(entries: dict[str, dict]) -> str:
    """One row per script, twins next to each other as models.json lists them."""
    rows = [
        [f"`{script}`", entry["model_id"], SHAPES[entry["mode"]], shown_image(entry["image"]), f"`{entry['flavor']}`"]
        for script, entry in entries.items()
    ]
    return table(["script", "model", "shape", "image", "flavor"], rows)


def number(value: float | int) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def measurements_table(entries: dict[str, dict]) -> str:
    """Every measured figure with where, when and who measured it, so cited and own numbers never blur."""
    rows = [
        [
            f"`{script}`",
            figure["metric"],
            f"{number(figure['value'])} {figure['unit']}",
            figure["hardware"],
            figure["date"],
            figure["source"],
        ]
        for script, entry in entries.items()
        for figure in entry.get("measured", [])
    ]
    if not rows:
        return "No figures recorded yet."
    return table(["script", "what", "value", "hardware", "date", "source"], rows)


RENDERERS: dict[str, Callable[[dict[str, dict]], str]] = {
    "scripts": scripts_table,
    "measurements": measurements_table,
}


def replace_block(text: str, name: str, body: str) -> str:
    """The text with the block's content (between its markers, exclusive) replaced by `body`."""
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    before, found, rest = text.partition(start)
    _, found_end, after = rest.partition(end)
    if not found or not found_end:
        raise MissingMarker(f"no {start} ... {end} pair")
    return f"{before}{start}\n{EDIT_NOTE}\n\n{body}\n{end}{after}"


def render_doc(text: str, names: tuple[str, ...], entries: dict[str, dict]) -> str:
    for name in names:
        text = replace_block(text, name, RENDERERS[name](entries))
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a generated block is out of date; write nothing")
    args = parser.parse_args()
    entries = load_entries()
    stale = []
    for doc, names in BLOCKS.items():
        path = ROOT / doc
        current = path.read_text()
        try:
            text = render_doc(current, names, entries)
        except MissingMarker as exc:
            print(f"{doc}: {exc}; add the markers where the table belongs")
            return 1
        if text == current:
            continue
        if args.check:
            stale.append(doc)
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(), doc, "generated", n=1, lineterm="")
            print("\n".join(list(diff)[:40]))
        else:
            path.write_text(text)
            print(f"wrote {doc}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python tools/docs.py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
