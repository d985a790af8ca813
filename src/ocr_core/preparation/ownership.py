"""Whose output this is: the destination a run writes to, opened once, and the refusal of an output that holds
files this core did not write."""

from __future__ import annotations

import os
from pathlib import Path

from ..inputs.addresses import UsageError, output_problem, unreachable_problem
from ..planning.provenance import on_hf_jobs
from ..planning.run_plan import RunPlan
from ..store.front_matter import split_front_matter
from ..store.hub import HfHub, HubClient, with_retries
from ..store.layout import foreign_files, owned_configs
from ..store.output import Destination
from ..store.output_checks import foreign_message, is_local_output, unsafe_local_output


def hub_token(given: str | None) -> str | None:
    """The token the Hub is called with: the one given (--hf-token), else the environment's."""
    return given or os.environ.get("HF_TOKEN")


def open_destination(plan: RunPlan, hub: HubClient | None) -> Destination:
    """The output, refused before anything is written when it is a folder that must not be written over."""
    layout = plan.output
    if is_local_output(layout.output):
        reason = unsafe_local_output(layout.output, plan.selection.name)
        if reason:
            raise UsageError(reason)
        return Destination(layout.output, layout.split, layout.config, None, shard=plan.shard)
    if layout.output.count("/") != 1:
        raise UsageError(
            f"OUTPUT {layout.output!r} is neither a local folder (start it with ./ or /) nor a Hub id (namespace/name)"
        )
    client = hub or HfHub(hub_token(plan.hf_token))
    with_retries(
        lambda: client.create_repo(layout.output, layout.private),
        "creating the output repo",
        permanent=lambda exc: (
            output_problem(exc, layout.output) or unreachable_problem(exc, "OUTPUT", layout.output, on_hf_jobs())
        ),
    )
    work_dir = Path(os.environ[WORK_DIR_ENV]) if os.environ.get(WORK_DIR_ENV) else None
    return Destination(
        layout.output,
        layout.split,
        layout.config,
        client,
        layout.private,
        layout.create_pr,
        work_dir,
        plan.shard,
    )


def check_ownership(destination: Destination, listing: list[str], overwrite: bool) -> None:
    """Refuses an OUTPUT that holds files or configs no run of ours wrote, unless --overwrite."""
    if overwrite:
        return
    owned = owned_configs(listing)
    meta, _ = split_front_matter(destination.existing_card(listing)) if "README.md" in listing else ({}, "")
    configs = [entry.get("config_name") for entry in meta.get("configs") or [] if isinstance(entry, dict)]
    foreign_configs = sorted(str(name) for name in configs if name not in owned)
    files = foreign_files(listing, owned)
    if files or foreign_configs:
        raise UsageError(foreign_message(destination.describe(), files, foreign_configs))


WORK_DIR_ENV = "OCR_WORK_DIR"
