"""What really ran, for the card and `inference_info`: the script (the released one or a modified copy), the image
(only when the job ran in it), the model as given, and whether any command reproduces the run elsewhere.

A card that names the recipe's image, URL and job command whatever happened tells a reader of a local CPU run, or of
a run of an edited script, something untrue. The release wheel of the core carries the sha256 of each released
script (tools/release.py writes the table when it builds the release): a run looks its own bytes up there, so a
copy whose bytes are not the release's is recorded as modified, with the hash of what ran, never with the released
URL, and a stamp inside a script proves nothing. A core that is not a release build checks nothing and says so.
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

from ..inputs.addresses import LOCAL_PREFIXES
from ..version import release_table_path
from .job_commands import script_url

VERSION_TAG = re.compile(r"v?(\d+\.\d+\.\d+)")
# What a row keeps of the run that wrote it: the fields of its inference_info entry that say what made the text.
WRITER_FIELDS = (
    "model_name",
    "sampling",
    "limits",
    "image",
    "vllm_version",
    "mode",
    "serving",
    "script",
    "script_url",
    "script_sha256",
    "core",
)


def released_scripts() -> dict[str, str] | None:
    """The released scripts' sha256s that tools/release.py put in this core's wheel; None for a core that is not a
    release build (a source tree, a wheel built with `uv build`), which can certify no script."""
    try:
        return json.loads(release_table_path().read_text())
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class ScriptSource:
    """The script that ran: its released URL only when these are the released bytes, else the hash of what ran;
    `checked` when the core holds the release's table to look them up in."""

    script: str
    url: str | None
    sha256: str | None
    checked: bool = True

    @property
    def standing(self) -> str:
        """One word for the summary line: released, modified, or unchecked (a core that is not a release build)."""
        if self.url is not None:
            return "released"
        return "modified" if self.checked else "unchecked"

    def describe(self) -> str:
        if self.url is not None:
            return f"the released [`{self.script}`]({self.url})"
        if self.sha256 is None:
            return f"`{self.script}`, whose bytes this run could not read"
        if self.checked:
            return f"a modified copy of `{self.script}` (sha256 `{self.sha256}`), not the released script"
        return (
            f"`{self.script}` (sha256 `{self.sha256}`), not checked against the released script: the core it ran on "
            "is not a release build"
        )


def script_source(path: Path, released: Mapping[str, str] | None) -> ScriptSource:
    """Looks the running script's raw bytes up in `released` (the release wheel's table): a copy is the release
    only when its bytes are the ones released under its name, whatever it says of itself."""
    try:
        digest: str | None = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        digest = None
    if released is None:
        return ScriptSource(path.name, None, digest, checked=False)
    url = script_url(path.name) if digest is not None and released.get(path.name) == digest else None
    return ScriptSource(path.name, url, digest)


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
