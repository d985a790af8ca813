"""`--plan`: what a run would start, as one JSON document, made by the functions the run itself plans with and
printed instead of done: no model is loaded, OUTPUT is not touched, the Hub is not called.

It renders the run's own plan (planning/make_plan.py: the machine and the installed vLLM read once, as a run reads
them; no server asked, no serve hook run): each replica's exact `vllm serve` argv and environment (engine_plan.py,
the same record the spawned command is built from) or the offline engine's flags and `LLM(...)` arguments, the
engine cache's key, the window, the input's pages where they are cheap to count (inputs/extent.py) and the projected
hours and dollars where the recipe has a measured rate (publishing/projection.py). Every secret is masked. The
machine and the installed vLLM are read through their modules at call time, so a test (or the bench's check) can
put another machine in their place.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ..console import say
from ..errors import CommandError
from ..facts import ModelFacts
from ..inputs.extent import input_pages
from ..planning.defaults import SATURATE_MAX_INFLIGHT, SERVER_WINDOW
from ..planning.engine_plan import EnginePlan
from ..planning.make_plan import World, make_run_plan
from ..planning.run_plan import CachePlan, RunPlan, WindowPolicy
from ..planning.scale import gpu_kind, max_num_seqs
from ..planning.server_policy import ServerPolicy
from ..publishing.projection import projected_run
from ..redaction import MASK, is_secret_flag, redact
from ..serving.engine_cache import CACHE_FOLDERS, FIXED_VARIABLES
from ..serving.server_api import url_port
from ..serving.spawn import serve_command
from ..settings import Settings
from ..shapes.llm_batches import engine_flags, engine_kwargs, quiet_engine_notices
from .sealed_arguments import register_command_secrets

NO_KEY = "no vLLM found to key by: an --engine-cache would be a note and a cold start"


def show_plan(settings: Settings, facts: ModelFacts, script_path: Path, mode: str) -> int:
    """`--plan`: the plan as JSON on stdout, exit 0; a plan the machine refuses (--replicas that do not fit) exits
    2 with the fix, as the run would."""
    register_command_secrets(settings)
    try:
        plan = plan_document(facts, script_path, mode, settings)
    except CommandError as exc:
        say(f"error: {exc}")
        return 2
    print(json.dumps(plan, indent=2))
    return 0


def plan_document(facts: ModelFacts, script_path: Path, mode: str, settings: Settings) -> dict[str, Any]:
    """The whole plan of this command on this machine (a CommandError where --replicas does not fit it): the run's
    own `RunPlan`, made as the run makes it but without asking a server or running the serve hook, rendered."""
    plan = make_run_plan(settings, facts, mode, World(answering=never_asked), probe_servers=False)
    found = plan.machine
    document: dict[str, Any] = {
        "script": script_path.name,
        "mode": mode,
        "model": plan.model,
        "machine": {
            "gpus": [{"device": gpu.device, "name": gpu.name, "memory_mib": gpu.memory_mib} for gpu in found.gpus],
            "cpus": found.cpus,
            "vllm": plan.versions.get("vllm"),
        },
    }
    document |= offline_plan(plan) if mode == "offline" else served_plan(facts, plan)
    pages = input_pages(plan.selection)
    kind = gpu_kind(found.gpus[0].name) if found.gpus else None
    document["input"] = pages
    document["projection"] = projected_run(
        script_path, kind, len(found.gpus), pages.get("this_run"), plan.price_per_hour
    )
    return masked(document)


def never_asked(policy: ServerPolicy) -> bool:
    """`--plan` asks no server whether it answers (make_run_plan does not call this without `probe_servers`)."""
    raise AssertionError("--plan asks no server")


def offline_plan(plan: RunPlan) -> dict[str, Any]:
    """The in-process engine: its flags as vLLM's parser gets them, the `LLM(...)` arguments they make, the key."""
    flags = plan.request.offline_flags()
    return {
        "starts": "one in-process vllm.LLM engine",
        "engine": {"flags": engine_flags(flags), **offline_kwargs(plan.model, flags)},
        "cache_key": planned_key(plan.cache),
        "window": {"kind": "batches", "batch_size": plan.window.batch_size},
    }


def offline_kwargs(model: str, flags: list[str]) -> dict[str, Any]:
    """`LLM(model=..., **kwargs)` as the run builds it, read by vLLM's own parser (importing vLLM, never a model);
    where vLLM is not installed, why the arguments are not shown. vLLM's import logs go to stderr, never into the
    JSON on stdout."""
    quiet_engine_notices()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            kwargs = engine_kwargs(flags)
    except ImportError:
        return {"llm_kwargs": None, "why": "vLLM is not installed here: the flags above are what it would parse"}
    return {"llm_kwargs": {"model": model, **{key: jsonable(value) for key, value in kwargs.items()}}}


def served_plan(facts: ModelFacts, plan: RunPlan) -> dict[str, Any]:
    """The replicas a served run would start (none for servers it is given), and its window."""
    servers, engine = plan.servers, plan.engine
    assert servers is not None and engine is not None, "a served plan holds its servers and engine plan"
    urls = list(servers.urls)
    if not servers.may_start:
        seqs = max_num_seqs(plan.request.engine_flags(), None)
        return {
            "starts": "nothing: --server names servers this run does not start; it feeds them as they are",
            "servers": urls,
            "window": window_rule(plan.window, len(urls), seqs),
        }
    document: dict[str, Any] = {
        "starts": f"{engine.scale.replicas} `vllm serve` replica(s), unless a server already answers at {urls[0]}: "
        "the run then uses it and starts none",
        "plan": engine.describe(),
        "engine_plan": engine.record(),
        "replicas": replicas(engine, plan.model, url_port(urls[0])),
        "started_together": engine.scale.concurrent_start,
        "cuda_mps": engine.shares_gpus,
        "cache_key": planned_key(plan.cache),
        "window": window_rule(plan.window, engine.scale.replicas * engine.scale.data_parallel, engine.max_num_seqs()),
    }
    if facts.prepare_serve is not None:
        document["serve_hook"] = (
            "the model's serve hook rewrites these flags when a server starts (it may fetch files); --plan does "
            "not run it"
        )
    return document


def replicas(plan: EnginePlan, model: str, first_port: int) -> list[dict[str, Any]]:
    """Each replica's command and environment as the run starts it: the first on the --server port, the others on
    the ports above it (the run takes the next free ones)."""
    return [
        {
            "gpu": launch.gpu,
            "argv": serve_command(model, launch.flags, first_port + index),
            "env": launch.environment(),
            "api_servers": launch.api_servers,
        }
        for index, launch in enumerate(plan.replicas())
    ]


def window_rule(policy: WindowPolicy, engines: int, seqs: int) -> dict[str, Any]:
    """The window's rule, as shapes/served.py sizes it once the engines serve: each engine's batch (max_num_seqs,
    fewer where its KV cache holds fewer full-length sequences), fixed for -server, adaptive for -saturate."""
    if policy.mode == "server" and policy.max_inflight:
        return {"kind": "fixed", "pages": policy.max_inflight, "why": "--max-inflight"}
    rule: dict[str, Any] = {
        "engines": engines,
        "max_num_seqs": seqs,
        "per_engine": "max_num_seqs, or the full-length sequences its KV cache holds when fewer (read once it "
        f"serves); {SERVER_WINDOW} where the server does not say",
    }
    if policy.mode == "server":
        return {"kind": "fixed", **rule, "bound": "half the host's free memory"}
    cap = policy.max_inflight or SATURATE_MAX_INFLIGHT * engines
    return {"kind": "adaptive", **rule, "cap": cap, "cap_rule": "lowered at start to what host memory holds"}


def planned_key(cache: CachePlan) -> dict[str, Any]:
    """The engine cache's key for this exact command, whether this run uses a cache, and the variables that point
    each engine at the cache's private copy when it does (its folder is chosen at start)."""
    key = cache.key
    used: dict[str, Any] = {"engine_cache": cache.location}
    if cache.location:
        used["env_added"] = sorted([*CACHE_FOLDERS, *FIXED_VARIABLES])
    if key is None:
        return {"name": None, "why": NO_KEY, **used}
    return {"name": key.name, "vllm": key.vllm, "torch": key.torch, "triton": key.triton, "gpu": key.gpu, **used}


def jsonable(value: Any) -> Any:
    """An engine argument as JSON holds it: numbers, text, lists and dicts as they are, anything else as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    return str(value)


def masked(value: Any, name: str = "") -> Any:
    """The plan with every registered secret masked, and the value of any secret-named variable or argument."""
    if isinstance(value, str):
        return MASK if name and is_secret_flag(name) and value else redact(value)
    if isinstance(value, list):
        return [masked(item) for item in value]
    if isinstance(value, dict):
        return {key: masked(item, key) for key, item in value.items()}
    return value
