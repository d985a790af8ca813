"""The canary a shape watches its first answers with, and the command its message offers."""

from __future__ import annotations

from ..judging.canary import Canary, CanaryContext
from ..preparation.job import Job
from ..store.progress import ResultLog


def make_canary(job: Job, log: ResultLog, version: str | None, server: str | None = None) -> Canary | None:
    """The canary over this run's first answers (all of them when fewer are to do; `server`: those of one server),
    or None with --no-canary.

    Its message shows the command that redoes the rows it flags (the launch's `rerun`, written by the command line).
    """
    pages = job.plan.rules.canary_pages
    if pages is None:
        return None
    served = f"vLLM {version}" if version else None
    context = CanaryContext(job.plan.model, job.facts.image, job.launch.rerun, served, server)
    return Canary(log, context, min(pages, job.todo))
