"""The pinned tier's tiny Qwen3.5 (LightOnOCR-3 and OvisOCR2's architecture, shrunk; tools/dummy_models builds it),
cached under the pinned tier's folder."""

from __future__ import annotations

from pathlib import Path

from tests.testbed.pinned import PINNED_DIR
from tools.dummy_models import cached_model


def build_pinned_model(cache_dir: Path | None = None) -> Path:
    return cached_model("tiny_qwen3_5", cache_dir or PINNED_DIR / "models")


if __name__ == "__main__":
    print(build_pinned_model())
