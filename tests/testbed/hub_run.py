"""Runs a recipe's `main` in its own process with a folder-backed Hub double, so a test can signal a Hub run.

    python -m tests.testbed.hub_run HUB_FOLDER SCRIPT ARGS...

The recipe code is the package in src/ (the same code every generated script inlines); only the Hub is a double.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from ocr_models import RECIPES
from tests.testbed.hub_double import FolderHub


def run(hub_folder: str, script: str, argv: list[str]) -> int:
    recipe = next(recipe for recipe in RECIPES if recipe.script == script)
    model = importlib.import_module(f"ocr_models.{recipe.model}")
    return importlib.import_module(f"ocr_core.{recipe.entry}").main(
        vars(model), script, recipe.shape, argv, hub=FolderHub(Path(hub_folder))
    )


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
