"""`--core-wheel WHEEL`: the core a clone's script takes to HF Jobs, where the header's pinned wheel would be wrong.

A script's header pins the core's released wheel by its URL. Before a release that URL does not exist, and after one
a clone's src/ need not be what it holds, so a launcher whose core is not a release build ships a wheel of this core
with each job. `hf jobs uv run` (huggingface_hub 2.4) uploads every file of this machine named on a job's command
line to the job's artifacts bucket, mounts it at /data and rewrites those words to the mounted paths; two variables
then make the job's uv take the pinned version from there: UV_NO_SOURCES drops the header's URL and UV_FIND_LINKS
offers /data. The header is not edited, so the job runs the bytes of this copy.

In the job the flag names the shipped file, and the run checks, before it reads a page, that the core it imported
is that wheel's version and its files' bytes (their sha256s, as the wheel's RECORD lists them): a job that installed
another core, or another build of the same version, says so instead of writing pages with it.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommandError
from ..version import DISTRIBUTION, core_version
from .script_header import header_pins

WHEEL_NAME = re.compile(r"ocr_vllm_core-(?P<version>[^-]+)-[^-]+-[^-]+-[^-]+\.whl")
METADATA_VERSION = re.compile(r"^Version: *(?P<version>\S+) *$", re.MULTILINE)
MAKE_SUBMIT = "make submit SCRIPT=<script> INPUT=<namespace/name> OUTPUT=<namespace/name>"


@dataclass(frozen=True)
class CoreWheel:
    """A wheel of the core to ship with the jobs: its path here, its version and its sha256."""

    path: Path
    version: str
    sha256: str


def wheel_version(path: Path) -> str | None:
    found = WHEEL_NAME.fullmatch(path.name)
    return found["version"] if found else None


def take_core_wheel(parser: argparse.ArgumentParser, args: argparse.Namespace, in_job: bool) -> CoreWheel | None:
    """Removes `--core-wheel` from the parsed arguments (it makes no text, so it stays out of the results'
    fingerprint); a file that is not this core's wheel is a command error (exit 2), said with the fix. In a job
    (`in_job`: no --jobs) the core that runs must be the wheel's very bytes, not only its version."""
    given = vars(args).pop("core_wheel")
    if given is None:
        return None
    path = Path(given).expanduser().absolute()
    version = wheel_version(path)
    if not path.is_file() or version is None:
        parser.error(
            f"--core-wheel {given}: not a wheel of {DISTRIBUTION} (ocr_vllm_core-VERSION-py3-none-any.whl); build one "
            "with `uv build --wheel` in the clone, or let make submit build it"
        )
    if (problem := wheel_problem(path, version)) is not None:
        parser.error(
            f"--core-wheel {given} {problem}, so no job could install it; build the wheel again with `uv build "
            "--wheel` in the clone (make submit builds it) and pass the file it writes under dist/"
        )
    running = core_version()
    if running is not None and running != version:
        parser.error(
            f"--core-wheel {given} holds {DISTRIBUTION} {version}, but this run's core is {running}: a job would "
            "install the core named on its command line and nothing else; pass the wheel of this core (make submit "
            "builds it) or run the job's script on the image that installed it"
        )
    if in_job and (differs := differing_file(path)) is not None:
        parser.error(
            f"--core-wheel {given}: this job's core is {DISTRIBUTION} {version}, but not the bytes of the shipped "
            f"wheel ({differs} differs): its uv installed another build of that version, a cached one; raise the "
            "version in pyproject.toml so no other build carries it, and submit again (make submit)"
        )
    return CoreWheel(path, version, hashlib.sha256(path.read_bytes()).hexdigest())


def wheel_problem(path: Path, version: str) -> str | None:
    """Why a file named as this core's wheel of `version` is not that wheel: not a zip archive (a failed download
    saved under the wheel's name), a damaged one, no ocr_core or no RECORD in it, or metadata of another version.
    Said before any job is paid for, and in a job before its first page, rather than a BadZipFile traceback."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            damaged = archive.testzip()
            metadata = next((name for name in names if name.endswith(".dist-info/METADATA")), None)
            text = archive.read(metadata).decode("utf-8", "replace") if metadata else ""
    except (zipfile.BadZipFile, OSError) as exc:
        return f"is not a zip archive ({exc}): a failed download saved under the wheel's name?"
    if damaged is not None:
        return f"is a damaged zip archive ({damaged} does not match its checksum)"
    if not any(name.startswith("ocr_core/") for name in names):
        return "holds no ocr_core package"
    if not any(name.endswith(".dist-info/RECORD") for name in names):
        return "holds no RECORD of its files"
    said = METADATA_VERSION.search(text)
    if said is None or said["version"] != version:
        return f"is named {DISTRIBUTION} {version}, but its metadata says version {said['version'] if said else 'none'}"
    return None


def differing_file(wheel: Path) -> str | None:
    """The first file of the wheel's packages (as its RECORD lists them, with their sha256) that the core this run
    imported does not hold byte for byte; None when it holds every one. The core's packages lie beside ocr_core."""
    installed = Path(__file__).resolve().parents[2]
    with zipfile.ZipFile(wheel) as archive:
        record = next(name for name in archive.namelist() if name.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.TextIOWrapper(archive.open(record), encoding="utf-8")))
    for name, digest, *_ in rows:
        if ".dist-info/" in name or not digest.startswith("sha256="):
            continue
        found = installed / name
        if not found.is_file() or record_digest(found.read_bytes()) != digest:
            return name
    return None


def record_digest(data: bytes) -> str:
    """A file's hash as a wheel's RECORD writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def check_ships(wheel: CoreWheel | None, checked: bool, script: str, script_text: str) -> None:
    """A launcher on a core that is not a release build must ship one (its jobs would install the header's
    pinned wheel, which is not this code and exists only after a release); a wheel the header's pin refuses would
    stop every job at its install."""
    if wheel is None:
        if not checked:
            raise CommandError(
                f"--jobs: the core here is a source tree build, so each job would install the wheel {script}'s "
                "header pins, which a release publishes and which is not this code: submit from the clone with "
                f"`{MAKE_SUBMIT}` (it builds this core's wheel and ships it with each job), or add --core-wheel "
                "dist/ocr_vllm_core-VERSION-py3-none-any.whl after `uv build --wheel`"
            )
        return
    pinned = header_pins(script_text).get(DISTRIBUTION)
    if pinned is not None and pinned != wheel.version:
        raise CommandError(
            f"--core-wheel {wheel.path.name} is {DISTRIBUTION} {wheel.version}, but {script} pins "
            f"{DISTRIBUTION}=={pinned}: the jobs' uv would refuse it; build the wheel of the version the script pins"
        )


def shipping_env() -> dict[str, str]:
    """The variables that make a job's uv install the shipped wheel: the header's URL dropped, the job's mounted
    artifacts (where HF Jobs put the files named on its command line) offered instead."""
    from huggingface_hub import constants

    mount = getattr(constants, "HF_JOBS_ARTIFACTS_MOUNT_PATH", None)
    if mount is None:
        raise CommandError(
            "--core-wheel: this huggingface_hub cannot ship files with a job (2.4 mounts them at /data); upgrade it "
            "(uv pip install -U huggingface_hub) and run the same command again"
        )
    return {"UV_NO_SOURCES": "1", "UV_FIND_LINKS": mount}
