"""One module per model: the facts its recipes are generated from (id, image tag, serve flags, prompt, hooks), and
the registry of recipes below, which the build, the docs, the lint settings and the tests all read.

Offline and server twins inline the same module, so they cannot disagree about the model. Adding a model is one
module here and one `Recipe` per script in RECIPES; `python tools/build_scripts.py` does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

SHAPES = ("offline", "server", "saturate")


@dataclass(frozen=True)
class Recipe:
    """One shipped script: the model module it inlines, its shape, and its twin (the same model in the other
    shape, which its docstring offers; None where the model has one script)."""

    script: str
    model: str
    shape: str
    twin: str | None

    @property
    def entry(self) -> str:
        """The core module whose `main` the script runs: offline recipes own a `vllm.LLM`, the others a server."""
        return "run_offline" if self.shape == "offline" else "run_server"


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
