"""Shared fixtures: a real CPU vLLM server and an offline engine over the tiny test model.

The server is started once per session (about a minute on two cores). Failed tests that used it get
the server log's tail in their report, since the cause of a failure is usually only visible there. Every test gets
a Hugging Face home and datasets cache of its own (issue 35); uv's cache stays the test bed's, shared by the tests and
the demo, on purpose: it holds the synced script environments that make `uv run` fast, and never the user's, whose
environments must not get the bed's stand-in vLLM (issue 44, tests/testbed/env.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import huggingface_hub
import pytest

from ocr_models import RECIPES
from tests.testbed.env import CPU_ENV, uv_env
from tests.testbed.server import LIMIT_MM_PER_PROMPT, MAX_MODEL_LEN, VllmServer, log_tail, running_server
from tests.testbed.tiny_model import build_tiny_model
from tests.testbed.wheels import WHEELS_DIR, ready_wheels, synced


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The heavy tests first, in their usual order, then the rest, so that the few that run for minutes start at the
    beginning rather than one of them starting last and keeping the suite waiting on one worker while the other
    sits idle. The Makefile's `--maxschedchunk 1` makes pytest-xdist hand tests out one at a time as workers free
    up: by default it gives each worker a run of consecutive tests at the start, which put every heavy test on one
    worker (a busy run of 2026-12-02 ended with one worker on three engine tests for 8 minutes, the other idle)."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)


@pytest.fixture(scope="session", autouse=True)
def core_wheels() -> Iterator[Path]:
    """The core's wheel built from src/ (and the vLLM stand-ins), with every shipped script's uv environment synced
    to it, so each `uv run SCRIPT` of the session runs this wheel; the uv variables stay set for the session.

    Built and synced only when the sources changed since the last session (tests/testbed/wheels.py), once for all
    test processes. `--reinstall-package` replaces a wheel of the same version (the core, a vLLM stand-in) that an
    earlier build left in uv's cached environment; after the sync, runs resolve from uv's cache alone (UV_OFFLINE),
    as fast as a cached user run.
    """
    saved = dict(os.environ)
    os.environ.update(uv_env(WHEELS_DIR))
    ready_wheels()
    for recipe in RECIPES:
        synced(recipe.script)
    os.environ["UV_OFFLINE"] = "1"
    yield WHEELS_DIR
    os.environ.clear()
    os.environ.update(saved)


# The variables a user may have set that would send a child's Hub files elsewhere than HF_HOME.
HUB_PATH_VARIABLES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ASSETS_CACHE", "HF_TOKEN_PATH", "HF_XET_CACHE")
HUB_PATHS = {  # huggingface_hub's constants, read from the environment at import: relative to HF_HOME
    "HF_HOME": "",
    "HF_HUB_CACHE": "hub",
    "HUGGINGFACE_HUB_CACHE": "hub",
    "HF_ASSETS_CACHE": "assets",
    "HF_XET_CACHE": "xet",
    "HF_TOKEN_PATH": "token",
    "HF_STORED_TOKENS_PATH": "stored_tokens",
}
DATASETS_PATHS = {  # datasets' config, also fixed at import: relative to HF_DATASETS_CACHE
    "HF_DATASETS_CACHE": "",
    "DOWNLOADED_DATASETS_PATH": "downloads",
    "EXTRACTED_DATASETS_PATH": "downloads/extracted",
}


@pytest.fixture(autouse=True)
def own_hugging_face_caches(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face home and datasets cache that only this test sees, in this process and the ones it starts.

    A datasets cache keys a local folder by its name and its card, not its files: one that an earlier run filled
    answers `load_dataset` with that run's rows (issue 35). The token lives under HF_HOME too, so no test can
    find a real one there. Outside tmp_path, so tests that list their tmp_path see only what they made.
    """
    home = tmp_path_factory.mktemp("hf-home")
    cache = home / "datasets"
    for name in HUB_PATH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    for name, relative in HUB_PATHS.items():
        monkeypatch.setattr(huggingface_hub.constants, name, str(home / relative))
    for name, relative in DATASETS_PATHS.items():
        monkeypatch.setattr(datasets.config, name, cache / relative)
    monkeypatch.setattr(datasets.config, "HF_MODULES_CACHE", home / "modules")
    return cache


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """Folder of the tiny random LLaVA (built once, then cached under the test bed)."""
    return build_tiny_model()


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """A real `vllm serve` of the tiny model on a free loopback port, shared by the whole session."""
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    with running_server(tiny_model, log_path) as server:
        yield server


@pytest.fixture(scope="session")
def offline_llm(tiny_model: Path) -> Iterator[Any]:
    """An in-process `vllm.LLM` over the tiny model, built only when a test asks for it.

    Same engine settings as the server (eager included: compiled and eager runs pick different
    tokens from the random model), so both paths give identical greedy output.
    """
    os.environ.update(CPU_ENV)
    from vllm import LLM

    llm = LLM(
        model=str(tiny_model),
        max_model_len=MAX_MODEL_LEN,
        limit_mm_per_prompt=LIMIT_MM_PER_PROMPT,
        enable_prefix_caching=False,
        enforce_eager=True,
    )
    yield llm
    llm.llm_engine.engine_core.shutdown()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the server log's tail to the report of a failed test that used the server."""
    outcome = yield
    report = outcome.get_result()
    server = getattr(item, "funcargs", {}).get("vllm_server")
    if report.failed and isinstance(server, VllmServer):
        report.sections.append(("vllm server log (tail)", log_tail(server.log_path)))
