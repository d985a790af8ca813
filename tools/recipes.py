"""The shipped scripts as modules, so the tools and the tests read a script's FACTS the way the script states them.

Loading a script runs its top level only (the entry is behind `__name__ == "__main__"`); its imports resolve from
whatever the process has: src/ for the tools and the pytest process, the installed wheel under
tests/testbed/hub_run.py, which runs with the python of the script's own uv environment.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

from ocr_core import ModelFacts

ROOT = Path(__file__).resolve().parent.parent


@cache
def load_script(script: str) -> ModuleType:
    path = ROOT / script
    spec = importlib.util.spec_from_file_location(f"recipe_{path.stem.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def facts_of(script: str) -> ModelFacts:
    return load_script(script).FACTS
