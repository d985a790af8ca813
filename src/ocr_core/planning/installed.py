"""The vLLM release that a spawned `vllm serve` will be, read before it starts.

The machine plan passes front-end flags only to releases that parse them (frontend.py). The recipe's pin says
which release it was tested on, but the `vllm` on PATH is whatever the image or the user's machine has: a recipe run
on an image of another tag would otherwise hand its server a flag it refuses, and the start would fail after the
model load was paid. The release is read from the package metadata of the interpreter that runs the `vllm`
command (its shebang), in a fraction of a second, without importing vLLM.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PROBE_TIMEOUT_S = 30.0
PROBE = "import importlib.metadata as m; print(m.version('vllm'))"


def installed_vllm_version() -> str | None:
    """The version of the `vllm` package behind the `vllm` command on PATH; None where there is none or it cannot
    be read (then the plan goes by the recipe's pin)."""
    command = shutil.which("vllm")
    if command is None:
        return None
    interpreter = shebang_interpreter(Path(command))
    if interpreter is None:
        return None
    try:
        probe = subprocess.run(
            [*interpreter, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    version = probe.stdout.strip()
    return version if probe.returncode == 0 and version else None


def shebang_interpreter(command: Path) -> list[str] | None:
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
