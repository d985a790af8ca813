"""Generates the recipe scripts from src/ocr_models (model facts) and src/ocr_core (the shared core).

Every script must run alone from its URL, so each one carries a copy of the core; this tool writes those copies
and `--check` fails when a committed script differs from what it would write (CI runs it through the tests).
Usage: python tools/build_scripts.py [--check]
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ocr_core.provenance import RELEASE_HASH_NAME, release_digest  # noqa: E402  (one definition of the hash)
from ocr_models import RECIPES, Recipe  # noqa: E402  (the registry is plain data; importing it runs no model code)

CORE = ROOT / "src" / "ocr_core"
MODELS = ROOT / "src" / "ocr_models"
PACKAGES = ("ocr_core", "ocr_models")
DRIVER_DEPENDENCIES = (
    "datasets>=4.0",
    "huggingface-hub>=0.34",
    "httpx>=0.27",
    "pillow>=10.1",
    "tqdm>=4.66",
    "pypdfium2>=4.30",
)


def core_order(roots: list[str]) -> list[str]:
    """The core modules `roots` need, each after the ones it imports from (alphabetical where free), so the
    inlined code runs; a script carries only what its shape can run."""
    needs: dict[str, set[str]] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name not in needs:
            needs[name] = set(core_imports(CORE / f"{name}.py"))
            pending.extend(needs[name])
    order: list[str] = []
    while needs:
        ready = sorted(name for name, wanted in needs.items() if wanted <= set(order))
        if not ready:
            raise SystemExit(f"import cycle among {sorted(needs)}")
        order.append(ready[0])
        del needs[ready[0]]
    return order


def core_imports(path: Path) -> list[str]:
    """The core modules a module imports: `from .x import ...` inside the core, `from ocr_core.x import ...` in a
    model module."""
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level == 1:
                found.append(node.module)
            elif node.module.startswith("ocr_core."):
                found.append(node.module.split(".", 1)[1])
    return found


@dataclass
class Split:
    """A module cut into its docstring, its outside imports and the rest of its code."""

    docstring: str
    imports: list[ast.stmt]
    body: str


def split_module(path: Path) -> Split:
    source = path.read_text()
    tree = ast.parse(source)
    lines = source.splitlines()
    drop: set[int] = set()
    imports: list[ast.stmt] = []
    docstring = ast.get_docstring(tree) or ""
    for index, node in enumerate(tree.body):
        is_docstring = index == 0 and docstring and isinstance(node, ast.Expr)
        if is_docstring or isinstance(node, (ast.Import, ast.ImportFrom)):
            drop.update(range(node.lineno - 1, node.end_lineno))
            if not is_docstring and not internal(node):
                imports.append(node)
    kept = [line for number, line in enumerate(lines) if number not in drop]
    return Split(docstring, imports, "\n".join(kept).strip("\n"))


def internal(node: ast.stmt) -> bool:
    """Imports between our own modules vanish once everything shares one namespace; __future__ is re-added."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in (*PACKAGES, "__future__")
    return any(alias.name.split(".")[0] in PACKAGES for alias in node.names)


def import_block(nodes: list[ast.stmt]) -> str:
    """Merged, isort-ordered imports: stdlib then third party; `import x` lines before `from x import y`."""
    plain: dict[bool, set[str]] = {True: set(), False: set()}
    names: dict[tuple[bool, str], set[str]] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                text = alias.name + (f" as {alias.asname}" if alias.asname else "")
                plain[stdlib(alias.name)].add(text)
        else:
            key = (stdlib(node.module or ""), node.module or "")
            names.setdefault(key, set()).update(
                alias.name + (f" as {alias.asname}" if alias.asname else "") for alias in node.names
            )
    groups = []
    for is_std in (True, False):
        lines = [f"import {name}" for name in sorted(plain[is_std], key=str.lower)]
        for (group, module), imported in sorted(names.items(), key=lambda item: item[0][1].lower()):
            if group == is_std:
                lines.append(from_line(module, sorted(imported, key=sort_key)))
        if lines:
            groups.append("\n".join(lines))
    return "\n\n".join(groups)


def sort_key(name: str) -> tuple[int, str]:
    """isort's order-by-type: CONSTANTS, then Classes, then functions."""
    bare = name.split(" as ")[0]
    kind = 0 if bare.isupper() else 1 if bare[:1].isupper() else 2
    return kind, bare.lower()


def from_line(module: str, imported: list[str]) -> str:
    line = f"from {module} import {', '.join(imported)}"
    if len(line) <= 120:
        return line
    inner = "".join(f"    {name},\n" for name in imported)
    return f"from {module} import (\n{inner})"


def stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def check_no_clashes(parts: dict[str, Split]) -> None:
    """Two modules defining one top-level name would silently shadow each other once inlined."""
    seen: dict[str, str] = {}
    for name, part in parts.items():
        for node in ast.parse(part.body).body:
            for defined in defined_names(node):
                if defined in seen:
                    raise SystemExit(f"{defined!r} is defined in both {seen[defined]} and {name}: rename one")
                seen[defined] = name


def defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [target.id for target in node.targets if isinstance(target, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def header(recipe: Recipe, facts: dict) -> str:
    dependencies = list(DRIVER_DEPENDENCIES)
    if recipe.shape == "offline":
        dependencies.append(f"vllm=={facts['VLLM_PIN']}")
    listed = "".join(f'#     "{dependency}",\n' for dependency in dependencies)
    return (
        "# /// script\n"
        '# requires-python = ">=3.10"\n'
        f"# dependencies = [\n{listed}# ]\n"
        "#\n"
        "# [tool.hf-jobs]\n"
        f'# image = "{facts["IMAGE"]}"\n'
        f'# flavor = "{facts.get("FLAVOR", "l4x1")}"\n'
        f'# timeout = "{literal_facts(CORE / "cli.py")["DEFAULT_JOB_TIMEOUT"]}"\n'
        '# secrets = ["HF_TOKEN"]\n'
        "# ///\n"
    )


def literal_facts(path: Path) -> dict:
    """The model module's literal constants (IMAGE, FLAVOR, JOB_COMMAND), read without importing it."""
    facts = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                facts[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return facts


def job_line(recipe: Recipe, facts: dict) -> str:
    cli = literal_facts(CORE / "cli.py")
    template = facts.get("JOB_COMMAND", cli["JOB_COMMAND_TEMPLATE"])
    return template.format(
        flavor=facts.get("FLAVOR", "l4x1"), timeout=cli["DEFAULT_JOB_TIMEOUT"], image=facts["IMAGE"],
        url=f"{cli['SCRIPTS_URL']}/{recipe.script}", args="INPUT OUTPUT",
    )  # fmt: skip


SHAPE_SENTENCES = {
    "offline": "runs the vLLM engine in-process (`vllm.LLM`) and feeds it batches of pages",
    "server": "starts `vllm serve` when no server answers, then keeps a fixed window of pages in flight",
    "saturate": "starts `vllm serve` when no server answers, then widens the window of pages in flight until the "
    "engine's queue fills or host memory says stop",
}
HOOKS_AND_FACTS = CORE / "facts.py"
BUILD_FACTS = ("PROMPT", "VLLM_PIN")  # read by the build and the docs, not at run time


def docstring(recipe: Recipe, model: Split, facts: dict, places: dict[str, int]) -> str:
    """What it does, the job command, the other ways to run it, its twin, and where to read on."""
    local = f"uv run {recipe.script} INPUT OUTPUT"
    if recipe.shape == "offline":
        ways = f"or on your own GPU machine:\n    {local}\n"
        twin = (
            f"Its twin {recipe.twin} runs the same model through `vllm serve`: faster on the same GPU, and a page "
            "that fails stays one error row."
        )
    else:
        ways = (
            f"or on your own GPU machine, or against a server already running:\n    {local}\n    {local} --server URL\n"
        )
        twin = f"Its twin {recipe.twin} runs the same model in-process (`vllm.LLM`)." if recipe.twin else ""
    where = (
        f"Read on: the model's facts at line {places['facts']}, a map of the rest at line {places['contents']}, "
        f"`main` at line {places['main']}."
    )
    return (
        f'"""{model.docstring}\n\n'
        f"{wrapped(f'This script {SHAPE_SENTENCES[recipe.shape]}. {twin}'.strip())}\n\n"
        f"Run it on Hugging Face Jobs:\n    {job_line(recipe, facts)}\n{ways}"
        "Run it without arguments for usage.\n\n"
        f"{wrapped(where)}\n"
        "Generated by tools/build_scripts.py from src/ocr_models and src/ocr_core: edit those, then rebuild.\n"
        '"""'
    )


def wrapped(text: str) -> str:
    """A docstring paragraph; a script's name is never broken at its hyphen."""
    return textwrap.fill(text, 116, break_on_hyphens=False)


def known_model_names() -> tuple[set[str], set[str]]:
    """The facts (upper case) and hooks (lower case) ModelFacts reads from a model module, from its source."""
    names = set(BUILD_FACTS)
    for node in ast.walk(ast.parse(HOOKS_AND_FACTS.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            names.add(node.slice.value)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get" and node.args:
            names.update(arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant))
    return {name for name in names if name.isupper()}, {name for name in names if name.islower()}


def check_model_names(recipe: Recipe, model: Split) -> list[str]:
    """The hooks the model overrides; a public name that is neither a fact, a hook nor the model's own (prefixed
    with its name) is refused, since ModelFacts would silently ignore a misspelt `MAX_SIDES`."""
    facts, hooks = known_model_names()
    prefix = recipe.model.split("_")[0]
    overridden = []
    for node in ast.parse(model.body).body:
        for name in defined_names(node):
            if name in hooks:
                overridden.append(name)
            elif not (name in facts or name.startswith("_") or name.lower().startswith(f"{prefix}_")):
                raise SystemExit(
                    f"src/ocr_models/{recipe.model}.py defines {name!r}, which is neither a model fact nor a hook "
                    f"that ModelFacts reads; fix its spelling, or name a helper {prefix}_... / {prefix.upper()}_..."
                )
    return overridden


def summary_line(text: str) -> str:
    """A docstring's first line, cut to fit one row of a table or a map."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= 100 else first[:97] + "..."


def commented(text: str) -> str:
    return "\n".join(f"# {line}".rstrip() for line in text.strip().splitlines())


def contents(sections: list[tuple[str, str]], places: dict[str, int], hooks: list[str], recipe: Recipe) -> str:
    """The map printed after the model facts: each section with its line, and where to start reading."""
    rows = [f"#   line {places[marker]:>5}  {title}" for marker, title in sections]
    overridden = ", ".join(hooks) if hooks else "none (the defaults serve this model)"
    return (
        "# ==== contents ====\n"
        f"# `main` (the entry point): line {places['main']}, in ocr_core/{recipe.entry}.py\n"
        f"# the options (`build_parser`): line {places['options']}, in ocr_core/cli.py\n"
        f"# hooks this model overrides: {overridden}\n"
        "# the shared core, each section after the ones it uses:\n" + "\n".join(rows)
    )


def line_of(lines: list[str], prefix: str) -> int:
    return next(number for number, line in enumerate(lines, 1) if line.startswith(prefix))


def render(recipe: Recipe) -> str:
    model_path = MODELS / f"{recipe.model}.py"
    model = split_module(model_path)
    hooks = check_model_names(recipe, model)
    names = core_order([recipe.entry, *core_imports(model_path)])
    core = {name: split_module(CORE / f"{name}.py") for name in names}
    check_no_clashes({f"ocr_models/{recipe.model}.py": model, **{f"ocr_core/{k}.py": v for k, v in core.items()}})
    facts = literal_facts(model_path)
    imports = import_block([*model.imports, *(node for part in core.values() for node in part.imports)])
    markers = {name: f"# ---- ocr_core/{name}.py ----" for name in core}
    sections = [(markers[name], f"ocr_core/{name}.py: {summary_line(part.docstring)}") for name, part in core.items()]
    core_text = "\n\n\n".join(
        f"{markers[name]}\n{commented(part.docstring)}\n\n\n{part.body}" for name, part in core.items()
    )
    facts_marker = f"# ==== model facts: src/ocr_models/{recipe.model}.py ===="

    def text(places: dict[str, int]) -> str:
        return (
            f"{header(recipe, facts)}{docstring(recipe, model, facts, places)}\n"
            "# ruff: noqa: E501  (the docstring's job command is one line, to copy whole)\n\n"
            f"from __future__ import annotations\n\n{imports}\n\n"
            f"{facts_marker}\n{model.body}\n\n\n"
            f"{contents(sections, places, hooks, recipe)}\n\n\n"
            f"{core_text}\n\n\n"
            f"# the sha256 of this file with this value blank: a copy whose bytes differ is recorded as modified\n"
            f'{RELEASE_HASH_NAME} = ""\n\n'
            'if __name__ == "__main__":\n'
            f'    raise SystemExit(main(globals(), script="{recipe.script}", mode="{recipe.shape}"))\n'
        )

    keys = ["facts", "contents", "main", "options", *markers.values()]
    draft = text(dict.fromkeys(keys, 0)).splitlines()
    entry_at = line_of(draft, markers[recipe.entry])
    places = {
        "facts": line_of(draft, facts_marker),
        "contents": line_of(draft, "# ==== contents ===="),
        "main": entry_at + next(i for i, line in enumerate(draft[entry_at:]) if line.startswith("def main(")) + 1,
        "options": line_of(draft, "def build_parser("),
        **{marker: line_of(draft, marker) for marker in markers.values()},
    }
    return released(text(places))


def released(text: str) -> str:
    """The script with the hash of its own text recorded in it, so a run can tell the release from an edited copy."""
    blank = f'{RELEASE_HASH_NAME} = ""'
    return text.replace(blank, f'{RELEASE_HASH_NAME} = "{release_digest(text)}"', 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a committed script differs; write nothing")
    args = parser.parse_args()
    stale = []
    for recipe in RECIPES:
        path = ROOT / recipe.script
        text = render(recipe)
        current = path.read_text() if path.exists() else ""
        if current == text:
            continue
        if args.check:
            stale.append(recipe.script)
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(), recipe.script, "generated", n=1)
            print("\n".join(list(diff)[:40]))
        else:
            path.write_text(text)
            print(f"wrote {recipe.script}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python tools/build_scripts.py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
