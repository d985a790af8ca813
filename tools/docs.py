"""Writes the model facts into models.json and renders the docs' tables of recipes, models, stages and modules.

models.json is the one place that says which script runs which model on which image and what was measured. Its
facts (model id, shape, image, flags, prompt, sampling, columns, twin) are copied from the model registry and each
model's FACTS (src/ocr_models) by this tool, so only the hand-kept fields (params, license, notes, measured,
pinned_check) are edited there. The docs show it between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`
markers, and `--check` fails when models.json or a block differs from what this tool would write (the tests run it).
ARCHITECTURE.md's stage table follows the layer order tests/test_layers.py enforces, read from that file.
The measured figures models.json records are listed in bench/results/README.md, by tools/results_index.py.
Usage: python tools/docs.py [--check]  (with the test bed's python, which has the core's dependencies)
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from ocr_core import ModelFacts  # noqa: E402  (src/ is on the path only from here on)
from ocr_core.internals import (  # noqa: E402
    INFO_COLUMN,
    OFFLINE_BATCH,
    Gpu,
    Machine,
    job_command,
    memory_utilization,
    plan_scale,
)
from ocr_models import RECIPES, Recipe, model_module  # noqa: E402

MODELS_JSON = ROOT / "models.json"
CORE = ROOT / "src" / "ocr_core"
PACKAGES = (CORE, *sorted(folder.parent for folder in CORE.glob("*/__init__.py")), ROOT / "src" / "ocr_models")
LAYERS_TEST = ROOT / "tests" / "test_layers.py"
BLOCKS = {"README.md": ("scripts",), "SERVING.md": ("models",), "ARCHITECTURE.md": ("stages", "modules")}
SHAPES = {
    "offline": f"offline (`vllm.LLM`), batches of {OFFLINE_BATCH}",
    "server": "server, fixed window of each engine's batch",
    "saturate": "server, adaptive window",
}
EDIT_NOTE = (
    "<!-- rendered by tools/docs.py from models.json and src/ (the models' FACTS in "
    "ocr_models, module docstrings): edit those, then run python tools/docs.py -->"
)


class MissingMarker(ValueError):
    """A document lacks the markers of a block it should carry."""


HAND_KEPT = {"params": None, "license": None, "notes": "", "measured": [], "pinned_check": None}


def model_facts(recipe: Recipe) -> dict:
    """The fields of a script's models.json entry that the code decides, in the order the file lists them."""
    facts = model_module(recipe.model).FACTS
    return {
        "model_id": facts.model,
        "mode": recipe.shape,
        "image": facts.image,
        "vllm_pin": facts.vllm_pin if recipe.shape == "offline" else None,
        "flavor": facts.flavor,
        "job_command": job_command(recipe.script, facts),
        "serve_args": list(facts.serve_args),
        "serve_env": dict(facts.serve_env),
        "prompt": facts.prompt,
        "sampling": dict(facts.sampling),
        "request_extras": json.loads(json.dumps(dict(facts.request_extras))),
        "max_model_len": facts.max_model_len,
        "pdf_render": dict(facts.pdf_render),
        "outputs": ["markdown", "ocr_error", *facts.extra_columns, INFO_COLUMN],
        "twin": recipe.twin,
        "replica_plan": replica_plan(facts) if recipe.shape != "offline" else None,
    }


PLAN_MACHINES = {
    "1x H200, 16 cores": Machine((Gpu("0", "NVIDIA H200", 143771),), 16),
    "2x H200, 32 cores": Machine((Gpu("0", "NVIDIA H200", 143771), Gpu("1", "NVIDIA H200", 143771)), 32),
    "1x A100 80GB, 12 cores": Machine((Gpu("0", "NVIDIA A100-SXM4-80GB", 81920),), 12),
    "1x L4, 8 cores": Machine((Gpu("0", "NVIDIA L4", 23034),), 8),
}


def replica_plan(facts: ModelFacts) -> dict[str, str]:
    """What the machine plan starts for this model on a few machines, with its reason (scale.py decides), from the
    model card's flags under its pinned vLLM, as the recipe's own --plan shows it there."""
    share = memory_utilization(facts.serve_args)
    return {
        name: plan_scale(
            machine, facts.params_b, share, vllm_version=facts.vllm_pin, model_flags=facts.serve_args
        ).describe()
        for name, machine in PLAN_MACHINES.items()
    }


def with_model_facts(data: dict) -> dict:
    """models.json with every recipe's code-decided fields rewritten (a new recipe gets an entry), hand-kept fields
    and the underscore sections left as they are; entries of scripts no longer in the registry are dropped."""
    updated = {key: value for key, value in data.items() if key.startswith("_")}
    for recipe in RECIPES:
        entry = {**data.get(recipe.script, {}), **model_facts(recipe)}
        for key, empty in HAND_KEPT.items():
            entry.setdefault(key, empty)
        updated[recipe.script] = entry
    return updated


def load_entries(path: Path = MODELS_JSON) -> dict[str, dict]:
    """The per-script entries in file order; `_meta` and any other underscore key are not scripts."""
    data = json.loads(path.read_text())
    return {name: entry for name, entry in data.items() if not name.startswith("_")}


def cell(text: object) -> str:
    """A value that cannot break a markdown table row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def shown_image(image: str) -> str:
    """The image whole, registry host included: without it, the name a reader types pulls another image."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first):
        return f"`{image}` (vendor image, without uv: see the script's job command)"
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


def first_sentence(docstring: str) -> str:
    """A docstring's first sentence, its line breaks joined."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    head, found, _ = paragraph.partition(". ")
    return f"{head}." if found else paragraph


def module_docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def modules_table(entries: dict[str, dict]) -> str:
    """Each module of the package (ocr-vllm-core), with its one role: its docstring's first sentence."""
    rows = [
        [f"`{path.relative_to(ROOT / 'src').as_posix()}`", first_sentence(module_docstring(path))]
        for package in PACKAGES
        for path in sorted(package.glob("*.py"))
    ]
    return table(["module (src/)", "its role"], rows)


def models_by_id(entries: dict[str, dict]) -> dict[str, list[str]]:
    """Each model id with its scripts, in the order models.json lists them (twins share one model)."""
    grouped: dict[str, list[str]] = {}
    for script, entry in entries.items():
        grouped.setdefault(entry["model_id"], []).append(script)
    return grouped


def shown_pin(entry: dict) -> str:
    """The vLLM a model runs: the image tag's version, or the vendor's image where the tag names no release."""
    tag = entry["image"].rpartition(":")[2]
    return f"`{tag}`" if tag.startswith("v") else "the vendor's image"


PINNED_LEVELS = {"runs": "**runs end to end**", "flags": "flags parse"}


def models_section(entries: dict[str, dict]) -> str:
    """One row per model (its twins together): the image its scripts need, how far the pinned test tier gets on
    that vLLM and why not further; then each script's hand-kept notes, where models.json explains its facts."""
    rows = []
    for model_id, scripts in models_by_id(entries).items():
        entry = entries[scripts[0]]
        check = entry["pinned_check"] or {}
        rows.append(
            [
                model_id,
                ", ".join(f"`{script}`" for script in scripts),
                entry["params"] or "-",
                entry["license"] or "see the card",
                shown_pin(entry),
                f"{check.get('vllm', 'unchecked')}: {PINNED_LEVELS.get(check.get('level'), 'unchecked')}",
                check.get("why_not_higher") or "",
            ]
        )
    header = ["model", "scripts", "params", "license", "vLLM", "pinned tier reaches", "why not further"]
    notes = [f"- `{script}`: {entry['notes']}" for script, entry in entries.items() if entry["notes"]]
    return "\n".join([table(header, rows), "", *notes])


def layer_order(path: Path = LAYERS_TEST) -> dict[str, tuple[str, ...]]:
    """RECORDS, STAGES and ENTRY as tests/test_layers.py states them (lowest first), read without importing it."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and getattr(node.targets[0], "id", "")
            in (
                "RECORDS",
                "STAGES",
                "ENTRY",
            )
        ):
            found[node.targets[0].id] = tuple(ast.literal_eval(node.value))
    return found


def stages_table(entries: dict[str, dict]) -> str:
    """The layers from the top down: the entry, each stage folder in the order the layers test enforces, then the
    shared records; each with its docstring's first sentence, so the table says what the code says."""
    order = layer_order()
    rows = [
        [f"`{name}.py`", first_sentence(module_docstring(CORE / f"{name}.py"))]
        for name in order["ENTRY"]
        if name != "__init__"
    ]
    rows += [
        [f"`{stage}/`", first_sentence(module_docstring(CORE / stage / "__init__.py"))]
        for stage in reversed(order["STAGES"])
    ]
    records = ", ".join(f"`{name}.py`" for name in order["RECORDS"])
    rows.append([records, "the shared typed records and helpers every stage may use"])
    return table(["layer, from the top", "what it owns"], rows)


RENDERERS: dict[str, Callable[[dict[str, dict]], str]] = {
    "scripts": scripts_table,
    "models": models_section,
    "stages": stages_table,
    "modules": modules_table,
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
    stale = []
    current_json = MODELS_JSON.read_text()
    fresh_json = json.dumps(with_model_facts(json.loads(current_json)), indent=2, ensure_ascii=False) + "\n"
    if fresh_json != current_json:
        if args.check:
            stale.append("models.json")
            diff = difflib.unified_diff(current_json.splitlines(), fresh_json.splitlines(), "models.json", "generated")
            print("\n".join(list(diff)[:40]))
        else:
            MODELS_JSON.write_text(fresh_json)
            print("wrote models.json")
    entries = (
        load_entries()
        if not args.check
        else {name: entry for name, entry in json.loads(fresh_json).items() if not name.startswith("_")}
    )
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
