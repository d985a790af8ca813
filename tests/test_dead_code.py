"""No code that nothing calls and no state that nothing reads, in the core, the model facts and the tools.

Vulture finds definitions whose names nothing in src/ or tools/ uses; the generated scripts are copies and are left
out. A name read only by tests is dead too: the tests are not scanned. Real false positives (names read by string
key, columns written through asdict, signatures fixed by a caller) go in tests/dead_code_whitelist.py, with the reason.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ocr_models import RECIPES

ROOT = Path(__file__).resolve().parent.parent
WHITELIST = Path(__file__).resolve().parent / "dead_code_whitelist.py"
# 60 reports everything vulture knows: unused functions, classes, methods, attributes, variables and imports.
MIN_CONFIDENCE = "60"


def vulture(*paths: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "vulture", *paths, str(WHITELIST), "--min-confidence", MIN_CONFIDENCE]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)


def test_src_and_tools_hold_no_dead_code():
    result = vulture("src", "tools", *(recipe.script for recipe in RECIPES))  # the scripts call the entries
    assert result.returncode == 0, (
        f"dead code (delete it, or whitelist a real false positive):\n{result.stdout}{result.stderr}"
    )


def test_the_check_reports_an_unused_function_and_attribute(tmp_path):
    module = tmp_path / "module.py"
    module.write_text(
        "class Pump:\n"
        "    def __init__(self):\n"
        "        self.metrics_start = 0.0\n\n\n"
        "def never_called():\n"
        "    return Pump()\n"
    )
    result = vulture(str(module))
    assert result.returncode == 3
    assert "unused attribute 'metrics_start'" in result.stdout
    assert "unused function 'never_called'" in result.stdout
