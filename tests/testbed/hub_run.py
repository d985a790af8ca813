"""Runs a shipped script's entry in its own process with a folder-backed Hub double, so a test can signal a Hub run.

    SCRIPT_ENV_PYTHON -m tests.testbed.hub_run HUB_FOLDER SCRIPT ARGS...

It runs with the python of the script's own uv environment (tests.testbed.env.script_python), so the core is the
installed wheel, as under `uv run SCRIPT`: the script's FACTS and path go to its shape's entry, with the
double as `hub`. Only the Hub differs from a user's run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.testbed.hub_double import FolderHub
from tests.testbed.recipes import run_entry

if __name__ == "__main__":
    sys.exit(run_entry(sys.argv[2], sys.argv[3:], FolderHub(Path(sys.argv[1]))))
