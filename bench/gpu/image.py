"""What the device's image lacks, for the bench process itself: bench.py runs on the machine's own python, and the
wheels that wheels.py installs (vLLM, `datasets` and what they need) sit in `--site`, which only the recipes and
servers the bench starts have on their path. A module of those lists imported by the bench process works here, where
the test venv has it, and dies there after the lease has paid for the install and the pages (an H100 lease lost its
run so); the dry run and the fake run refuse it here instead.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

LISTS = ("req-vllm026-lean.txt", "req-extra.txt")  # the wheels carried because the image lacks them


def lacking() -> set[str]:
    """The import names of the carried wheels (a distribution's name, normalised as its package is named)."""
    names = set()
    for name in LISTS:
        for line in (Path(__file__).with_name(name)).read_text().splitlines():
            spec = line.split("#", 1)[0].strip()
            if spec:
                names.add(re.sub(r"[-.]+", "_", spec.split("==")[0]).lower())
    return names


def off_image(modules: Iterable[str]) -> list[str]:
    """The top-level packages among `modules` that only the carried wheels provide."""
    missing = lacking()
    return sorted({module.split(".")[0] for module in modules} & missing)


def check() -> None:
    """Refuses a bench process that imported what the device's image lacks, naming it and the fix."""
    found = off_image(sys.modules)
    if found:
        raise SystemExit(
            f"bench: this process imported {found}, which the device's image lacks (they come as wheels into "
            "--site, on the path of the recipes only): read it in a child process with the kit's environment, or "
            "without importing it"
        )
