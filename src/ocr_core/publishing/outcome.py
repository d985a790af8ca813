"""Where a job's rows stand after the driving, and the publish of its slice when each of them has an outcome."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..console import say
from ..judging.breaker import TRUNCATED
from ..planning.job_commands import job_command, job_timeout, ran_command, without_local_server
from ..planning.provenance import ScriptSource, earlier_writers, ran_image, reproducible, row_entry
from ..preparation.job import Job
from ..rates import billed_pages_per_s
from ..shapes.drive_result import Drive
from ..shapes.inference import inference_info
from ..shapes.tally import Tally
from ..store.hub import HubRefused
from ..store.layout import data_prefix, split_data_glob
from ..store.output_checks import is_local_output
from ..store.progress import read_results
from ..summary_line import RunFacts, process_seconds
from ..version import DISTRIBUTION, core_build, core_version
from .assembly import assemble, image_columns, inference_history, missing_rows
from .card import CardFacts
from .cost import cost_facts, describe_cost, price_known, run_price
from .slices import publish_slice, slice_facts, slice_results


def load_call(output: str, split: str, config: str | None) -> str:
    """The line of Python that opens what this run published.

    A local folder goes by its absolute path and names its files: datasets keys a local folder's cache by its
    basename and the card's `data_files` patterns, so without them another folder of that name, or this one before
    a resume, answers (issue 35); with `data_files` the key is the files' paths and modification times. A Hub repo's
    key is its commit, so the repo id alone is always current.
    """
    named = f", {config!r}" if config else ""
    if not is_local_output(output):
        return f"datasets.load_dataset({output!r}{named}, split={split!r})"
    where = str(Path(output).expanduser().resolve())
    files = {split: split_data_glob(data_prefix(config), split)}
    return f"datasets.load_dataset({where!r}{named}, split={split!r}, data_files={files!r})"


@dataclass(frozen=True)
class Outcome:
    """Where this job's rows stand (its shard's, or all selected rows), read from the results on disk."""

    rows: int
    errors: int
    truncated: int
    missing: int


def read_outcome(job: Job) -> Outcome:
    """Other shards' rows are theirs to publish: nothing here waits for them or reads their progress."""
    owned = job.source.owned()
    results = read_results(job.destination.progress_dir, ["error"])
    mine = set(owned)
    errors = [
        error
        for row_id, error in zip(results["row_id"].to_pylist(), results["error"].to_pylist())
        if error is not None and row_id in mine
    ]
    return Outcome(
        rows=len(owned),
        errors=len(errors),
        truncated=sum(error.startswith(TRUNCATED) for error in errors),
        missing=missing_rows(job.source, results, owned_only=True),
    )


def finish(job: Job, drive: Drive, stopped: int | None, origin: ScriptSource) -> tuple[int, RunFacts]:
    """Publishes this job's slice when each of its rows has an outcome; returns the exit code and the summary's
    facts of the run."""
    outcome = read_outcome(job)
    wall_s = time.monotonic() - job.started
    flavor, cost = run_cost(job, drive.tally, wall_s)
    known = price_known(job.plan.price_per_hour, job.facts.flavor)
    published, code = conclude(job, drive, stopped, outcome, describe_cost(cost, flavor) if known else None, origin)
    tally, window = drive.tally, drive.window
    return code, RunFacts(
        output=published or job.destination.describe(),
        rows=outcome.rows,
        done_this_run=tally.done,
        resumed=outcome.rows - job.todo,
        shard=list(job.plan.shard) if job.plan.shard else None,
        errors=outcome.errors,
        errors_this_run=tally.errors,
        truncated=outcome.truncated,
        loops_this_run=tally.loops,
        truncated_this_run=tally.truncated,
        missing=outcome.missing,
        pages_per_s=round(tally.pages_per_s(), 3),
        output_tokens_per_s=round(tally.tokens_per_s(), 1),
        inference_s=round(tally.seconds(), 2),
        **tally.sustained(),
        wall_s=round(wall_s, 2),
        flavor=flavor,
        window=window.limit,
        peak_in_flight=window.peak_in_flight,
        peak_window=window.peak_limit,
        interrupted=stopped is not None,
        failure=drive.failure,
        extra={**cost, **({"serving": drive.serving} if drive.serving else {}), **drive.extra},
    )


def conclude(
    job: Job, drive: Drive, stopped: int | None, outcome: Outcome, cost: str | None, origin: ScriptSource
) -> tuple[str | None, int]:
    """Publishes this job's finished rows, or says what is left; the published address (or None) and the exit code."""
    if stopped is not None:
        return None, 128 + stopped
    if drive.failure is not None:
        return None, 1
    if not outcome.missing:
        return publish_or_say(job, drive, outcome.errors, outcome.truncated, cost, origin)
    say(f"{outcome.missing} row(s) have no outcome yet; rerun the same command to finish them")
    return None, 1


def run_cost(job: Job, tally: Tally, wall_s: float) -> tuple[str, dict[str, Any]]:
    """The flavor and the cost fields of the summary; a sample run (--max-samples) also projects the whole input."""
    flavor, price = run_price(job.plan.price_per_hour, job.facts.flavor)
    input_rows = job.source.input_rows
    sample_of = input_rows if job.plan.selection.max_samples is not None and len(job.source.ids) < input_rows else None
    return flavor, cost_facts(price, wall_s, tally.seconds() if tally.done else 0.0, tally.done, sample_of)


def publish_or_say(
    job: Job, drive: Drive, errors: int, truncated: int, cost: str | None, origin: ScriptSource
) -> tuple[str | None, int]:
    replaced = job.destination.replaced_by_another_run(job.manifest)
    if replaced:
        drive.failure = replaced
        say(f"error: {replaced}")
        return None, 1
    try:
        published = publish(job, drive, errors, truncated, cost, origin)
    except HubRefused:
        raise
    except Exception as exc:
        say(
            f"error: publishing failed ({type(exc).__name__}: {exc}); every result is kept in "
            f"{job.destination.progress_dir}; rerun the same command to publish"
        )
        return None, 1
    shard = f" (shard {job.plan.shard[0]}/{job.plan.shard[1]})" if job.plan.shard else ""
    say(f"published {len(job.source.owned())} row(s){shard} ({errors} with an error) to {published}")
    return published, 0


def publish(job: Job, drive: Drive, errors: int, truncated: int, cost: str | None, origin: ScriptSource) -> str:
    """Writes this job's slice from its own rows' results only and publishes it with its facts (slices.py); each
    row's inference_info and, for a run that wrote no row (it only publishes), the card name what wrote the text; the
    card's reproduce command only when one exists (a Hub input, output and model, and the released script: its URL
    would run other bytes than an edited copy's)."""
    tally, owned, plan = drive.tally, job.source.owned(), job.plan
    results = slice_results(job.destination.progress_dir, owned)
    served = earlier_writers(results["provenance"].to_pylist()) if not tally.done else None
    timeout = job_timeout(len(owned), tally.pages_per_s() or None)
    command = job_command(job.launch.script, job.facts, without_local_server(job.launch.argv), timeout)
    on_the_hub = reproducible(plan.selection.name, plan.output.output, plan.model)
    reproduce = on_the_hub and origin.url is not None
    template = CardFacts(
        source=plan.selection.name,
        split=plan.output.split,
        config=plan.output.config,
        data_prefix=job.destination.data_prefix,
        model=plan.model,
        script=job.launch.script,
        image=served.image if served else ran_image(job.facts.image, drive.version),
        mode=job.launch.mode,
        command=command if reproduce else None,
        ran=None if reproduce else ran_command(job.launch.script, job.launch.argv),
        output_column=job.columns.output,
        error_column=job.columns.error,
        rows=len(owned),
        errors=errors,
        truncated=truncated,
        failed_text=job.columns.failed_text,
        runs=tuple(
            (entry.get("column_name", "?"), entry.get("model_id", "?")) for entry in inference_history(job.source)
        ),
        pages_per_s=tally.pages_per_s(),
        sustained_pages_per_s=tally.sustained()["sustained_pages_per_s"],
        billed_pages_per_s=billed_pages_per_s(tally.done, process_seconds()),
        tokens_per_s=tally.tokens_per_s(),
        window=drive.window.limit,
        cost=cost,
        kept_columns=job.columns.keep,
        image_columns=image_columns(job.source, job.columns),
        serving=served.serving if served else drive.serving,
        vllm_version=served.vllm_version if served else drive.version,
        script_source=origin.describe(),
        core=f"{DISTRIBUTION} {core_version() or '(version unknown)'} ({core_build()})",
        modified_script=on_the_hub and origin.url is None,
        measured=served is None,
    )
    current = inference_info(job, drive, origin)
    shard = job.source.shard or (0, 1)
    with tempfile.TemporaryDirectory() as folder:
        files = assemble(
            job.source,
            results,
            job.columns,
            lambda record: row_entry(current, job.run_id, record),
            Path(folder),
            job.destination.data_prefix,
        )
        del results  # the slice's text is in the files now; the upload needs none of it in memory
        part = f", shard {shard[0]}/{shard[1]}" if job.source.shard else ""
        title = f"OCR with {plan.model}: {len(owned)} rows{part} [{plan.output.config or 'default'}]"
        return publish_slice(job.destination, files, slice_facts(shard, template, list(files)), template, title)
