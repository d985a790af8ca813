"""The core's layout, read from its imports: stage folders that import one way, and modules a reader can find.

Each stage may use the stages below it and never one above, so a stage can be read (and tested) with only what
lies under it in mind. The order, lowest first, is RECORDS (the shared modules at the top of ocr_core), STAGES, ENTRY.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "src" / "ocr_core"

# The shared records at the top of ocr_core, the stage folders, and the entry over all of them.
RECORDS = ("console", "errors", "facts", "rates", "redaction", "settings", "summary_line", "version")
# The command line sits above the engine stages: it composes their typed errors into advice and launches --jobs.
STAGES = (
    "inputs",
    "planning",
    "store",
    "judging",
    "serving",
    "preparation",
    "shapes",
    "publishing",
    "command",
    "fanout",
)
ENTRY = ("entry", "internals", "__init__")
MAX_TOP_MODULES = 11
MAX_LINES = 400


def modules() -> dict[str, Path]:
    """Every module by its dotted name under ocr_core (a folder's __init__.py by the folder's name)."""
    found = {}
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(CORE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)] = path
    return found


def imported(name: str, path: Path) -> set[str]:
    """The ocr_core modules `path` imports, lazy imports included: `from .x import y` names module x, or x.y when
    that is a module."""
    known = modules()
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                child = f"{target}.{alias.name}" if target else alias.name
                found.add(child if child in known else target)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ocr_core":
            found.add(".".join(node.module.split(".")[1:]))
    return {module for module in found if module in known}


def layer(name: str) -> int:
    top = name.split(".")[0]
    if top in RECORDS:
        return 0
    if top in STAGES:
        return 1 + STAGES.index(top)
    assert top in ENTRY, f"ocr_core/{top} has no layer: add it to tests/test_layers.py's order"
    return 1 + len(STAGES)


def test_no_stage_imports_one_above_it():
    upward = [
        f"{name} imports {other}"
        for name, path in modules().items()
        for other in sorted(imported(name, path))
        if layer(other) > layer(name)
    ]
    assert upward == []


def test_the_imports_have_no_cycle():
    graph = {name: imported(name, path) - {name} for name, path in modules().items()}
    done: set[str] = set()

    def cycle_from(name: str, trail: list[str]) -> list[str] | None:
        if name in trail:
            return [*trail[trail.index(name) :], name]
        if name in done:
            return None
        for other in sorted(graph[name]):
            if found := cycle_from(other, [*trail, name]):
                return found
        done.add(name)
        return None

    cycles = [found for name in graph if (found := cycle_from(name, []))]
    assert cycles == []


def test_few_modules_stay_at_the_top():
    top = sorted(path.name for path in CORE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    assert {Path(name).stem for name in top} <= {*RECORDS, *ENTRY}
    assert {path.parent.name for path in CORE.glob("*/__init__.py")} == set(STAGES)


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_is_long(name):
    assert len(modules()[name].read_text().splitlines()) <= MAX_LINES


def test_no_two_modules_share_a_name_and_none_is_named_like_a_public_function():
    stems = [name.split(".")[-1] for name in modules() if name != "__init__"]
    assert sorted({stem for stem in stems if stems.count(stem) > 1}) == []
    functions = {
        node.name
        for path in modules().values()
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")
    }
    assert sorted(set(stems) & functions) == []


FACES = {"ocr_core": CORE / "__init__.py", "ocr_core.internals": CORE / "internals.py"}
MAX_USER_FACE = 12
# Who enters through which face: the recipes and the model modules compose only the user's face; the project's own
# bench/ and tools/ may use both. Tests are not held to a face: they test the modules behind it.
USER_FACE_IMPORTERS = ("*.py", "src/ocr_models/*.py")
BOTH_FACES_IMPORTERS = ("bench/**/*.py", "bench/**/*.sh", "tools/**/*.py", "tools/**/*.sh")
FROM_IMPORT = re.compile(r"\bfrom (ocr_core(?:\.\w+)*) import (\([^)]*\)|[^\n;\"']*)")
MODULE_PATH = re.compile(r"\bocr_core\.\w+")


def declared(face: str) -> list[str]:
    tree = ast.parse(FACES[face].read_text())
    return next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(target, "id", "") == "__all__" for target in node.targets)
    )


def files(patterns: tuple[str, ...]) -> list[Path]:
    root = CORE.parent.parent
    return sorted({path for pattern in patterns for path in root.glob(pattern) if ".testbed" not in path.parts})


def taken(path: Path) -> list[tuple[str, str]]:
    """Each (face, name) that `path` imports from the core, in code or in a command it holds as text. A template's
    placeholder (tools/render.py's `{entry_point.__name__}`) is no name: the scripts it renders are checked."""
    found = []
    for match in FROM_IMPORT.finditer(path.read_text()):
        names = " ".join(line.partition("#")[0] for line in match.group(2).strip("()").splitlines())
        found += [(match.group(1), name.split()[0]) for name in names.split(",") if name.strip()]
    return [(face, name) for face, name in found if name.isidentifier()]


@pytest.mark.parametrize("face", sorted(FACES))
def test_each_face_declares_what_it_hands_on(face):
    tree = ast.parse(FACES[face].read_text())
    imported_names = {
        alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert sorted(declared(face)) == sorted(imported_names)


def test_the_user_face_is_what_a_recipe_composes():
    assert {"ModelFacts", "run_offline", "run_server", "run_saturate"} <= set(declared("ocr_core"))
    assert len(declared("ocr_core")) <= MAX_USER_FACE, declared("ocr_core")


def test_the_two_faces_share_no_name():
    assert sorted(set(declared("ocr_core")) & set(declared("ocr_core.internals"))) == []


def test_recipes_and_models_use_only_the_user_face():
    root = CORE.parent.parent
    wrong = [
        f"{path.relative_to(root)}: {face} {name}"
        for path in files(USER_FACE_IMPORTERS)
        for face, name in taken(path)
        if face != "ocr_core" or name not in declared("ocr_core")
    ]
    reached = [
        f"{path.relative_to(root)}: {match.group(0)}"
        for path in files(USER_FACE_IMPORTERS)
        for match in MODULE_PATH.finditer(path.read_text())
    ]
    assert wrong + reached == []


def test_bench_and_tools_enter_only_through_the_faces():
    root = CORE.parent.parent
    wrong = [
        f"{path.relative_to(root)}: {face} {name}"
        for path in files(BOTH_FACES_IMPORTERS)
        for face, name in taken(path)
        if face not in FACES or name not in declared(face)
    ]
    reached = [
        f"{path.relative_to(root)}: {match.group(0)}"
        for path in files(BOTH_FACES_IMPORTERS)
        for match in MODULE_PATH.finditer(path.read_text())
        if match.group(0) != "ocr_core.internals"
    ]
    assert wrong + reached == []


@pytest.mark.parametrize(
    ("face", "importers"),
    [("ocr_core", USER_FACE_IMPORTERS + BOTH_FACES_IMPORTERS), ("ocr_core.internals", BOTH_FACES_IMPORTERS)],
)
def test_every_name_on_a_face_has_a_user(face, importers):
    used = {name for path in files(importers) for taken_face, name in taken(path) if taken_face == face}
    assert sorted(set(declared(face)) - used) == []


# The parsed command line (`Settings`) is read by the command line, the fan-out and the plan's maker alone: every
# stage below them receives the plan's records (planning/run_plan.py) instead.
SETTINGS_READERS = ("command", "fanout", "planning.make_plan", "planning.plan_records", "settings")


def test_only_the_command_line_the_fanout_and_the_plan_maker_import_settings():
    readers = sorted(name for name, path in modules().items() if "settings" in imported(name, path))
    assert [name for name in readers if not name.startswith(SETTINGS_READERS)] == []
