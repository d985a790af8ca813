"""The test bed's tiny random LLaVA (tools/dummy_models builds it), cached under the test bed's folder.

python -m tests.testbed.tiny_model     # prints the model's folder, building it first if needed
"""

from __future__ import annotations

from pathlib import Path

from tests.testbed.env import TESTBED_DIR
from tools.dummy_models import cached_model


def build_tiny_model(cache_dir: Path | None = None) -> Path:
    return cached_model("tiny_llava", cache_dir or TESTBED_DIR / "models")


if __name__ == "__main__":
    print(build_tiny_model())
