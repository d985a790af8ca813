"""Each model the collection ships, stated once: one module per model, and the registry below of its scripts.

A model's module `ocr_models/<model>.py` holds all that is the model's: its docstring (the first paragraph says what
the model is, the rest why its facts are what they are), its `FACTS = ModelFacts(...)` and the hooks FACTS names.
The scripts at the top level are rendered from it by tools/release.py (`python tools/release.py render`), FACTS as
the plain Python it is written in, so a reader sees the prompt and sampling in the script they run and a user edits
their own copy; `python tools/release.py check` and the tests fail when a committed script differs from its
rendering. Adding a model is its module and one `Model` in MODELS.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

SHAPES = ("offline", "server", "saturate")


@dataclass(frozen=True)
class Recipe:
    """One shipped script: the model it runs (its twins share the name), its shape, and its twin (the same model in
    the other shape, which its docstring offers; None where the model has one script)."""

    script: str
    model: str
    shape: str
    twin: str | None


@dataclass(frozen=True)
class Model:
    """A model and its script of each shape it ships in: one, or a twin pair (an offline and a server script)."""

    module: str
    offline: str | None = None
    server: str | None = None
    saturate: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= len(self.scripts()) <= 2:
            raise ValueError(f"{self.module} names {len(self.scripts())} scripts: a model ships one, or a twin pair")

    def scripts(self) -> dict[str, str]:
        """Its scripts by shape, in the order of SHAPES."""
        return {shape: getattr(self, shape) for shape in SHAPES if getattr(self, shape)}

    def recipes(self) -> tuple[Recipe, ...]:
        scripts = self.scripts()
        return tuple(
            Recipe(script, self.module, shape, next((other for other in scripts.values() if other != script), None))
            for shape, script in scripts.items()
        )


MODELS = (
    Model("ovis_ocr2", offline="ovis-ocr2.py", server="ovis-ocr2-server.py"),
    Model("lighton_ocr3", offline="lighton-ocr3.py", saturate="lighton-ocr3-saturate.py"),
    Model("nanonets_ocr2", offline="nanonets-ocr2.py", server="nanonets-ocr2-server.py"),
    Model("hpd_parsing", saturate="hpd-parsing-saturate.py"),
)
RECIPES = tuple(entry for model in MODELS for entry in model.recipes())


def recipe(script: str) -> Recipe:
    """The registry entry of a script, by its file name."""
    for entry in RECIPES:
        if entry.script == script:
            return entry
    raise KeyError(f"{script!r} is not a recipe; MODELS in src/ocr_models/__init__.py lists them")


def model_module(model: str) -> ModuleType:
    """A model's module (`lighton_ocr3`), imported only when asked: a script imports the one module it names."""
    return importlib.import_module(f"{__name__}.{model}")
