"""Which core is running: the installed distribution's version, its build and the folder its code came from.

The build is "release" for the wheel tools/release.py builds, which alone carries the released scripts' hashes, and
"source tree" for any other (src/, an editable install, a wheel from `uv build`).

Every summary line carries them, and the card and `inference_info` the version and the build, so a run (and the
tests that run the shipped scripts through `uv run`) can tell the released wheel a script pins from a checkout.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "ocr-vllm-core"
RELEASE_TABLE = "released_scripts.json"


def core_version() -> str | None:
    """The version of the installed distribution; None when the code runs from a checkout nothing installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def release_table_path() -> Path:
    """Where tools/release.py puts the released scripts' table in the wheel: ocr_core/, beside this module. Every
    reader of the table asks here, so a module that moves into a stage folder still finds it."""
    return Path(__file__).with_name(RELEASE_TABLE)


def core_build() -> str:
    """ "release" for the release wheel (it holds the released scripts' table), else "source tree"."""
    return "release" if release_table_path().is_file() else "source tree"


def core_identity() -> dict[str, str | None]:
    return {"version": core_version(), "build": core_build(), "location": str(Path(__file__).resolve().parent)}
