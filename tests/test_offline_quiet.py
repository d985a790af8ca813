"""An offline recipe's terminal holds the run's own lines, not the engine's notices (issue 50): on the CPU test bed,
`make demo SCRIPT=lighton-ocr3.py` showed vLLM's "Triton is installed, but doesn't include CPU backend" from each
engine process, a FutureWarning about `torch.distributed.reduce_op` from vLLM's code, and torch's C++ "Warning:
NUMA binding" line, none of which a user can act on. --verbose keeps all but the Triton notice."""

from __future__ import annotations

import re
import subprocess

from tests.test_offline_recipes import CPU_ENGINE
from tests.test_server_recipes import FAST, SAMPLES, recipe_command, summary_of
from tests.testbed.env import testbed_env as bed_env

NOTICE = re.compile(r"Triton is installed|FutureWarning|UserWarning|DeprecationWarning|\] Warning: ")


def test_an_offline_run_shows_no_engine_notices(tiny_model, tmp_path):
    result = subprocess.run(
        recipe_command(
            "lighton-ocr3.py", str(SAMPLES), str(tmp_path / "out"), "--model", str(tiny_model), *FAST,
            "--max-samples", "1", CPU_ENGINE,
        ),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, env=bed_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    assert summary_of(result.stdout)["exit_code"] == 0
    notices = [line for line in result.stdout.splitlines() if NOTICE.search(line)]
    assert notices == [], notices
