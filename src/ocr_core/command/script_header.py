"""A script's PEP 723 header, read as TOML: what tools/release.py checks and what a fan-out launches jobs with.

The header's `[tool.hf-jobs]` table (image, flavor, timeout, secrets) is what `hf jobs uv run` reads from a script,
so a launcher that starts the same jobs reads it too, rather than a second copy of those values. Python 3.10 has
no TOML reader: there the header reads as empty, and the callers fall back to the model's facts (which
tools/release.py keeps equal to the header of every released script).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

HEADER = re.compile(r"^# /// script$(.*?)^# ///$", re.M | re.S)
EXACT_PIN = re.compile(r"([A-Za-z0-9_.-]+)\s*==\s*([^;\s]+)\s*(?:;.*)?")


def header_of(text: str) -> str:
    """The header's TOML, its comment marks taken off; empty when the script has none."""
    found = HEADER.search(text)
    return "\n".join(line.removeprefix("#").removeprefix(" ") for line in found[1].splitlines()) if found else ""


def read_header(text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:
        return {}
    return tomllib.loads(header_of(text))


def header_pins(text: str) -> dict[str, str]:
    """The versions the header's dependencies pin exactly (`name==version`, a platform marker after it or not)."""
    found = (EXACT_PIN.fullmatch(str(spec)) for spec in read_header(text).get("dependencies", ()))
    return {pin[1]: pin[2] for pin in found if pin}


@dataclass(frozen=True)
class JobsHeader:
    """The `[tool.hf-jobs]` table: how `hf jobs uv run` starts this script when no flag says otherwise."""

    image: str | None = None
    flavor: str | None = None
    timeout: str | None = None
    secrets: tuple[str, ...] = ()


def jobs_header(text: str) -> JobsHeader:
    table = read_header(text).get("tool", {}).get("hf-jobs", {})
    return JobsHeader(table.get("image"), table.get("flavor"), table.get("timeout"), tuple(table.get("secrets", ())))
