"""The suite reads no cache the machine already holds (issue 35): what a test loads is what the test wrote.

A datasets cache that an earlier run filled can answer `load_dataset` with another folder's rows, so every test, and
every process a test starts, gets a datasets cache and a Hugging Face home of its own (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import datasets
import huggingface_hub
import pytest

from tests.testbed.env import VENV_PYTHON
from tests.testbed.env import testbed_env as bed_env

SEEN_BY_A_CHILD = (
    "import json, datasets, huggingface_hub.constants as hub;"
    "print(json.dumps([datasets.config.HF_DATASETS_CACHE.as_posix(), hub.HF_HUB_CACHE, hub.HF_TOKEN_PATH]))"
)


def caches_in_this_process() -> list[str]:
    constants = huggingface_hub.constants
    return [Path(datasets.config.HF_DATASETS_CACHE).as_posix(), constants.HF_HUB_CACHE, constants.HF_TOKEN_PATH]


def test_a_test_and_the_processes_it_starts_share_caches_of_their_own(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    own = caches_in_this_process()
    assert all(Path(path).is_relative_to(base) for path in own), own
    assert Path(os.environ["HF_DATASETS_CACHE"]).as_posix() == own[0]
    child = subprocess.run([str(VENV_PYTHON), "-c", SEEN_BY_A_CHILD], capture_output=True, text=True, check=True,
                           env=bed_env())  # fmt: skip
    assert json.loads(child.stdout.strip().splitlines()[-1]) == own


@pytest.mark.parametrize("turn", ["first", "second"])
def test_no_two_tests_share_a_datasets_cache(turn):
    """Each turn leaves a mark in its cache; the other turn's cache is another folder and holds no mark."""
    own = Path(datasets.config.HF_DATASETS_CACHE)
    assert Path(datasets.config.DOWNLOADED_DATASETS_PATH).is_relative_to(own)
    assert not own.exists() or not any(own.iterdir())
    own.mkdir(parents=True, exist_ok=True)
    (own / f"left-by-the-{turn}-turn").touch()
