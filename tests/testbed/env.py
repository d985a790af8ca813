"""Where the test bed lives and the environment every vLLM process of the tests runs in.

Tests spawn `vllm serve` and the recipe scripts as subprocesses; they must all see the same CPU settings
and find the test venv's `vllm` first on PATH, exactly as the in-process engine does.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTBED_DIR = Path(os.environ.get("OCR_TESTBED_DIR") or REPO_ROOT / ".testbed")
VENV_DIR = TESTBED_DIR / "venv"
VENV_BIN = VENV_DIR / "bin"
VENV_PYTHON = VENV_BIN / "python"

# A 1 GiB KV cache is plenty for a 1 MB model. No hub is reachable from the test machines, and no traffic
# may leave 127.0.0.1, so vLLM's usage statistics are off too.
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def testbed_env() -> dict[str, str]:
    """Return os.environ plus the CPU vLLM variables, with the test venv's bin/ first on PATH."""
    env = {**os.environ, **CPU_ENV}
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
    return env
