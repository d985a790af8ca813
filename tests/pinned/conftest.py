"""The pinned tier's fixture: the tiny Qwen3.5 model folder that LightOnOCR-3-0.8B and OvisOCR2 are tested with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.testbed.pinned_model import build_pinned_model


@pytest.fixture(scope="session")
def pinned_model() -> Path:
    return build_pinned_model()
