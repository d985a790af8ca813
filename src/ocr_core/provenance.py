"""What really ran, for the card and `inference_info`: the script (the released one or a modified copy), the image
(only when the job ran in it), the model as given, and whether any command reproduces the run elsewhere.

A card that names the recipe's image, URL and job command whatever happened tells a reader of a local CPU run, or of
a run of an edited script, something untrue. A released script carries the hash of its own text (the hash itself
blanked), stamped by tools/release.py; a copy whose bytes no longer match is recorded as modified, with the
hash of what ran, never with the released URL.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cli import script_url
from .inputs import LOCAL_PREFIXES

RELEASE_HASH_NAME = "RELEASED_SHA256"
RELEASE_HASH_LINE = re.compile(rf'^{RELEASE_HASH_NAME} = "[0-9a-f]*"(?=\r?$)'.encode(), re.M)
VERSION_TAG = re.compile(r"v?(\d+\.\d+\.\d+)")
# What a row keeps of the run that wrote it: the fields of its inference_info entry that say what made the text.
WRITER_FIELDS = ("model_name", "image", "vllm_version", "mode", "serving", "script", "script_url", "script_sha256")


def release_digest(data: bytes) -> str:
    """The sha256 of a script's bytes with its recorded hash blanked: what the build records, and a run checks.

    Bytes, never decoded text: text read with newline translation hashes a CRLF checkout as its LF twin, which the
    release would then accept while every run of those bytes found them modified."""
    blanked = RELEASE_HASH_LINE.sub(f'{RELEASE_HASH_NAME} = ""'.encode(), data, count=1)
    return hashlib.sha256(blanked).hexdigest()


@dataclass(frozen=True)
class ScriptSource:
    """The script that ran: its released URL only when these are the released bytes, else the hash of what ran."""

    script: str
    url: str | None
    sha256: str | None

    def describe(self) -> str:
        if self.url is not None:
            return f"the released [`{self.script}`]({self.url})"
        if self.sha256 is not None:
            return f"a modified copy of `{self.script}` (sha256 `{self.sha256}`), not the released script"
        return f"`{self.script}`, not checked against the released script (what ran carries no release hash)"


def script_source(path: Path, recorded: str | None) -> ScriptSource:
    """Reads the running script's bytes; a script without a stamped hash (called from a test) is not checked."""
    try:
        data = path.read_bytes() if recorded else None
    except OSError:
        data = None
    if data is None:
        return ScriptSource(path.name, None, None)
    if release_digest(data) == recorded:
        return ScriptSource(path.name, script_url(path.name), hashlib.sha256(data).hexdigest())
    return ScriptSource(path.name, None, hashlib.sha256(data).hexdigest())


def on_hf_jobs() -> bool:
    return bool(os.environ.get("JOB_ID"))


def ran_image(image: str, vllm_version: str | None) -> str | None:
    """The recipe's image, when this job plainly ran in it: on HF Jobs, with the vLLM its tag names (if any)."""
    if not on_hf_jobs():
        return None
    tag = VERSION_TAG.fullmatch(image.rpartition(":")[2])
    if tag and vllm_version is not None and vllm_version.split("+")[0] != tag.group(1):
        return None
    return image


def hub_id(name: str) -> bool:
    """A Hub id (namespace/name), not a path on this machine."""
    return not name.startswith(LOCAL_PREFIXES) and not Path(name).expanduser().exists() and name.count("/") == 1


def reproducible(input_name: str, output: str, model: str) -> bool:
    """A job command can redo the run elsewhere only when what it read, wrote and served all live on the Hub."""
    return hub_id(input_name) and hub_id(output) and hub_id(model)


def writer_record(entry: Mapping[str, Any], run_id: str) -> str:
    """The record a row keeps of the run writing it (progress.py stores it beside the row's text)."""
    return json.dumps({"run_id": run_id, **{name: entry.get(name) for name in WRITER_FIELDS}}, sort_keys=True)


def row_entry(current: dict[str, Any], run_id: str, record: str | None) -> dict[str, Any]:
    """One row's inference_info entry: this run's for a row it wrote (or one written before rows kept their
    writer), else the writing run's record over it, without this run's window, which fed none of its pages."""
    if record is None:
        return current
    written = json.loads(record)
    if written.pop("run_id", None) == run_id:
        return current
    return {**{name: value for name, value in current.items() if name != "window"}, **written}


@dataclass(frozen=True)
class Writers:
    """What served the rows of a slice, from their records: what the card of a run that wrote none of them says."""

    vllm_version: str | None
    serving: str | None
    image: str | None


def earlier_writers(records: Iterable[str | None]) -> Writers:
    """Each field's distinct values over the rows' records, in order, joined ("0.30.0 and 0.32.0")."""
    written = [json.loads(record) for record in records if record is not None]

    def joined(name: str) -> str | None:
        values = list(dict.fromkeys(entry[name] for entry in written if entry.get(name) is not None))
        return " and ".join(values) or None

    return Writers(joined("vllm_version"), joined("serving"), joined("image"))
