"""Where the test bed lives, the environment every vLLM process of the tests runs in, and how a test runs a shipped
script: `uv run --script` with its header unedited.

Tests spawn `vllm serve` and the recipe scripts as subprocesses; they must all see the same CPU settings and find
the test venv's `vllm` first on PATH, exactly as the in-process engine does. A script's header pins the core
(`ocr-vllm-core==X`, its wheel's URL in `[tool.uv.sources]`); the session fixture in tests/conftest.py builds that
wheel from src/ and points uv at it (UV_NO_SOURCES=1, UV_FIND_LINKS), so what a test runs is the installed wheel,
never src/ (tools/testbed/core_wheels.py says how an offline script's vLLM pin meets the CPU test bed).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTBED_DIR = Path(os.environ.get("OCR_TESTBED_DIR") or REPO_ROOT / ".testbed")
VENV_DIR = TESTBED_DIR / "venv"
VENV_BIN = VENV_DIR / "bin"
VENV_PYTHON = VENV_BIN / "python"
UV = VENV_BIN / "uv"
# uv's cache for the environments the test bed runs the scripts in (the suite's and the demo's), apart from the
# user's: uv keys a script's environment by the script's path, so in one cache a demo's environment, whose vLLM is
# the stand-in onto the CPU build (tools/testbed/core_wheels.py), was the one a later `make run` or `uv run SCRIPT`
# of the same file reused, and a real run passed the GPU check on the CPU engine (issue 44). It lies beside the
# cached venv the bed links to, so the clones of one machine share its downloads.
SCRIPTS_UV_CACHE = VENV_DIR.resolve().parent / "uv-scripts"

# A 1 GiB KV cache is plenty for a 1 MB model. No hub is reachable from the test machines, and no traffic
# may leave 127.0.0.1, so vLLM's usage statistics are off too.
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def uv_env(wheels: Path) -> dict[str, str]:
    """What makes `uv run SCRIPT` resolve the core from the wheels built here, on the test bed's interpreter (whose
    site-packages the vLLM stand-in adds, so the ABI must match), in the test bed's own uv cache."""
    return {
        "UV_NO_SOURCES": "1",
        "UV_FIND_LINKS": str(wheels),
        "UV_PYTHON": str(VENV_PYTHON),
        "UV_CACHE_DIR": str(SCRIPTS_UV_CACHE),
    }


# What the test session sets for its own script runs (tests/conftest.py); a user's shell has none of it.
SESSION_ONLY = (*uv_env(TESTBED_DIR), "UV_OFFLINE")


def user_env() -> dict[str, str]:
    """The test bed's environment as a user's shell has it: uv resolves and caches scripts as it would for them."""
    return {name: value for name, value in testbed_env().items() if name not in SESSION_ONLY}


def testbed_env() -> dict[str, str]:
    """Return os.environ plus the CPU vLLM variables, with the test venv's bin/ first on PATH."""
    env = {**os.environ, **CPU_ENV}
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
    return env


def script_command(script: str | Path, *args: str) -> list[str]:
    """A shipped script's command line as a user types it: `uv run --script SCRIPT ARGS`."""
    return [str(UV), "run", "--quiet", "--script", str(REPO_ROOT / script), *args]


def script_python(script: str | Path) -> Path:
    """The interpreter of the environment uv made for a script (the session fixture synced it)."""
    found = subprocess.run(
        [str(UV), "python", "find", "--script", str(REPO_ROOT / script)],
        capture_output=True, text=True, check=True, env=testbed_env(),
    )  # fmt: skip
    return Path(found.stdout.strip())


def ran_the_installed_wheel(script: str | Path, summary: dict) -> bool:
    """Whether a run's summary says its core came from the script's own uv environment (the wheel uv installed from
    the header's pin), not from this checkout's src/."""
    location = Path(summary["core"]["location"])
    environment = script_python(script).parent.parent
    return location.is_relative_to(environment) and not location.is_relative_to(REPO_ROOT / "src")
