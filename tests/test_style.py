"""ruff, pinned in requirements-test.txt, over the whole checkout: a line over the limit once landed on main because
nothing in the suite ran it, and CI runs only the suite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.testbed.env import REPO_ROOT


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_the_checkout_is_ruff_clean(command):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
