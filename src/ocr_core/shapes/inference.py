"""What ran over a run's rows, as each row and the card record it: the model, the sampling, the vLLM, the script."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any

from ..facts import ModelFacts
from ..planning.provenance import ScriptSource, ran_image, writer_record
from ..preparation.job import Job
from ..version import core_build, core_version
from .drive_result import Drive


def inference_info(job: Job, drive: Drive, origin: ScriptSource) -> dict[str, Any]:
    """What ran over these rows: the model as given, the sampling and the limits that could cut a page off (a rerun
    may raise them, so each row keeps those it was made under), the vLLM the server reported, the image only when
    the job ran in it, and the script's released URL only when its bytes are the release's (else the hash of what
    ran)."""
    window = drive.window
    sampling = dict(job.plan.rules.sampling)
    return {
        "model_id": job.plan.model,
        "model_name": drive.model_name or job.plan.model,
        "column_name": job.columns.output,
        "error_column": job.columns.error,
        "sampling": sampling,
        "limits": {"max_tokens": sampling.get("max_tokens"), "request_timeout": job.plan.rules.request_timeout},
        "image": ran_image(job.facts.image, drive.version),
        "vllm_version": drive.version,
        "mode": job.launch.mode,
        "window": {"final": window.limit, "peak_in_flight": window.peak_in_flight, "cap": window.cap},
        "serving": drive.serving,
        "script": job.launch.script,
        "script_url": origin.url,
        "script_sha256": origin.sha256,
        "prompt_sha256": prompt_sha256(job.facts),
        "core": {"version": core_version(), "build": core_build()},
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def prompt_sha256(facts: ModelFacts) -> str | None:
    """The sha256 of the prompt text an edited copy may change (None: the page image alone is the prompt)."""
    return hashlib.sha256(facts.prompt.encode()).hexdigest() if facts.prompt else None


def writer_of(job: Job, drive: Drive) -> str:
    """The record each row this run writes keeps of it: the fields of its inference_info entry that say what made
    the text, as they stand when the row is written."""
    origin = job.launch.origin or ScriptSource(job.launch.script, None, None)
    return writer_record(inference_info(job, drive, origin), job.run_id)
