"""The command a message or the card offers for redoing a run: an HF Jobs command only where a job could run it.

A job reads and writes the Hub alone, so a local INPUT, OUTPUT or model folder makes its command a dead end: the
offer is then this machine's own `uv run` line. A loopback `--server` names the machine that ran, never the job's,
and a job starts its own server anyway, so it is left out of a job command.

A run that came from a clone's `make run` or `make submit` (tools/run.sh sets CLONE_ENV) is offered the clone's make
targets instead: before a release, the scripts' URLs and the core wheel their headers pin do not exist, so neither
`hf jobs uv run URL` nor `uv run SCRIPT` works from a clone, and `make demo` runs any recipe on the CPU there.
A run of `make demo` (tools/testbed/demo.sh also sets DEMO_ENV, the words it puts after INPUT and OUTPUT) is
offered `make demo` with the user's own flags alone: the stand-in model folder and the demo's own server address
are the demo's to add again, and would mean nothing typed by hand.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence

from ..facts import ModelFacts
from ..planning.job_commands import job_command, ran_command, without_local_server, without_secrets
from ..planning.provenance import reproducible
from ..redaction import redact
from ..settings import Settings

CLONE_ENV = "OCR_VLLM_CLONE"
DEMO_ENV = "OCR_VLLM_DEMO"


def rerun_command(script: str, facts: ModelFacts, argv: Sequence[str], settings: Settings) -> str:
    """`argv` is the run's command line as given; `settings` what it says (INPUT, OUTPUT and the model)."""
    given = demo_given(argv)
    if given is not None:
        return make_command("demo", script, given, settings)
    on_jobs = reproducible(settings.input, settings.output, settings.model)
    if from_clone():
        return make_command("submit" if on_jobs else "run", script, argv, settings)
    if on_jobs:
        return job_command(script, facts, without_local_server(argv))
    return f"uv run {ran_command(script, argv)}"


def where_it_runs(script: str, facts: ModelFacts, argv: Sequence[str], settings: Settings) -> str:
    """Where a run that cannot start on this machine can: on HF Jobs when a job could redo it, else on a machine
    with a GPU (a job could read none of its local paths); from a clone, also the demo on this machine's CPU."""
    command = rerun_command(script, facts, argv, settings)
    place = "on HF Jobs" if reproducible(settings.input, settings.output, settings.model) else "on a machine with a GPU"
    return f"Run it {place}:\n  {command}{demo_offer(script, settings)}"


def from_clone() -> bool:
    """Whether this run came from a clone's `make run` or `make submit`."""
    return bool(os.environ.get(CLONE_ENV))


def demo_given(argv: Sequence[str]) -> list[str] | None:
    """Under `make demo`, the command line without the words the demo put after INPUT and OUTPUT (a JSON list in
    DEMO_ENV); None for any other run, or where those words are not where the demo puts them."""
    try:
        added = json.loads(os.environ.get(DEMO_ENV) or "null")
    except ValueError:
        return None
    if not isinstance(added, list) or list(argv[2 : 2 + len(added)]) != added:
        return None
    return [*argv[:2], *argv[2 + len(added) :]]


def make_command(target: str, script: str, argv: Sequence[str], settings: Settings) -> str:
    """The run's command line as the clone's Makefile takes it: `make TARGET SCRIPT=... INPUT=... OUTPUT=...
    ARGS='...'` (a job gets no loopback --server, as in a job command); secret flags are left out, as everywhere."""
    flags = list(argv)
    for place in (settings.input, settings.output):
        if place in flags:
            flags.remove(place)
    if target == "submit":
        flags = without_local_server(flags)
    words = [f"make {target}", f"SCRIPT={script}", f"INPUT={shlex.quote(settings.input)}"]
    words.append(f"OUTPUT={shlex.quote(settings.output)}")
    given = " ".join(shlex.quote(redact(flag)) for flag in without_secrets(flags))
    return " ".join([*words, f"ARGS={shlex.quote(given)}"] if given else words)


def demo_offer(script: str, settings: Settings) -> str:
    """From a clone, the one more place any run can go: the test bed's CPU engine on this machine, into an output
    of the demo's own (its text is noise, so it must never land in the real OUTPUT); elsewhere, and under the demo
    itself, nothing."""
    if not from_clone() or os.environ.get(DEMO_ENV):
        return ""
    return (
        "\nor try the recipe on this machine's CPU, with the test bed's tiny random model (the text is noise, every "
        f"step is real):\n  make demo SCRIPT={script} INPUT={shlex.quote(settings.input)}"
    )


def raised_tokens_command(script: str, facts: ModelFacts, argv: Sequence[str], settings: Settings) -> str:
    """The command that goes on after pages were cut off at max_tokens: twice --max-tokens (with --max-model-len
    raised as much where twice would not fit below it, so the prompt keeps its room), and --retry-errors to redo
    the cut-off rows. A limit is no setting of the text (manifest.py), so the results resume under it."""
    tokens = settings.max_tokens
    if tokens is None:
        return retry_command(script, facts, argv, settings)
    raised = with_option(argv, "--max-tokens", str(2 * tokens))
    if 2 * tokens >= settings.max_model_len:
        raised = with_option(raised, "--max-model-len", str(settings.max_model_len + tokens))
    return retry_command(script, facts, raised, settings)


def with_option(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """`argv` with `flag` given `value` once, at the end (every earlier `flag V` or `flag=V` taken out)."""
    kept: list[str] = []
    words = iter(argv)
    for word in words:
        if word == flag:
            next(words, None)
        elif not word.startswith(f"{flag}="):
            kept.append(word)
    return [*kept, flag, value]


def retry_command(script: str, facts: ModelFacts, argv: Sequence[str], settings: Settings) -> str:
    """The command that redoes the rows a run flagged: the same one, with --retry-errors."""
    retried = list(argv) if "--retry-errors" in argv else [*argv, "--retry-errors"]
    return rerun_command(script, facts, retried, settings)
