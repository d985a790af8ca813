"""The core's wheel, built from a checkout by uv: the one build the release (tools/release.py, which adds the
released scripts' hashes) and the test bed (tools/testbed/core_wheels.py) both use.

The build has a fixed timestamp (SOURCE_DATE_EPOCH), so the same source gives the same bytes. The release builds in
an isolated environment (uv fetches the build backend); the test bed builds with its own setuptools (`isolated=False`:
no download, so the demo runs with a bare environment).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import tomllib

# 1980-01-01, the earliest a zip can record: a wheel's bytes then depend on its source only.
BUILD_EPOCH = "315532800"


class WheelNotBuilt(RuntimeError):
    """uv build ran but wrote no wheel of this checkout's version."""


def wheel_name(root: Path) -> str:
    """The file name of the core's wheel that `root`'s pyproject.toml declares."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return f"{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"


def record_hash(data: bytes) -> str:
    """A RECORD line's hash, as the wheel format writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def uv_command() -> list[str]:
    """uv from PATH, else the one installed beside this python (the test bed's: requirements-test.txt)."""
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


@contextmanager
def building(root: Path) -> Iterator[None]:
    """One build of this tree at a time, across processes: setuptools writes its scratch (build/, src/*.egg-info)
    into the tree and the build deletes it after, so a second build beside the first (the demo's, the release's, the
    test suite's on another worker) would lose its scratch mid-build."""
    with (root / "pyproject.toml").open("rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build_core_wheel(root: Path, folder: Path, isolated: bool = True) -> Path:
    """Builds the core's wheel of the checkout at `root` into `folder`; returns its path."""
    command = [*uv_command(), "build", "--wheel", "--quiet", "--out-dir", str(folder)]
    if not isolated:
        command += ["--no-build-isolation", "--python", sys.executable]
    env = {**os.environ, "SOURCE_DATE_EPOCH": BUILD_EPOCH}
    folder.mkdir(parents=True, exist_ok=True)
    with building(root):
        subprocess.run([*command, str(root)], check=True, env=env, cwd=folder)
        for left in [root / "build", *(root / "src").glob("*.egg-info")]:
            shutil.rmtree(left)  # setuptools' scratch in the tree: its metadata would make src/ look installed
    built = folder / wheel_name(root)
    if not built.is_file():
        raise WheelNotBuilt(f"uv build did not write {built.name} into {folder}")
    return built
