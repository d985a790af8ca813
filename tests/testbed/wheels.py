"""The core's wheel and the vLLM stand-ins every test process runs the scripts on, built once per change of their
sources and shared by all test processes.

Building the wheel and syncing each shipped script's uv environment to it costs seconds per script; with several
pytest workers each would do it, and a worker reinstalling an environment while another runs a script from it would
see half-installed packages. So the folder lives in the test bed (`.testbed/wheels`), is prepared under a file lock,
and carries a digest of everything that goes into it: while the digest matches, nothing is rebuilt or reinstalled.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import tomllib

from tests.testbed.env import REPO_ROOT, SCRIPTS_UV_CACHE, TESTBED_DIR, UV, VENV_PYTHON, testbed_env, uv_env

WHEELS_DIR = TESTBED_DIR / "wheels"
DIGEST_FILE = ".sources-digest"
# The core's distribution name, from the file the wheel is built by: the demo runs this module on the test bed's
# python, where nothing installed ocr_core.
DISTRIBUTION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["name"]


def sources_digest() -> str:
    """A hash of the core's sources, its build metadata, the stand-ins' builder, the scripts (their headers pin the
    core and vLLM), the interpreter the stand-ins point at and the uv cache the synced environments live in."""
    digest = hashlib.sha256(f"{VENV_PYTHON.resolve()}\0{SCRIPTS_UV_CACHE}".encode())
    inputs = [REPO_ROOT / "pyproject.toml", REPO_ROOT / "tools" / "testbed" / "core_wheels.py"]
    inputs.append(REPO_ROOT / "tools" / "core_wheel.py")
    inputs += sorted(REPO_ROOT.glob("*.py"))
    inputs += sorted(path for path in (REPO_ROOT / "src").rglob("*") if path.is_file() and is_source(path))
    for path in inputs:
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def is_source(path: Path) -> bool:
    """Not byte-code nor the build's own scratch (setuptools' egg-info)."""
    return not any(part == "__pycache__" or part.endswith(".egg-info") for part in path.parts)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on `path` (created if absent) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ready_wheels() -> Path:
    """The wheel folder for this checkout's sources, built only when its digest changed (which drops every script
    environment's sync stamp with the old folder)."""
    want = sources_digest()
    stamp = WHEELS_DIR / DIGEST_FILE
    with locked(TESTBED_DIR / "wheels.lock"):
        if stamp.is_file() and stamp.read_text() == want:
            return WHEELS_DIR
        shutil.rmtree(WHEELS_DIR, ignore_errors=True)
        builder = REPO_ROOT / "tools" / "testbed" / "core_wheels.py"
        subprocess.run([str(VENV_PYTHON), str(builder), str(WHEELS_DIR)], check=True, capture_output=True,
                       env=testbed_env())  # fmt: skip
        stamp.write_text(want)
    return WHEELS_DIR


def synced(script: str) -> None:
    """Installs the folder's wheels into a shipped script's uv environment, unless they are there already.

    uv keys a script's environment by the script's path, so the suite's runs of a script and the demo's share one;
    reinstalling it under a running script breaks that script's imports. So each environment is synced once per
    digest, under the folder's lock, and a stamp in the folder says it was. `--reinstall-package` replaces a wheel of
    the same version (the core, a vLLM stand-in) that an earlier build left there."""
    stamp = WHEELS_DIR / f".synced-{script}"
    with locked(TESTBED_DIR / "wheels.lock"):
        want = (WHEELS_DIR / DIGEST_FILE).read_text()
        if stamp.is_file() and stamp.read_text() == want:
            return
        subprocess.run(
            [str(UV), "sync", "--quiet", "--script", str(REPO_ROOT / script),
             "--reinstall-package", DISTRIBUTION, "--reinstall-package", "vllm"],
            check=True, env={**testbed_env(), **uv_env(WHEELS_DIR)},
        )  # fmt: skip
        stamp.write_text(want)


def installed_digest_matches(venv: Path) -> bool:
    """Whether the pinned venv `venv` already holds the wheel of these sources (see mark_installed)."""
    stamp = venv / ".core-wheel-digest"
    return stamp.is_file() and stamp.read_text() == sources_digest()


def mark_installed(venv: Path) -> None:
    (venv / ".core-wheel-digest").write_text(sources_digest())


if __name__ == "__main__":
    # The demo's entry (tools/testbed/demo.sh): python -m tests.testbed.wheels SCRIPT syncs SCRIPT's environment
    # and prints, one NAME=VALUE a line, the uv variables that run it there, as the suite's runs do.
    folder = ready_wheels()
    synced(sys.argv[1])
    print("\n".join(f"{name}={value}" for name, value in uv_env(folder).items()))
