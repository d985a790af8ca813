"""The N launches of a fan-out: one job per shard, the same script and flags, and labels that name the run.

The run's label is a fingerprint of what makes its output: the results' own fingerprint (manifest.py) for N shards
taken before the input is read (its rows and resolved revision are the jobs' to settle), plus the output and its
config. The same command again finds the same jobs by it, so it re-attaches instead of launching twice; a command
that would write other text is another run. Where the jobs run (flavor, image, timeout) is not part of it: a
relaunch on a larger flavor still belongs to its run.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..command.core_wheel import CoreWheel, shipping_env
from ..command.jobs_request import FanoutRequest
from ..command.script_header import JobsHeader
from ..command.sealed_arguments import SEALED_SECRET, hand_template
from ..errors import CommandError
from ..facts import ModelFacts
from ..planning.job_commands import DEFAULT_JOB_TIMEOUT, bucket_mounts, filled_words, image_command, script_url
from ..planning.make_plan import command_plan
from ..planning.provenance import ScriptSource
from ..settings import Settings
from ..store.layout import shard_label
from ..store.manifest import fingerprint
from .jobs import JobLaunch

RUN_LABEL = "ocr-vllm-run"
SHARD_LABEL = "ocr-vllm-shard"
FINGERPRINT_CHARS = 12
DEFAULT_SECRETS = ("HF_TOKEN",)
API_KEY_SECRET = "VLLM_API_KEY"  # where the recipe's --api-key reads its default


@dataclass(frozen=True)
class JobsPlan:
    """The run's label, what script the jobs get (the released URL, or this copy's own bytes), the core they
    install (the script's pin, or a wheel shipped with them), one launch per shard, in shard order, and the
    results' manifest as the launcher knows it (run_manifest)."""

    run: str
    shards: int
    script: str
    script_said: str
    core_said: str
    launches: tuple[JobLaunch, ...]
    manifest: dict


def run_manifest(settings: Settings, facts: ModelFacts, script: str, shards: int) -> dict:
    """The results' manifest for N shards as the launcher can know it, before the input is read (standing.py
    compares it with the output's, less what the jobs settle)."""
    plan = command_plan(replace(settings, shard=(0, shards)), facts, "offline")
    return fingerprint(plan, facts, script, settings.input_revision, 0)


def run_fingerprint(settings: Settings, facts: ModelFacts, script: str, shards: int) -> str:
    made = {**run_manifest(settings, facts, script, shards), "output": settings.output, "config": settings.config}
    digest = hashlib.sha256(json.dumps(made, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:FINGERPRINT_CHARS]


def shard_labels(run: str, shard: tuple[int, int]) -> dict[str, str]:
    return {RUN_LABEL: run, SHARD_LABEL: shard_label(shard)}


def labelled_shard(labels: Mapping[str, str], run: str, shards: int) -> int | None:
    """The shard a job of this run carries in its labels; None for a job of another run or another N."""
    if labels.get(RUN_LABEL) != run:
        return None
    index, _, total = labels.get(SHARD_LABEL, "").partition("-of-")
    if not (index.isdigit() and total.isdigit()) or int(total) != shards or int(index) >= shards:
        return None
    return int(index)


def plan_launches(
    run: str,
    request: FanoutRequest,
    settings: Settings,
    facts: ModelFacts,
    script_path: Path,
    origin: ScriptSource,
    header: JobsHeader,
    arguments: Sequence[str],
    given_secrets: Sequence[str] = (),
) -> JobsPlan:
    """`run` is the run's fingerprint (run_fingerprint); `arguments` are the recipe's command line less the
    launcher's flags, `--core-wheel` and the secret ones (a job gets the token as a secret, never on its command
    line); `given_secrets` name the other secrets of the command line that go with each job. A shipped core wheel
    goes last as two words, its absolute path alone, which is how `hf jobs uv run` tells a file to upload from a
    word."""
    script = origin.url or str(script_path)
    wheel = request.core_wheel
    in_image = command_in_image(request, facts)
    shipped = ("--core-wheel", str(wheel.path)) if wheel else ()
    env = shipping_env() if wheel else {}
    launches = []
    for index in range(request.jobs):
        script_args = (*arguments, *shipped, "--shard", f"{index}/{request.jobs}")
        launches.append(
            JobLaunch(
                script=script,
                script_args=script_args,
                image=request.image or header.image or facts.image,
                flavor=request.flavor or header.flavor or facts.flavor,
                timeout=request.timeout or header.timeout or DEFAULT_JOB_TIMEOUT,
                secrets=tuple(dict.fromkeys((*(header.secrets or DEFAULT_SECRETS), *given_secrets))),
                labels=shard_labels(run, (index, request.jobs)),
                name=f"ocr-{run}-{index}-of-{request.jobs}",
                env=env,
                volumes=tuple(bucket_mounts(arguments)),
                command=tuple(filled_words(in_image, script_args, {"url": script})),
            )
        )
    said = script_said(origin, script_path)
    manifest = run_manifest(settings, facts, script_path.name, request.jobs)
    return JobsPlan(run, request.jobs, script, said, core_said(wheel), tuple(launches), manifest)


def relaunch_of(launch: JobLaunch, ended: Sequence[str]) -> JobLaunch:
    """The shard's launch, told which of its earlier jobs ended (their ids): a job killed hard (out of memory, a
    lost machine) leaves its lease live for max(900 s, 3 x --upload-every), which would refuse the relaunch; it may
    take over those jobs' leases, and no other."""
    words = tuple(word for job_id in ended for word in ("--take-over-job", job_id))
    command = launch.command
    if command and words:
        # A recipe's own job command ends in the word that runs the script with `{args}` last (a second shell's).
        command = (*command[:-1], f"{command[-1]} {shlex.join(words)}")
    return replace(launch, script_args=(*launch.script_args, *words), command=command)


def command_in_image(request: FanoutRequest, facts: ModelFacts) -> tuple[str, ...]:
    """The recipe's own job command's template, for its image without uv; none for an image given with
    --job-image, which is taken to have uv."""
    return () if request.image else image_command(facts)


def check_image_command(
    request: FanoutRequest, facts: ModelFacts, script_path: Path, origin: ScriptSource, arguments: Sequence[str]
) -> None:
    """A recipe whose image has no uv runs its own job command, which fetches the script from its URL: only
    `hf jobs uv run` ships this machine's files with a job, so a copy's own bytes or a core wheel cannot reach it.
    Refused before any launch, with the released script's command, which installs the release's core."""
    wheel = request.core_wheel
    if not command_in_image(request, facts) or (origin.url is not None and wheel is None):
        return
    sending = "a core wheel" if wheel is not None else "this copy's own bytes"
    command = shlex.join(["uv", "run", script_url(script_path.name), *arguments, "--jobs", str(request.jobs)])
    raise CommandError(
        f"--jobs: {script_path.name}'s image has no uv, so each job installs it and runs the script from its URL, "
        f"and nothing of this machine travels with it; this run would send {sending}: launch the released script "
        f"on the release's core instead, `{command}`, or give --job-image an image with uv and vLLM"
    )


def core_said(wheel: CoreWheel | None) -> str:
    if wheel is None:
        return "the core its header pins"
    return f"the core wheel {wheel.path} ({wheel.version}, sha256 {wheel.sha256[:12]}), shipped with each job"


def script_said(origin: ScriptSource, script_path: Path) -> str:
    """Which script the jobs get, for the launcher's first line: a modified copy is sent as its own bytes."""
    if origin.url is not None:
        return f"the released script, {origin.url}"
    if origin.sha256 is None:
        return f"{script_path} as it is here (its bytes could not be read for a hash)"
    if origin.checked:
        return f"this modified copy's own bytes ({script_path}, sha256 {origin.sha256[:12]}), not the released script"
    return (
        f"this copy's own bytes ({script_path}, sha256 {origin.sha256[:12]}), not checked against the released "
        "script: the core here is not a release build"
    )


def launch_command(launch: JobLaunch) -> str:
    """The `hf jobs uv run` command (`hf jobs run` for an image without uv, whose command follows `--`: hf takes
    a `-lc` after the image for its own options) that starts the same job by hand, as --dry-run prints it."""
    words = ["hf", "jobs", "run"] if launch.command else ["hf", "jobs", "uv", "run"]
    words += ["--detach", "--flavor", launch.flavor, "--timeout", launch.timeout]
    words += [] if launch.command else ["--image", launch.image]
    words += [word for name in launch.secrets for word in ("-s", name)]
    words += [word for key, value in launch.env.items() for word in ("-e", f"{key}={value}")]
    words += [word for spec in launch.volumes for word in ("-v", spec)]
    words += [word for key, value in launch.labels.items() for word in ("--label", f"{key}={value}")]
    words += ["--name", launch.name]
    words += [launch.image, "--", *launch.command] if launch.command else [launch.script, *launch.script_args]
    return " ".join(shlex.quote(word) for word in words)


def hand_secrets(names: Sequence[str], sealed_words: str | None) -> str:
    """What a user sets to start a dry run's job by hand: `hf jobs` sends each secret a command names with -s from
    the caller's environment, and stops when one is not there. Said by name and where its value comes from, never
    the value; the sealed words as a template the user fills in."""
    lines = [
        "to start one of these jobs by hand, run its command where hf finds each secret it names with -s (hf sends "
        "their values as job secrets; none is printed here):"
    ]
    for name in names:
        if name == "HF_TOKEN":
            lines.append(
                "  HF_TOKEN: the jobs' Hub token; hf sends HF_TOKEN from your environment, else the one `hf auth "
                "login` saved (export HF_TOKEN=... for the one you gave --hf-token)"
            )
        elif name == API_KEY_SECRET:
            lines.append(f"  {name}: the key you gave --api-key, which the job's --api-key reads:")
            lines.append(f"    export {name}={shlex.quote('<the key you gave --api-key>')}")
        elif name == SEALED_SECRET and sealed_words:
            lines.append(
                f"  {name}: the words shown with *** in the commands (a password in --server's URL, a token in "
                "--extra-serve-args), which the job puts back in place; in the last word of each entry, put back "
                "what you typed for its ***:"
            )
            lines.append(f"    export {name}={shlex.quote(hand_template(sealed_words))}")
        else:
            lines.append(f"  {name}: as the launcher sends it, from your environment: export {name}=...")
    return "\n".join(lines)
