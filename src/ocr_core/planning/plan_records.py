"""The parsed command line read into the plan's records, once: what the engine is asked, the rules every page is
held to, the servers' policy, the input's rows and the output's layout, each from the model's facts and `Settings`.

This module and make_plan.py are the plan's maker: the only modules under the command line that read `Settings`.
Every stage after them receives these records, so a setting cannot be read two ways in two places.
"""

from __future__ import annotations

from typing import Any

from ..facts import ModelFacts
from ..inputs.addresses import UsageError
from ..inputs.columns import FAILED_TEXT, Columns, clash_message
from ..inputs.source import InputSelection
from ..settings import Settings
from .defaults import DEFAULT_SERVER
from .engine_plan import EngineRequest
from .page_rules import AnswerRules, PageRules
from .run_plan import OutputLayout, WindowPolicy
from .serve_flags import flag_value, user_flags
from .server_addresses import is_local, server_urls
from .server_policy import ServerPolicy

# The command line's flags that shape only a server this run starts: given for one it did not, each gets a note.
SPAWN_ONLY_FLAGS = ("extra_serve_args", "data_parallel_size", "api_server_count", "replicas", "engine_cache")


def engine_request(facts: ModelFacts, settings: Settings) -> EngineRequest:
    """What a parsed command line asks of this recipe's engine; `--extra-serve-args` is split into flags here, once."""
    return EngineRequest(
        model=settings.model,
        max_model_len=settings.max_model_len,
        model_flags=tuple(facts.serve_args),
        user_flags=user_flags(settings.extra_serve_args),
        serve_env=dict(facts.serve_env),
        params_b=facts.params_b,
        vllm_pin=facts.vllm_pin,
        replicas=settings.replicas,
        api_servers=settings.api_server_count,
        data_parallel=settings.data_parallel_size,
    )


def requested_sampling(facts: ModelFacts, settings: Settings) -> dict[str, Any]:
    """The card's sampling with the command line's temperature and max_tokens on top."""
    sampling = {**facts.sampling, "temperature": settings.temperature}
    if settings.max_tokens is not None:
        sampling["max_tokens"] = settings.max_tokens
    if settings.ignore_eos:
        sampling["ignore_eos"] = True
    return sampling


def answer_rules(settings: Settings) -> AnswerRules:
    return AnswerRules(settings.ignore_eos, dict(settings.model_options), settings.max_tokens, settings.max_model_len)


def rules_of(facts: ModelFacts, settings: Settings) -> PageRules:
    return PageRules(
        sampling=requested_sampling(facts, settings),
        answers=answer_rules(settings),
        max_error_rate=settings.max_error_rate,
        request_timeout=settings.request_timeout,
        retry_budget=settings.retry_budget,
        verbose=settings.verbose,
        canary_pages=None if settings.no_canary else settings.canary_pages,
    )


def policy_of(settings: Settings, facts: ModelFacts) -> ServerPolicy:
    """The servers' policy; --server's list is split here, once, and whether it names this machine decided."""
    names = flag_value(facts.serve_args, "--served-model-name")
    given = tuple(
        f"--{name.replace('_', '-')} {value}" for name in SPAWN_ONLY_FLAGS if (value := getattr(settings, name, None))
    )
    urls = tuple(server_urls(settings.server or DEFAULT_SERVER))
    return ServerPolicy(
        server=settings.server or DEFAULT_SERVER,
        named_server=(settings.server or DEFAULT_SERVER) != DEFAULT_SERVER,
        model=settings.model,
        max_model_len=settings.max_model_len,
        max_tokens=settings.max_tokens,
        startup_timeout=settings.startup_timeout or 0.0,
        max_restarts=settings.max_restarts or 0,
        recipe_names=tuple(names.split()) if names else (),
        spawn_only=given,
        hf_token=settings.hf_token,
        api_key=settings.api_key,
        urls=urls,
        local=all(is_local(url) for url in urls),
    )


def input_selection(settings: Settings) -> InputSelection:
    """Which rows of which input the run reads."""
    return InputSelection(
        settings.input,
        settings.split,
        settings.image_column,
        settings.input_config,
        settings.id_column,
        settings.max_samples,
        settings.shuffle,
        settings.seed,
        settings.shard,
        settings.input_revision,
    )


def result_columns(settings: Settings, facts: ModelFacts) -> Columns:
    """Where the results go; a clash among them is refused here, before the input is loaded or a page is sent."""
    failed_text = None if settings.null_failed_text else FAILED_TEXT
    columns = Columns(
        settings.output_column, settings.error_column, dict(facts.extra_columns), failed_text, settings.columns
    )
    problem = clash_message(columns)
    if problem:
        raise UsageError(problem)
    return columns


def output_layout(settings: Settings, facts: ModelFacts) -> OutputLayout:
    return OutputLayout(
        output=settings.output,
        split=settings.split,
        config=settings.config,
        columns=result_columns(settings, facts),
        private=settings.private,
        create_pr=settings.create_pr,
        overwrite=settings.overwrite,
        take_over=settings.take_over,
        take_over_jobs=tuple(settings.take_over_jobs),
        retry_errors=settings.retry_errors,
        upload_every=settings.upload_every,
    )


def window_policy(settings: Settings, mode: str) -> WindowPolicy:
    return WindowPolicy(mode, settings.batch_size, settings.max_inflight, settings.stall_timeout)
