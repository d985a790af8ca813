"""What the launcher makes sure of before its first launch: that jobs can reach INPUT and OUTPUT, that the Hub takes
both as ids and answers at all, and that every secret the jobs need is at hand. Each failure is a command error
(exit 2) with its fix, said before any job is started or billed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import CommandError
from ..inputs.addresses import hub_unreachable, input_problem, output_problem
from ..planning.provenance import hub_id
from ..redaction import register_secret
from ..settings import Settings
from ..store.hub import HubClient, with_retries
from ..store.output_checks import is_local_output
from .jobs import JobsClient
from .plan import JobsPlan


def check_reachable(settings: Settings, client: JobsClient) -> None:
    """HF Jobs cannot read a path on this machine nor write to one: both ends must be Hub datasets."""
    if client.runs_here:
        return
    if is_local_output(settings.output):
        raise CommandError(
            f"--jobs: OUTPUT {settings.output!r} is a folder on this machine, which the jobs cannot write to; give a "
            "Hub dataset id (namespace/name)"
        )
    if not hub_id(settings.input):
        raise CommandError(
            f"--jobs: INPUT {settings.input!r} is not a Hub dataset id, so the jobs cannot read it; push it to the "
            "Hub first (datasets' push_to_hub) and pass its id"
        )


def check_hub_ids(settings: Settings) -> None:
    """An INPUT or OUTPUT the Hub would refuse as an id (`'your name/scans ocr!'`) is refused as a plain run refuses
    it: huggingface_hub's own check, said in the run's own words (exit 2), before any job, dry runs included."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    named = ((settings.input, input_problem), (settings.output, output_problem))
    for name, problem in named:
        if is_local_output(name) or not hub_id(name):
            continue
        try:
            validate_repo_id(name)
        except HFValidationError as exc:
            raise CommandError(problem(exc, name) or str(exc)) from exc


def check_hub_answers(settings: Settings, hub: HubClient | None) -> None:
    """The launcher's first call to the Hub: INPUT's revision, one request that huggingface_hub does not retry.
    A connection that cannot be made at all (offline, a proxy, a wrong HF_ENDPOINT) is exit 2 at once with the
    reason, as a recipe's own run says it; the output's listing, which used to come first, was retried inside
    huggingface_hub and by the launcher for six minutes, then ended as a launcher that stopped (issue 44). An INPUT
    the jobs could not read is refused here too, before N jobs each pay their start-up to find it out."""
    name = settings.input
    if hub is None or not hub_id(name):
        return
    with_retries(
        lambda: hub.input_revision(name),
        "reading INPUT's revision",
        permanent=lambda exc: input_problem(exc, name) or launcher_unreachable(exc),
    )


def launcher_unreachable(exc: BaseException) -> str | None:
    unreachable = hub_unreachable(exc)
    if unreachable is None:
        return None
    return (
        f"--jobs: the launcher starts and watches the jobs through the Hub, but {unreachable}; then run the same "
        "command"
    )


def job_secrets(
    plan: JobsPlan, settings: Settings, given: Mapping[str, str], environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The values of the secrets the jobs get: those the command line gave, the token as the recipe finds it
    (--hf-token, HF_TOKEN, your login), any other from this environment. Registered, so no message shows one."""
    from huggingface_hub import get_token

    values: dict[str, str] = {}
    for name in plan.launches[0].secrets:
        value = given.get(name) or (
            (settings.hf_token or environ.get(name) or get_token()) if name == "HF_TOKEN" else environ.get(name)
        )
        if not value:
            raise CommandError(
                f"--jobs: the jobs need the secret {name}, which is not set here; set it in the environment (for "
                "HF_TOKEN, or log in with `hf auth login`) and run the same command again"
            )
        register_secret(value)
        values[name] = value
    return values
