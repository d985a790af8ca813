"""The run's plan, made once in the entry: the parsed command and the model's facts, with what the run reads of the
world once (the machine, the installed vLLM, whether a server already answers at the one local address, the model's
serve hook where a server will start), into one frozen `RunPlan` (run_plan.py).

The world is read through `World`, a record of probes: the run passes the real ones, a test passes its own and
counts the calls. `--plan` makes the same value without asking a server or running the hook (`probe_servers`).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..facts import ModelFacts
from ..inputs.pdf import render_size
from ..settings import Settings
from . import installed, machine
from .cache_key import CacheKey, make_key
from .engine_plan import EnginePlan, EngineRequest, plan_engine
from .machine import Machine
from .plan_records import engine_request, input_selection, output_layout, policy_of, rules_of, window_policy
from .run_plan import CachePlan, RunPlan
from .server_policy import ServerPolicy


def engine_versions(mode: str) -> dict[str, str | None]:
    """The vLLM, torch and Triton the engine will be: this interpreter's offline, the `vllm` command's served."""
    if mode == "offline":
        return installed.versions_of(sys.executable)
    return installed.served_versions()


def detected_machine() -> Machine:
    return machine.detect_machine()


def vllm_on_path() -> bool:
    return shutil.which("vllm") is not None


@dataclass(frozen=True)
class World:
    """How the maker reads the world, each once per plan: the machine, the engine's versions for a shape, whether a
    server already answers at an address of the policy, and whether a `vllm` command is there to start one. The
    machine and the versions are looked up in their modules at call time, so a test may replace them there."""

    answering: Callable[[ServerPolicy], bool]
    machine: Callable[[], Machine] = detected_machine
    versions: Callable[[str], Mapping[str, str | None]] = engine_versions
    vllm_found: Callable[[], bool] = vllm_on_path


def make_run_plan(
    settings: Settings, facts: ModelFacts, mode: str, world: World, *, probe_servers: bool = True
) -> RunPlan:
    """The whole plan of this command on this machine (a CommandError where --replicas does not fit it, a
    UsageError where the result columns clash). Without `probe_servers` (`--plan`) no server is asked and the
    serve hook does not run: the plan then shows the replicas a run would start where none answers."""
    base = command_plan(settings, facts, mode)
    found = world.machine()
    versions = dict(world.versions(mode))
    servers = None if base.servers is None else served_policy(base.servers, world, probe_servers)
    engine = None if servers is None else served_engine(facts, base.request, servers, found, versions, probe_servers)
    key = planned_cache_key(base.request, engine, servers, found, versions)
    cache = CachePlan(base.cache.location, key)
    return replace(base, machine=found, versions=versions, servers=servers, engine=engine, cache=cache)


def command_plan(settings: Settings, facts: ModelFacts, mode: str) -> RunPlan:
    """The plan as the command alone decides it, with no world read: no machine, no vLLM, no engine plan and no
    cache key. The `--jobs` launcher, which starts no engine here, fingerprints the results from it, by the same
    fields a job's own plan holds."""
    return RunPlan(
        mode=mode,
        model=settings.model,
        request=engine_request(facts, settings),
        rules=rules_of(facts, settings),
        window=window_policy(settings, mode),
        selection=input_selection(settings),
        pdf_size=render_size(facts.pdf_render, settings.pdf_longest_edge),
        output=output_layout(settings, facts),
        machine=Machine((), 0),
        versions={},
        cache=CachePlan(settings.engine_cache, None),
        servers=None if mode == "offline" else policy_of(settings, facts),
        price_per_hour=settings.price_per_hour,
        verbose=settings.verbose,
        hf_token=settings.hf_token,
    )


def served_policy(policy: ServerPolicy, world: World, probe: bool) -> ServerPolicy:
    """The servers' policy with what the run found at its one local address: a `vllm` to start, a server there."""
    if not policy.may_start:
        return policy
    return replace(policy, vllm_found=world.vllm_found(), answering=probe and world.answering(policy))


def served_engine(
    facts: ModelFacts,
    request: EngineRequest,
    servers: ServerPolicy,
    found: Machine,
    versions: Mapping[str, str | None],
    probe: bool,
) -> EnginePlan:
    """The engine plan on this machine, under the vLLM a spawned server will be: the one installed where a GPU could
    use release-bound flags, else the recipe's pin. Where the run starts servers, the recipe's flags go through its
    `prepare_serve` hook first, once for every replica (it may fetch files), so the plan holds the exact command; a
    run without a `vllm` to start is refused before the hook, by the shape (its advice must not wait on a download)."""
    hooked = None
    if probe and servers.will_start and servers.vllm_found and facts.prepare_serve is not None:
        hooked = tuple(facts.prepare_serve(list(request.model_flags), request.model))
    return plan_engine(request, found, versions.get("vllm") if found.gpus else None, hooked)


def planned_cache_key(
    request: EngineRequest,
    engine: EnginePlan | None,
    servers: ServerPolicy | None,
    found: Machine,
    versions: Mapping[str, str | None],
) -> CacheKey | None:
    """The engine cache's key: the offline engine's exact flags, or the flags of the replicas this run may start
    (None for servers it is given: it starts no engine to cache)."""
    gpus = [gpu.name for gpu in found.gpus]
    if engine is None:
        return make_key(versions, gpus, request.model, request.offline_flags())
    if servers is None or not servers.may_start:
        return None
    return make_key(versions, gpus, request.model, engine.spelled)
