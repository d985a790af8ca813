"""The canary a shape watches its first answers with, and the command its message offers."""

from __future__ import annotations

from ..command.rerun import rerun_command
from ..judging.canary import Canary, CanaryContext
from ..preparation.job import Job
from ..store.progress import ResultLog


def make_canary(job: Job, log: ResultLog, version: str | None, server: str | None = None) -> Canary | None:
    """The canary over this run's first answers (all of them when fewer are to do; `server`: those of one server),
    or None with --no-canary.

    Its message shows the exact job command on the model's image, with --retry-errors to redo the rows it flags.
    """
    if job.settings.no_canary:
        return None
    given = job.launch.argv
    argv = given if "--retry-errors" in given else [*given, "--retry-errors"]
    served = f"vLLM {version}" if version else None
    command = rerun_command(job.launch.script, job.facts, argv, job.settings)
    context = CanaryContext(job.settings.model, job.facts.image, command, served, server)
    return Canary(log, context, min(job.settings.canary_pages, job.todo))
