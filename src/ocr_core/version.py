"""Which core is running: the installed distribution's version and the folder its code was imported from.

Every summary line carries both, so a run (and the tests that run the shipped scripts through `uv run`) can tell the
released wheel a script pins from a checkout's src/ or an editable install.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "ocr-vllm-core"


def core_version() -> str | None:
    """The version of the installed distribution; None when the code runs from a checkout nothing installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def core_identity() -> dict[str, str | None]:
    return {"version": core_version(), "location": str(Path(__file__).resolve().parent)}
