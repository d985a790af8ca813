"""`--jobs N` on a recipe's command line: the launcher's whole life, from the parsed command to its summary line.

Every way out prints the summary line on stdout, as a recipe run does; a command the launcher cannot run (a local
output, a missing token) is exit 2 with the fix, and nothing is launched; so is a run writing the output when this
one must clear it first (exit 1, as a recipe run says it). A launcher that fails midway (the Jobs
API down) says so and exits 1, its jobs running on: the same command re-attaches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..command.core_wheel import check_ships
from ..command.jobs_request import FanoutRequest
from ..command.rendered_arguments import job_arguments, local_to_launcher
from ..command.script_header import jobs_header
from ..command.sealed_arguments import SEALED_SECRET, register_command_secrets, sealed
from ..console import say
from ..errors import CommandError
from ..facts import ModelFacts
from ..planning.job_commands import job_command
from ..planning.plan_records import policy_of
from ..planning.provenance import released_scripts, script_source
from ..preparation.ownership import hub_token
from ..settings import Settings
from ..store.hub import HfHub, HubClient
from ..store.lease import LeaseTaken
from ..store.output_checks import is_local_output
from .drive import fan_out
from .jobs import HfJobs, JobsClient
from .plan import API_KEY_SECRET, check_image_command, plan_launches, run_fingerprint
from .summary import FanoutSummary


def launch_command_line(
    facts: ModelFacts,
    script_path: Path,
    parser: argparse.ArgumentParser,
    settings: Settings,
    request: FanoutRequest,
    hub: HubClient | None,
    jobs: JobsClient | None,
    load_with: str,
) -> int:
    """`hub` and `jobs` replace the real Hub and Jobs clients (tests pass doubles). Each job's command line is
    rendered from `settings` by `parser`'s table (rendered_arguments.py), never filtered from the words typed."""
    register_command_secrets(settings)
    servers = None if settings.server is None else policy_of(settings, facts)
    launchers_server = local_to_launcher(servers, jobs is not None and jobs.runs_here)
    arguments, sealed_words = sealed(job_arguments(parser, settings, launchers_server))
    given = given_secrets(settings, sealed_words)
    origin = script_source(script_path, released_scripts())
    run = run_fingerprint(settings, facts, script_path.name, request.jobs)
    summary = FanoutSummary(script_path.name, settings.model, settings.output, run, request.jobs)
    summary.load_with = load_with
    summary.max_parallel_jobs = request.max_parallel
    try:
        check_one_pull_request(settings, request, facts, script_path.name, arguments)
        text = script_path.read_text()
        check_image_command(request, facts, script_path, origin, arguments)
        check_ships(request.core_wheel, origin.checked, script_path.name, text)
        header = jobs_header(text)
        plan = plan_launches(run, request, settings, facts, script_path, origin, header, arguments, tuple(given))
        if settings.engine_cache and not plan.launches[0].volumes:
            say(
                f"note: --engine-cache {settings.engine_cache} is a folder of this machine, which the jobs do not "
                "see, so each starts cold; pass a bucket they all mount, --engine-cache hf://buckets/NAME/PATH"
            )
        client = jobs or HfJobs(hub_token(settings.hf_token))
        output_hub = hub if hub is not None or is_local_output(settings.output) else HfHub(hub_token(settings.hf_token))
        summary.exit_code = fan_out(request, settings, plan, summary, client, output_hub, given)
    except (CommandError, LeaseTaken) as exc:
        say(f"error: {exc}")
        summary.exit_code = 2 if isinstance(exc, CommandError) else 1
        summary.print_to(sys.stdout)
        return summary.exit_code
    except Exception as exc:
        say(
            f"error: the launcher stopped ({type(exc).__name__}: {exc}); any job it started keeps running: run the "
            "same command to re-attach"
        )
        summary.exit_code = 1
        summary.print_to(sys.stdout)
        return 1
    if not request.dry_run:
        say(summary.sentence())
    summary.print_to(sys.stdout)
    return summary.exit_code


def check_one_pull_request(
    settings: Settings, request: FanoutRequest, facts: ModelFacts, script: str, arguments: Sequence[str]
) -> None:
    """Each job publishes its own shard, so with --create-pr each would open a pull request of its own, and the
    main branch the summary counts and points at would hold none of their rows: refused, with the one job that
    opens one pull request for the whole run."""
    if not settings.create_pr:
        return
    raise CommandError(
        f"--jobs {request.jobs} with --create-pr would open {request.jobs} pull requests, one per shard, and no "
        f"dataset on the main branch; run without --create-pr (with a token that may write to {settings.output}), "
        f"or as one job, which opens one pull request: {job_command(script, facts, arguments)}"
    )


def given_secrets(settings: Settings, sealed_words: str | None) -> dict[str, str]:
    """The secrets of this command line that its jobs need beside the token, by the name each job finds it under:
    the server's key where the recipe's --api-key looks when it is not given, and the sealed words."""
    given = {API_KEY_SECRET: settings.api_key} if settings.api_key else {}
    return given | ({SEALED_SECRET: sealed_words} if sealed_words else {})
