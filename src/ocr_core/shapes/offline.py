"""The offline driver: one in-process `vllm.LLM` fed batches of pages, for a GPU box or an HF Jobs image with vLLM.

Its vLLM installs its own signal handlers while it starts, so the stop signals are taken back once it is up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TextIO

from ..console import say
from ..errors import JobFailed
from ..planning.installed import VLLM_DISTRIBUTIONS
from ..preparation.job import Job
from ..serving.engine_cache import EngineCache, open_engine_cache
from ..store.progress import ResultLog
from .canary_watch import make_canary
from .drive_result import Drive, Feeding
from .inference import writer_of
from .llm_batches import OfflineRunner, close_llm, open_llm, stdout_to_stderr
from .signals import Interrupted, StopSignals, uninterrupted
from .tally import ProgressBar


def drive_offline_job(job: Job, stop: StopSignals, streams: list[TextIO]) -> Drive:
    """vLLM prints to stdout, so the summary line moves to stderr's twin the driver keeps clean."""
    streams.append(stdout_to_stderr())
    return run_offline_job(job, stop)


def run_offline_job(job: Job, stop: StopSignals) -> Drive:
    """Offline shape: an in-process engine fed batches of --batch-size pages."""
    batch = job.plan.window.batch_size
    drive = Drive(window=Feeding(batch, 0, batch, batch))
    say(f"batches of {batch} page(s) through LLM.chat")
    owned = len(job.source.owned())
    progress = ProgressBar(owned, owned - job.todo)
    opened: list[Any] = []
    cache = offline_engine_cache(job) if job.todo else None
    try:
        if job.todo:
            drive_offline(job, progress, stop, opened, cache.environment() if cache else {})
    except Interrupted:
        pass
    except JobFailed as exc:
        drive.fail(exc, job.launch.raised)
    finally:
        progress.close()
        for llm in opened:
            close_llm(llm)
        if cache is not None:
            uninterrupted(cache.publish)
            cache.close()
            drive.extra["engine_cache"] = cache.report()
    drive.tally = progress.tally
    drive.version = vllm_version()
    return drive


def offline_engine_cache(job: Job) -> EngineCache | None:
    """The --engine-cache of the in-process engine, under the plan's key (this interpreter's vLLM, the GPUs it sees
    and the engine's exact flags); None without the flag."""
    cache = job.plan.cache
    return None if cache.location is None else open_engine_cache(cache.location, cache.key)


def drive_offline(
    job: Job, progress: ProgressBar, stop: StopSignals, opened: list[Any], cache_env: Mapping[str, str]
) -> None:
    """Builds the engine (kept in `opened`, so it is stopped before the run's last words), with the engine
    cache's variables set before vLLM reads them, then takes the stop signals back (vLLM installs its own) and runs
    the batches."""
    os.environ.update(cache_env)
    llm = open_llm(job.plan.request, job.plan.verbose)
    opened.append(llm)
    stop.install()
    writer = writer_of(job, Drive(version=vllm_version()))
    batch = job.plan.window.batch_size or 1
    flush_rows = max(16, batch)
    log = ResultLog(job.destination.progress_dir, job.run_id, flush_rows=flush_rows, provenance=lambda: writer)
    runner = OfflineRunner(llm, job.facts, job.plan.rules, log, progress, make_canary(job, log, vllm_version()), stop)
    progress.start()
    runner.run(job.source.rows(job.skip), batch)


def vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in VLLM_DISTRIBUTIONS:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None
