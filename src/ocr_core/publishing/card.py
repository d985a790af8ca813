"""The dataset card: where the text came from and how to make it again.

Several runs can share one repo as configs (one model per config), and the repo may have a card of its own, so a
publish merges rather than replaces: other configs and their metadata stay, the metadata `datasets` would check
this config's files against (`dataset_info` features of an earlier schema) goes, and the prose keeps everything
outside this config's own marked section.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import yaml

from ..planning.provenance import hub_id
from ..store.front_matter import split_front_matter
from .cost import JOB_FLAVOR_ENV


@dataclass(frozen=True)
class ShardLine:
    """One published shard's own figures, for a sharded run's card."""

    shard: int
    rows: int
    errors: int
    pages_per_s: float
    cost: str | None


@dataclass(frozen=True)
class CardFacts:
    source: str
    split: str
    config: str | None
    data_prefix: str
    model: str
    script: str
    image: str | None
    mode: str
    command: str | None
    output_column: str
    error_column: str
    rows: int
    errors: int
    truncated: int
    failed_text: str | None
    runs: tuple[tuple[str, str], ...]
    pages_per_s: float
    tokens_per_s: float
    window: int
    cost: str | None = None
    shards: int = 1
    shard_lines: tuple[ShardLine, ...] = ()
    kept_columns: tuple[str, ...] | None = None
    image_columns: tuple[str, ...] = ()
    serving: str | None = None
    vllm_version: str | None = None
    script_source: str | None = None
    modified_script: bool = False
    core: str | None = None
    measured: bool = True
    ran: str | None = None
    sustained_pages_per_s: float | None = None
    billed_pages_per_s: float | None = None


def split_files(data_prefix: str, split: str) -> str:
    """The `data_files` pattern of one config's split: the card's `configs` entry, and what a local load passes."""
    return f"{data_prefix}/{split}-*"


def merged_configs(existing: list[dict], facts: CardFacts) -> list[dict]:
    name = facts.config or "default"
    entry = next((config for config in existing if config.get("config_name") == name), None)
    if entry is None:
        entry = {"config_name": name, "data_files": []}
        existing = [*existing, entry]
    files = [item for item in entry.get("data_files", []) if item.get("split") != facts.split]
    entry["data_files"] = [*files, {"split": facts.split, "path": split_files(facts.data_prefix, facts.split)}]
    return existing


def without_stale_info(meta: dict, name: str) -> dict:
    """Drops the `dataset_info` of the config being replaced: its features may describe another schema."""
    info = meta.get("dataset_info")
    if isinstance(info, dict) and info.get("config_name", "default") == name:
        meta = {key: value for key, value in meta.items() if key != "dataset_info"}
    elif isinstance(info, list):
        kept = [entry for entry in info if not isinstance(entry, dict) or entry.get("config_name", "default") != name]
        meta = {key: value for key, value in meta.items() if key != "dataset_info"}
        if kept:
            meta["dataset_info"] = kept
    return meta


def section_markers(config: str) -> tuple[str, str]:
    return f"<!-- ocr-vllm:{config} -->", f"<!-- /ocr-vllm:{config} -->"


def merged_body(body: str, section: str, config: str) -> str:
    """The existing prose with this config's section replaced, or appended when it has none yet."""
    start, end = section_markers(config)
    marked = f"{start}\n{section.strip()}\n{end}\n"
    if start in body and end in body:
        before, _, rest = body.partition(start)
        return before + marked + rest.partition(end)[2].lstrip("\n")
    return f"{body.rstrip()}\n\n{marked}" if body.strip() else f"\n{marked}"


def job_line() -> str:
    if not os.environ.get("JOB_ID"):
        return ""
    flavor = next((os.environ[name] for name in JOB_FLAVOR_ENV if os.environ.get(name)), "unknown flavor")
    return f"Produced on [Hugging Face Jobs](https://huggingface.co/docs/huggingface_hub/guides/jobs) ({flavor}).\n\n"


def failed_note(facts: CardFacts) -> str:
    if facts.failed_text is None:
        return " (empty where the row failed)"
    return f" (`{facts.failed_text}` where the row failed, the marker ocr-bench leaves out of judging)"


def rates_rows(facts: CardFacts) -> str:
    """The rates a reader plans by (rates.py): what the job ran at once every replica served, and what each row cost
    in wall time; a card from before they were recorded, or of a run that only published, has neither row."""
    if facts.billed_pages_per_s is None or not facts.measured:
        return ""
    sustained = (
        f"{facts.sustained_pages_per_s:.2f} pages/s (every planned replica serving)"
        if facts.sustained_pages_per_s is not None
        else "none: the run ended before a steady state (more pages than the window give one)"
    )
    billed = f"{facts.billed_pages_per_s:.2f} pages/s (rows over the run's wall time, start-up included)"
    return f"| sustained | {sustained} |\n| billed | {billed} |\n"


def runs_list(facts: CardFacts) -> str:
    """Which inference_info entry describes which column."""
    lines = [f"{number}. `{column}`: {model}" for number, (column, model) in enumerate(facts.runs, 1)]
    lines.append(f"{len(facts.runs) + 1}. `{facts.output_column}`: {facts.model} (this run)")
    return "\n".join(lines)


def shards_section(facts: CardFacts) -> str:
    """For a sharded run: how many shards are in, and each one's figures."""
    if facts.shards == 1:
        return ""
    lines = "\n".join(
        f"| {line.shard} | {line.rows} | {line.errors} | {line.pages_per_s:.2f} | {line.cost or ''} |"
        for line in facts.shard_lines
    )
    waiting = (
        ""
        if len(facts.shard_lines) == facts.shards
        else " Until every shard is in, `load_dataset` returns the finished shards' rows (in input order)."
    )
    return f"""
**{len(facts.shard_lines)} of {facts.shards} shards are in.** Each `--shard I/{facts.shards}` job publishes its own \
contiguous range of rows as it finishes; together they are the input's rows in order.{waiting}

| shard | rows | rows with an error | pages/s | cost |
|---|---|---|---|---|
{lines}
"""


def rows_code(facts: CardFacts, config_arg: str) -> str:
    """How to open the rows and pick the failed or trusted ones. The filters read the error column alone, and the
    rows are gone through with their images undecoded: a page that could not be read keeps its bytes as they came,
    and decoding every image (a filter over whole rows, `for row in ds`) raised on exactly that row (issue 44)."""
    error = facts.error_column
    imports = "Image, load_dataset" if facts.image_columns else "load_dataset"
    undecoded = "".join(f'.cast_column("{name}", Image(decode=False))' for name in facts.image_columns)
    rows = (
        "# a page that could not be read keeps its bytes as they came, which may not decode: go through the rows "
        f"with the images undecoded ({{'bytes', 'path'}})\nrows = ds{undecoded}\n"
        if facts.image_columns
        else ""
    )
    return f"""```python
from datasets import {imports}

ds = load_dataset("<this repo>"{config_arg}, split="{facts.split}")
failed = ds.filter(lambda error: error is not None, input_columns="{error}")
trusted = ds.filter(lambda error: error is None, input_columns="{error}")
{rows}```"""


def columns_note(facts: CardFacts) -> str:
    """Which input columns the rows carry."""
    if facts.kept_columns is None:
        return "every input column"
    named = ", ".join(f"`{name}`" for name in facts.kept_columns)
    return f"only the input's {named} (`--columns`: the rest stays in {facts.source}, joined back as below)"


def join_note(facts: CardFacts, config_arg: str) -> str:
    """With --columns, how to put the text back beside the input's rows, by the first kept column."""
    if not facts.kept_columns:
        return ""
    key = facts.kept_columns[0]
    return f"""
Join the text back to the input by `{key}`:

```python
from datasets import load_dataset

ocr = load_dataset("<this repo>"{config_arg}, split="{facts.split}")
text = dict(zip(ocr["{key}"], ocr["{facts.output_column}"]))
pages = load_dataset("{facts.source}", split="{facts.split}")
pages = pages.map(lambda row: {{"{facts.output_column}": text.get(row["{key}"])}})
```
"""


def local_note(facts: CardFacts, config_arg: str) -> str:
    """How a local copy opens with its own rows: datasets keys a local folder's cache by its name and this card's
    patterns, not by its files, so a plain load can answer with another folder's rows or an earlier run's (issue
    35); naming the files makes the key their paths and modification times."""
    files = f'{{"{facts.split}": "{split_files(facts.data_prefix, facts.split)}"}}'
    return (
        f'In a local folder, open it with `load_dataset("<this folder>"{config_arg}, split="{facts.split}", '
        f"data_files={files})`: without `data_files`, datasets caches a local folder by its name and this card, "
        "not its files, and can answer with another folder's rows or an earlier run's."
    )


def served_by(facts: CardFacts) -> str:
    """The model as given (a Hub link only for a Hub id), the vLLM the server reported, the image only if it ran."""
    model = f"[{facts.model}](https://huggingface.co/{facts.model})" if hub_id(facts.model) else f"`{facts.model}`"
    version = f"vLLM {facts.vllm_version}" if facts.vllm_version else "a vLLM whose version this run did not learn"
    image = f" in `{facts.image}`" if facts.image else ""
    return f"{model}, served by {version}{image} ({facts.mode} mode)"


def reproduce_section(facts: CardFacts) -> str:
    """The job command that makes these rows again, or, when none can (a local input, output or model, or a script
    that is not the release: its URL runs other bytes), that, with the command as it ran."""
    if facts.command is None and facts.modified_script:
        ran = f" It ran as\n\n```bash\n{facts.ran}\n```\n\n" if facts.ran else " "
        return (
            f"This run cannot be rerun from the Hub: it ran {facts.script_source}, and the released script's URL "
            f"would write other text.{ran}Rerunning that copy with the same arguments resumes"
        )
    if facts.command is None:
        ran = f"; there it ran as\n\n```bash\n{facts.ran}\n```\n\n" if facts.ran else ". "
        return (
            "No job command reproduces this run elsewhere: it read, wrote or served files of the machine it ran on"
            f"{ran}On that machine, rerunning the same command resumes"
        )
    shards = (
        ""
        if facts.shards == 1
        else f"One job per shard: the command above with `--shard I/{facts.shards}` for I from 0 to "
        f"{facts.shards - 1}.\n\n"
    )
    return f"```bash\n{facts.command}\n```\n\n{shards}Rerunning the same command resumes"


def render_card(existing: str | None, facts: CardFacts) -> str:
    meta, prose = split_front_matter(existing)
    meta = without_stale_info(meta, facts.config or "default")
    meta["configs"] = merged_configs(meta.get("configs") or [], facts)
    tags = set(meta.get("tags") or []) | {"ocr", "document-processing", "vllm", "uv-script", "generated"}
    meta["tags"] = sorted(tags)
    config_arg = f', "{facts.config}"' if facts.config else ""
    cost_row = f"| cost | {facts.cost} |\n" if facts.cost else ""
    serving_row = f"| servers | {facts.serving} |\n" if facts.serving else ""
    throughput = (
        f"{facts.pages_per_s:.2f} pages/s over inference, {facts.tokens_per_s:.0f} output tokens/s"
        if facts.measured
        else "not measured: this run only published rows that earlier runs wrote"
    )
    body = f"""
## OCR of {facts.source}: config `{facts.config or "default"}`

{job_line()}Text extracted from the `{facts.split}` split of {facts.source} with \
{served_by(facts)}.

| | |
|---|---|
| rows | {facts.rows} |
| rows with an error | {facts.errors} |
| of them cut off at max_tokens (text kept) | {facts.truncated} |
{rates_rows(facts)}| throughput | {throughput} |
| pages in flight (final window) | {facts.window} |
{serving_row}{cost_row}{shards_section(facts)}
Columns: {columns_note(facts)}; `{facts.output_column}`, the model's text{failed_note(facts)};
`{facts.error_column}`, empty or why the row has no trustworthy text (unreadable image, rejected request, repetition
loop, cut off at max_tokens);
and `inference_info`, a JSON list with one entry per model run over these rows, oldest first (ocr-bench reads
the first entry's `column_name` and the last entry's `model_id`):

{runs_list(facts)}

{rows_code(facts, config_arg)}

{local_note(facts, config_arg)}
{join_note(facts, config_arg)}
## Reproduce

{reproduce_section(facts)}: rows already done are skipped; `--retry-errors` retries the failed ones. Made with
{facts.script_source or f"`{facts.script}`"}{f", on {facts.core}" if facts.core else ""}.
"""
    return f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n{merged_body(prose, body, facts.config or 'default')}"
