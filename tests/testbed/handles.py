"""Server handles and engine plans as a run makes them from its command line, for tests of serving/ that start
one server (or a stand-in) without the whole run around it."""

from __future__ import annotations

from collections.abc import Mapping

from ocr_core.facts import ModelFacts
from ocr_core.planning.engine_plan import EnginePlan, plan_engine
from ocr_core.planning.machine import Machine
from ocr_core.planning.make_plan import command_plan
from ocr_core.planning.plan_records import engine_request, policy_of
from ocr_core.serving.handle import ServerHandle
from ocr_core.settings import Settings
from ocr_core.store.manifest import fingerprint

# A machine without a GPU: the plan gives one replica and no front-end flags.
NO_GPU = Machine((), 2)


def engine_plan_for(
    settings: Settings, facts: ModelFacts, machine: Machine = NO_GPU, vllm_version: str | None = None
) -> EnginePlan:
    return plan_engine(engine_request(facts, settings), machine, vllm_version)


def handle_for(
    url: str, settings: Settings, facts: ModelFacts, env: Mapping[str, str] | None = None, machine: Machine = NO_GPU
) -> ServerHandle:
    """The handle of the plan's first replica at `url`, which it may start."""
    launch = engine_plan_for(settings, facts, machine).replicas()[0]
    return ServerHandle(url, policy_of(settings, facts), launch, env=env)


def fingerprint_of(
    settings: Settings, facts: ModelFacts, script: str, revision: str | None, rows: int, pdf_render: dict | None = None
) -> dict:
    """The results' fingerprint of a parsed command, as a run of it writes it: read from the plan its command makes."""
    return fingerprint(command_plan(settings, facts, "server"), facts, script, revision, rows, pdf_render)
