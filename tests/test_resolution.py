"""What a user's job installs: every script's PEP 723 header resolves, from an empty cache, as of the release's date.

`hf jobs uv run` and `uv run` resolve a script's header afresh on every job. The header's `[tool.uv] exclude-newer`
(the date in pyproject.toml, rendered by tools/release.py) makes that the same set on any day; these tests resolve
each header as a job would, from the package index into an empty cache, without installing anything (`uv sync
--script --dry-run`), so a pin that no longer resolves, or a release that no longer imports beside another, shows up
here before a user pays for a job that fails at its start. The core's wheel comes from this checkout (the header's
URL is published only by a release), and an offline script's real CUDA vLLM is resolved, never the test bed's
stand-in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ocr_core.command.script_header import header_pins, read_header
from tests.testbed.env import REPO_ROOT, UV, VENV_PYTHON
from tests.testbed.wheels import WHEELS_DIR
from tools import release

SCRIPTS = sorted(path.name for path in REPO_ROOT.glob("*.py") if read_header(path.read_text()))
CORE_WHEEL = re.compile(r"ocr_vllm_core-.*\.whl")
WOULD_INSTALL = re.compile(r"^ \+ ([A-Za-z0-9_.-]+)==(\S+)$", re.M)


def test_every_shipped_script_is_found():
    recipes = {entry.script for entry in release.RECIPES}
    assert recipes < set(SCRIPTS) and "compare-ocr.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_resolves_as_of_the_release_date(script):
    uv = read_header((REPO_ROOT / script).read_text()).get("tool", {}).get("uv", {})
    assert uv.get("exclude-newer") == release.resolution_date(), f"{script}: run python tools/release.py render"


@pytest.fixture(scope="module")
def core_only(tmp_path_factory, core_wheels) -> Path:
    """The core's wheel alone: the session's folder also holds the CPU stand-ins for vLLM, which must not satisfy an
    offline header's pin here."""
    folder = tmp_path_factory.mktemp("core-wheel")
    for wheel in WHEELS_DIR.iterdir():
        if CORE_WHEEL.fullmatch(wheel.name):
            shutil.copy(wheel, folder)
    assert any(folder.iterdir()), f"no core wheel in {WHEELS_DIR}"
    return folder


def dry_resolve(script: str, wheels: Path, cache: Path) -> subprocess.CompletedProcess:
    """`uv sync --script --dry-run` as a job resolves the header: the package index, an empty uv cache, the header's
    own settings; only the core comes from `wheels`."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("UV_")}
    env |= {
        "UV_NO_SOURCES": "1",
        "UV_PYTHON": str(VENV_PYTHON),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_CACHE_DIR": str(cache),
    }
    command = [str(UV), "sync", "--script", str(REPO_ROOT / script), "--dry-run", "--find-links", str(wheels)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_header_resolves_from_an_empty_cache(script, core_only, tmp_path):
    resolved = dry_resolve(script, core_only, tmp_path / "uv-cache")
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    would = dict(WOULD_INSTALL.findall(resolved.stderr + resolved.stdout))
    assert would, resolved.stderr[-3000:]
    for name, version in header_pins((REPO_ROOT / script).read_text()).items():
        assert would.get(name) == version, f"{script} pins {name}=={version}; the resolution gives {would.get(name)}"
    if script in {entry.script for entry in release.RECIPES}:
        assert "ocr-vllm-core" in would
