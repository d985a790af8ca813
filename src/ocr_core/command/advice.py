"""What a refused run tells the user to do next, composed here at the top from the typed errors the stages raise.

The stages below say what is wrong (no `vllm` to start a server, no GPU for the in-process engine); only the
command line knows how the run was started (a clone's make target, a job command, this machine's `uv run`), so the
way forward is written here and nowhere below.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ..facts import ModelFacts
from ..planning.job_commands import script_url
from ..planning.provenance import reproducible
from ..redaction import redact
from ..serving.handle import VllmMissing
from ..settings import Settings
from ..shapes.llm_batches import NoGpu
from .rerun import demo_given, demo_offer, from_clone, make_command, rerun_command, where_it_runs


def explain(exc: Exception, script: str, facts: ModelFacts, argv: Sequence[str], settings: Settings) -> str:
    """The message a refused run ends with: the error's own words, and where the run can go when that is known."""
    if isinstance(exc, VllmMissing):
        return missing_vllm_message(exc.url, exc.named_server, script, facts, argv, settings)
    if isinstance(exc, NoGpu):
        where = where_it_runs(script, facts, argv, settings)
        return (
            f"{exc}, and this recipe runs the vLLM engine in-process. {where}\nor use the -server twin against an "
            "endpoint that is already running (--server URL)."
        )
    return str(exc)


def missing_vllm_message(
    url: str, named_server: bool, script: str, facts: ModelFacts, argv: Sequence[str], settings: Settings
) -> str:
    """A job command only where a job could redo the run (rerun.py); else the vLLM to install here. A --server the
    user gave names the server they meant: that nothing answers there comes first, then how to start one there."""
    command = rerun_command(script, facts, argv, settings)
    where = (
        "Run this script on the vLLM image, which brings `vllm` (the script then starts the server itself)"
        if reproducible(settings.input, settings.output, settings.model)
        else f"Install vLLM at the version of the recipe's image, {facts.image}, so that `vllm` is on PATH, then rerun"
    )
    if named_server:
        return redact(
            f"Nothing answers at --server {url}: check that your vLLM server runs at that address and port (its "
            "/health answers 200 once it is ready), then rerun the same command.\nFor this script to start a server "
            f"there instead, it needs the `vllm` command, which is not on PATH. {where}:\n  {command}"
        )
    reuse = (
        make_command("run", script, [*(demo_given(argv) or argv), "--server", "http://HOST:8000"], settings)
        if from_clone()
        else f"uv run {script_url(script)} {' '.join(shlex.quote(a) for a in argv[:2])} --server http://HOST:8000"
    )
    return redact(
        f"No vLLM server answers at {url}, and the `vllm` command is not on PATH to start one.\n"
        f"{where}:\n"
        f"  {command}\n"
        f"or point it at a server that is already running:\n"
        f"  {reuse}{demo_offer(script, settings)}"
    )
