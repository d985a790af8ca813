"""The shipped scripts for the tests: a model's facts by its registry name, and a script's own call run in-process.

In the pytest process the core is src/ (in-process tests of the core); under tests/testbed/hub_run.py, which runs
with the python of the script's uv environment, it is the installed wheel.
"""

from __future__ import annotations

from pathlib import Path

from ocr_core import ModelFacts, run_offline, run_saturate, run_server
from ocr_core.fanout.jobs import JobsClient
from ocr_core.store.hub import HubClient
from ocr_models import model_module, recipe
from tools.recipes import ROOT, load_script

ENTRIES = {"offline": run_offline, "server": run_server, "saturate": run_saturate}


def model_facts(model: str) -> ModelFacts:
    """A model's facts by its registry name (`lighton_ocr3`): its module's, which its scripts are rendered from."""
    return model_module(model).FACTS


def run_entry(script: str, argv: list[str], hub: HubClient | None = None, jobs: JobsClient | None = None) -> int:
    """A shipped script's call, `run_<shape>(FACTS, __file__)`, with `argv` and a Hub double (and, for a `--jobs N`
    launcher, a Jobs double). `script` is a script's name in this checkout, or the path of a copy elsewhere (a
    job's shipped one)."""
    module = load_script(script)
    entry = ENTRIES[recipe(Path(script).name).shape]
    return entry(module.FACTS, ROOT / script, argv=argv, hub=hub, jobs=jobs)
