"""The model-specific code the scripts name as hooks (one module per model that needs any), and the registry of
the shipped scripts below, which the release tool, the docs and the tests read.

A model's facts (id, image, flags, prompt, sampling) are stated in its scripts, where a user edits them; twins state
the same facts, and tests/test_recipe_facts.py checks that they do. Adding a model is one script per shape (a copy
of a sibling's, with its own FACTS), hooks here if it needs code, and one `Recipe` per script in RECIPES.
"""

from __future__ import annotations

from dataclasses import dataclass

SHAPES = ("offline", "server", "saturate")


@dataclass(frozen=True)
class Recipe:
    """One shipped script: the model it runs (its twins share the name), its shape, and its twin (the same model in
    the other shape, which its docstring offers; None where the model has one script)."""

    script: str
    model: str
    shape: str
    twin: str | None


RECIPES = (
    Recipe("ovis-ocr2.py", "ovis_ocr2", "offline", "ovis-ocr2-server.py"),
    Recipe("ovis-ocr2-server.py", "ovis_ocr2", "server", "ovis-ocr2.py"),
    Recipe("lighton-ocr3.py", "lighton_ocr3", "offline", "lighton-ocr3-saturate.py"),
    Recipe("lighton-ocr3-saturate.py", "lighton_ocr3", "saturate", "lighton-ocr3.py"),
    Recipe("nanonets-ocr2.py", "nanonets_ocr2", "offline", "nanonets-ocr2-server.py"),
    Recipe("nanonets-ocr2-server.py", "nanonets_ocr2", "server", "nanonets-ocr2.py"),
    Recipe("hpd-parsing-saturate.py", "hpd_parsing", "saturate", None),
)


def recipe(script: str) -> Recipe:
    """The registry entry of a script, by its file name."""
    for entry in RECIPES:
        if entry.script == script:
            return entry
    raise KeyError(f"{script!r} is not a recipe; RECIPES in src/ocr_models/__init__.py lists them")
