"""The public entry of a shipped script: one function per shape, each taking the model's facts and the script.

    raise SystemExit(run_saturate(FACTS, __file__))

`script` is the running file (its name appears in the summary, the card and the job command; its bytes are looked
up in the release table of the core's wheel, so an edited copy is recorded as modified). `argv` defaults to the
command line; `hub` replaces the real Hub client (tests pass a folder-backed double), `jobs` the HF
Jobs client of a `--jobs N` launcher (tests pass a double that runs each job as a local process).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .facts import ModelFacts
from .fanout.jobs import JobsClient
from .hub import HubClient
from .run import run_recipe
from .run_offline import drive_offline_job
from .run_server import drive_server_job


def run_offline(
    facts: ModelFacts,
    script: str | Path,
    *,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
    jobs: JobsClient | None = None,
) -> int:
    """The offline shape: an in-process `vllm.LLM` fed batches of pages."""
    return run_recipe(facts, Path(script), "offline", drive_offline_job, argv, hub, jobs)


def run_server(
    facts: ModelFacts,
    script: str | Path,
    *,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
    jobs: JobsClient | None = None,
) -> int:
    """The server shape: `vllm serve` (started when none answers) with a fixed window of pages in flight."""
    return run_recipe(facts, Path(script), "server", drive_server_job, argv, hub, jobs)


def run_saturate(
    facts: ModelFacts,
    script: str | Path,
    *,
    argv: Sequence[str] | None = None,
    hub: HubClient | None = None,
    jobs: JobsClient | None = None,
) -> int:
    """The saturate shape: as the server shape, with a window that widens until the engines' queues fill."""
    return run_recipe(facts, Path(script), "saturate", drive_server_job, argv, hub, jobs)
