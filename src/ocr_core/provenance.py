"""What really ran, for the card and `inference_info`: the script (the released one or a modified copy), the image
(only when the job ran in it), the model as given, and whether any command reproduces the run elsewhere.

A card that names the recipe's image, URL and job command whatever happened tells a reader of a local CPU run, or of
a run of an edited script, something untrue. A released script carries the hash of its own text (the hash itself
blanked), stamped by tools/release.py; a copy whose bytes no longer match is recorded as modified, with the
hash of what ran, never with the released URL.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .cli import script_url
from .inputs import LOCAL_PREFIXES

RELEASE_HASH_NAME = "RELEASED_SHA256"
RELEASE_HASH_LINE = re.compile(rf'^{RELEASE_HASH_NAME} = "[0-9a-f]*"(?=\r?$)'.encode(), re.M)
VERSION_TAG = re.compile(r"v?(\d+\.\d+\.\d+)")


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
