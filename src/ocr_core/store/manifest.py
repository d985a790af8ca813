"""What a job's results depend on, written beside them, so that a rerun never mixes two jobs' text.

The manifest fingerprints everything that changes a row's text or which page a row id names: the input, its
config and resolved revision, the split, the image and id columns, the model, the prompt, the sampling and the
retry temperature, the image limits, the serve flags (the recipe's and --extra-serve-args), the PDF render size,
the model's own parse options and the script; and how the output is cut:
the number of shards (each shard publishes its own range of rows, so another N would cut other ranges) and, with
--columns, which input columns the output carries (every shard's files must share one schema). A rerun whose
fingerprint differs stops before any work and names what differs; `--overwrite` deletes the earlier results
(locally and on the Hub) instead.

Limits are recorded but never compared: max_tokens (unless --ignore-eos runs every page to it on purpose) and a
`--max-model-len` among the serve flags only decide whether a page is cut off, and a cut-off page is an error row.
So the fix the breaker and the canary offer, a larger --max-tokens with --retry-errors, resumes: rows already done
keep their text, the cut-off ones are redone under the new limits, and each row records the limits it was made
under (inference.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..facts import ModelFacts
from ..inputs.images import placeholder_part
from ..inputs.source import InputSelection
from ..planning.run_plan import RunPlan
from ..planning.serve_flags import parse_flags
from ..redaction import is_secret_flag
from .layout import MANIFEST

SPEED_ONLY_FLAGS = frozenset(
    {
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--tensor-parallel-size",
        "-tp",
        "--pipeline-parallel-size",
        "-pp",
        "--data-parallel-size",
        "-dp",
        "--api-server-count",
        "--host",
        "--port",
        "--uvicorn-log-level",
        "--disable-log-requests",
        "--enable-log-requests",
        "--disable-log-stats",
        "--disable-uvicorn-access-log",
        "--max-log-len",
        "--swap-space",
        "--cpu-offload-gb",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--mm-processor-cache-gb",
        "--block-size",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--async-scheduling",
        "--served-model-name",
        "--renderer-num-workers",
        "--mm-tensor-ipc",
        "--kv-cache-memory-bytes",
    }
)


LIMIT_FLAGS = frozenset({"--max-model-len"})
LEGACY_FIELDS = {"input", "split", "model", "output_column"}
LEGACY_MATCH = ("input", "split", "model")


class ManifestUnreadable(ValueError):
    """The manifest cannot be read (a crash while it was written): nothing says how the results were made."""


def fingerprint(
    plan: RunPlan,
    facts: ModelFacts,
    script: str,
    input_revision: str | None,
    input_rows: int,
    pdf_render: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`input_rows` (the split's length) tells a regenerated local input folder apart: row ids are positions, so
    another folder under the same path would map old results onto other pages. `pdf_render` is how PDF pages are
    rendered (it changes the pixels, so the text); absent for image input, so a manifest of an image run stays what
    it was. Every field is read from the plan, so two spellings of one command are one fingerprint."""
    selection = plan.selection
    manifest = {
        "script": script,
        "input": selection.name,
        "input_config": selection.config,
        "input_revision": input_revision,
        "input_rows": input_rows,
        "split": selection.split,
        "image_column": selection.image_column,
        "id_column": selection.id_column,
        "model": plan.model,
        "prompt": facts.build_content(placeholder_part()),
        "sampling": dict(plan.rules.sampling),
        "request_extras": dict(facts.request_extras),
        "image_limits": {"max_side": facts.max_side, "max_pixels": facts.max_pixels},
        "parse_options": dict(plan.rules.answers.model_options),
        "shards": selection.shard[1] if selection.shard else 1,
    }
    if facts.retry_temperature is not None:
        manifest["retry_temperature"] = facts.retry_temperature
    serve_args = text_serve_args(plan.request.engine_flags())
    if serve_args:
        manifest["serve_args"] = serve_args
    picked = shard_selection(selection)
    if picked is not None:
        manifest["selection"] = picked
    if pdf_render is not None:
        manifest["pdf_render"] = pdf_render
    if plan.output.columns.keep is not None:
        manifest["columns"] = list(plan.output.columns.keep)
    return manifest


def text_serve_args(words: Sequence[str]) -> list[str]:
    """The serve flags that can change a page's text (`--chat-template`, `--mm-processor-kwargs`,
    `--override-generation-config`, a dtype, ...), from the recipe's FACTS and from `--extra-serve-args` alike (an
    edited copy's pixel band changes the text as much as the same flag given on the command line): every flag but
    those known to change only speed, memory or where the server listens, so a faster rerun still resumes.
    Secret-looking flags are left out: the manifest is published beside the results."""
    kept: list[str] = []
    for flag in parse_flags(words):
        if flag.option not in SPEED_ONLY_FLAGS and not is_secret_flag(flag.words[0].partition("=")[0]):
            kept.extend(flag.words)
    return kept


def shard_selection(selection: InputSelection) -> dict[str, Any] | None:
    """Which rows a shard's range is cut from: --max-samples, --shuffle and --seed pick the selection that shard I
    of N takes its I-th range of, so shards that differ in them publish some rows twice and others never. Absent
    for an unsharded run (its rows are keyed by position, so another sample of them resumes correctly) and for the
    default selection (so a shard manifest written before this field existed stays what it was)."""
    if selection.shard is None or (selection.max_samples is None and not selection.shuffle):
        return None
    return {
        "max_samples": selection.max_samples,
        "shuffle": selection.shuffle,
        "seed": selection.seed if selection.shuffle else None,
    }


def differences(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Fields whose values differ, comparing them as they read back from JSON and without their limits. A manifest
    from before shards were counted holds results keyed by row id, which any number of shards resumes correctly, so
    it takes this one's."""
    previous, current = without_limits(previous), without_limits(json.loads(json.dumps(current)))
    if "shards" in current and "shards" not in previous:
        previous = {**previous, "shards": current["shards"]}
    return [key for key in sorted(set(previous) | set(current)) if previous.get(key) != current.get(key)]


def limit_changes(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Each limit that differs, as `name old -> new`."""
    before, after = limits_of(previous), limits_of(json.loads(json.dumps(current)))
    names = sorted(set(before) | set(after))
    return [f"{name} {before.get(name)} -> {after.get(name)}" for name in names if before.get(name) != after.get(name)]


def limits_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The limits a manifest records: max_tokens (a text-changing setting under ignore_eos, so no limit there) and
    the limit flags among its serve flags."""
    sampling = manifest.get("sampling")
    limits: dict[str, Any] = {}
    if isinstance(sampling, dict) and "max_tokens" in sampling and not sampling.get("ignore_eos"):
        limits["max_tokens"] = sampling["max_tokens"]
    for flag in parse_flags(manifest.get("serve_args") or []):
        if flag.option in LIMIT_FLAGS:
            limits[flag.option] = flag.value
    return limits


def without_limits(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest less its limits: what decides a page's text."""
    kept = dict(manifest)
    limits = limits_of(manifest)
    if "max_tokens" in limits:
        kept["sampling"] = {name: value for name, value in kept["sampling"].items() if name != "max_tokens"}
    if "serve_args" in kept:
        words = [
            word for flag in parse_flags(kept["serve_args"]) if flag.option not in LIMIT_FLAGS for word in flag.words
        ]
        kept.pop("serve_args")
        if words:
            kept["serve_args"] = words
    return kept


def settings_mismatch_message(where: str, previous: dict[str, Any], current: dict[str, Any], fields: list[str]) -> str:
    current = json.loads(json.dumps(current))
    changes = "\n".join(f"  {field}: {previous.get(field)!r} -> {current.get(field)!r}" for field in fields)
    return (
        f"{where} holds results made another way; continuing would mix two jobs' text under one dataset:\n"
        f"{changes}\n"
        "Write elsewhere (another --config NAME, or another OUTPUT), or pass --overwrite to delete those results "
        "(locally and on the Hub) and start over."
    )


def is_legacy_match(previous: dict[str, Any], current: dict[str, Any]) -> bool:
    """A manifest written before the fingerprint existed, for the same input, split and model: its results can be
    adopted (they were made by the recipe's own settings, which is all that version could run)."""
    return set(previous) == LEGACY_FIELDS and all(previous[key] == current.get(key) for key in LEGACY_MATCH)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ManifestUnreadable(f"{path} cannot be read ({exc})") from exc
    if not isinstance(manifest, dict):
        raise ManifestUnreadable(f"{path} holds no manifest")
    return manifest


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    """Written aside, fsynced and renamed, so a crash leaves the old manifest or the new one, never half of one."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MANIFEST
    temporary = folder / f".{MANIFEST}.tmp"
    with open(temporary, "w") as handle:
        handle.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return path
