"""Releases the collection: renders the scripts from their models' modules (tools/render.py), checks that each
script is its rendering and pins the core version this checkout builds, builds that wheel with the released scripts'
hashes in it, and lays out the folder to upload to the Hub repo the scripts' URLs name.

    python tools/release.py render          # write the scripts from src/ocr_models, pinned to this version
    python tools/release.py check           # what the tests run: each script as rendered, its pins and URLs
    python tools/release.py layout FOLDER   # check, build, then add this release to FOLDER (a clone of the repo)

The wheel this builds carries ocr_core/released_scripts.json: each script's sha256, of the very bytes laid out. A run
looks its own bytes up there (command/provenance.py), so it is recorded as the released script only when the core it
runs on is a release build and its bytes are that release's; a copy edited by anyone, whatever it says of itself,
is a modified copy, and a core built any other way (a source tree, `uv build`) certifies nothing.

The layout is the Hub repo's: the scripts and models.json and the docs at the top, the wheels under wheels/. A wheel
is never overwritten or deleted: a version is released once, so a FOLDER holding this version's wheel with other
bytes is refused (raise the version in pyproject.toml, then render the scripts' pins). Scripts and docs are replaced in
place (the repo's history keeps each one released before); nothing in FOLDER is ever deleted, so an older script
and the wheel it pins stay reachable. Builds are reproducible (SOURCE_DATE_EPOCH), so rerunning a layout of the
same source finds the same wheel and changes nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from ocr_core.internals import DEFAULT_JOB_TIMEOUT, DISTRIBUTION, RELEASE_TABLE, header_pins, job_command, read_header  # noqa: E402  (src/ is on the path only from here on)
from ocr_models import RECIPES, recipe  # noqa: E402
from tools.core_wheel import WheelNotBuilt, build_core_wheel, record_hash  # noqa: E402
from tools.recipes import facts_of  # noqa: E402  (a script's FACTS, as the script states them)
from tools.render import RenderRefused, render  # noqa: E402

WHEELS_URL = "https://huggingface.co/datasets/uv-scripts/ocr-vllm/resolve/main/wheels"
DOCS = ("README.md", "SERVING.md", "RELIABILITY.md", "PERFORMANCE.md", "models.json", "compare-ocr.py")
# 1980-01-01, the earliest a zip can record: the entry added to the wheel is dated like every other one.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


class ReleaseRefused(Exception):
    """The release cannot go ahead as it stands; the message says what to change."""


@dataclass(frozen=True)
class Pins:
    """What a script's PEP 723 header asks for."""

    core: str | None
    wheel_url: str | None
    vllm: str | None
    image: str | None
    flavor: str | None
    timeout: str | None
    resolved: str | None


def core_version(root: Path = ROOT) -> str:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def resolution_date(root: Path = ROOT) -> str:
    """The date the release's scripts resolve their dependencies as of (pyproject.toml, [tool.ocr-vllm-core])."""
    return tomllib.loads((root / "pyproject.toml").read_text())["tool"][DISTRIBUTION]["resolved"]


def wheel_name(version: str) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{version}-py3-none-any.whl"


def read_pins(text: str) -> Pins:
    header = read_header(text)
    wanted = header_pins(text)
    uv = header.get("tool", {}).get("uv", {})
    source = uv.get("sources", {}).get(DISTRIBUTION, {})
    jobs = header.get("tool", {}).get("hf-jobs", {})
    return Pins(
        wanted.get(DISTRIBUTION),
        source.get("url"),
        wanted.get("vllm"),
        jobs.get("image"),
        jobs.get("flavor"),
        jobs.get("timeout"),
        uv.get("exclude-newer"),
    )


def script_problems(script: str, text: str, version: str) -> list[str]:
    """What in one script disagrees with this release: the core pin, its wheel URL, the image, the vLLM pin. A
    script with a job command of its own (an image without uv) names no image in [tool.hf-jobs], which only
    `hf jobs uv run` reads."""
    pins, facts = read_pins(text), facts_of(script)
    offline = recipe(script).shape == "offline"
    expected = Pins(
        version,
        f"{WHEELS_URL}/{wheel_name(version)}",
        facts.vllm_pin if offline else None,
        None if facts.job_command else facts.image,
        facts.flavor,
        DEFAULT_JOB_TIMEOUT,
        resolution_date(),
    )
    problems = [
        f"{script}: its header says {name} {getattr(pins, name)!r}, this release needs {getattr(expected, name)!r}"
        for name in Pins.__dataclass_fields__
        if getattr(pins, name) != getattr(expected, name)
    ]
    if job_command(script, facts) not in text:
        problems.append(f"{script}: its docstring lacks its job command: {job_command(script, facts)}")
    return problems


def rendered(version: str) -> dict[str, str]:
    """Each script's text as its model's module renders it, pinned to core `version`."""
    url = f"{WHEELS_URL}/{wheel_name(version)}"
    return {entry.script: render(entry, version, url, resolution_date()) for entry in RECIPES}


def check(root: Path = ROOT) -> list[str]:
    """What in the scripts under `root` disagrees with this release: a script other than its rendering (an edit
    made in the script, not in its model's module), then each one's pins."""
    version = core_version(root)
    texts = {entry.script: (root / entry.script).read_text() for entry in RECIPES}
    stale = [
        f"{script}: differs from what src/ocr_models/{recipe(script).model}.py renders; state the change there "
        "and run python tools/release.py render"
        for script, text in rendered(version).items()
        if texts[script] != text
    ]
    return stale + [problem for script, text in texts.items() for problem in script_problems(script, text, version)]


def write_scripts(root: Path = ROOT) -> list[str]:
    """Writes each script whose text differs from its rendering; returns what it wrote."""
    written = []
    for script, text in rendered(core_version(root)).items():
        path = root / script
        if path.read_bytes() != text.encode():
            path.write_bytes(text.encode())
            written.append(f"wrote {script}")
    return written


def release_table(root: Path = ROOT) -> dict[str, str]:
    """Each script's sha256 of its raw bytes, the very bytes layout() copies and a run reads: never of decoded
    text, which hashes a CRLF checkout as its LF twin."""
    return {entry.script: hashlib.sha256((root / entry.script).read_bytes()).hexdigest() for entry in RECIPES}


def add_release_table(wheel: Path, table: Mapping[str, str]) -> None:
    """Adds the released scripts' hashes to the built wheel as ocr_core/released_scripts.json, listed in its
    RECORD and dated like every entry, so the same source still gives the same bytes."""
    data = (json.dumps(dict(table), indent=2, sort_keys=True) + "\n").encode()
    name = f"ocr_core/{RELEASE_TABLE}"
    with zipfile.ZipFile(wheel) as built:
        entries = [(info, built.read(info)) for info in built.infolist()]
    added = zipfile.ZipInfo(name, ZIP_EPOCH)
    added.compress_type, added.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
    first_metadata = next(index for index, (info, _) in enumerate(entries) if ".dist-info/" in info.filename)
    entries.insert(first_metadata, (added, data))
    temporary = wheel.with_name(f".{wheel.name}.tmp")
    with zipfile.ZipFile(temporary, "w") as rewritten:
        for info, content in entries:
            if info.filename.endswith(".dist-info/RECORD"):
                content = f"{name},{record_hash(data)},{len(data)}\n".encode() + content
            rewritten.writestr(info, content)
    os.replace(temporary, wheel)


def build_wheel(root: Path, folder: Path) -> Path:
    """The core's release wheel (tools/core_wheel.py: reproducible), with the released scripts' hashes added."""
    try:
        built = build_core_wheel(root, folder)
    except WheelNotBuilt as exc:
        raise ReleaseRefused(str(exc)) from None
    add_release_table(built, release_table(root))
    return built


def place(source: Path, target: Path, immutable: bool) -> str:
    """Copies one file into the layout; an immutable one (a wheel) already there with other bytes is refused."""
    if target.exists() and target.read_bytes() == source.read_bytes():
        return f"unchanged {target}"
    if target.exists() and immutable:
        raise ReleaseRefused(
            f"{target} is already released with other bytes; a released version never changes: raise the version "
            "in pyproject.toml and in every script's pin, then release again"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return f"wrote {target}"


def layout(folder: Path, root: Path = ROOT) -> list[str]:
    """Adds this release to `folder`: its wheel under wheels/, then the scripts and docs; returns what it did."""
    problems = check(root)
    if problems:
        raise ReleaseRefused("\n".join(problems))
    with tempfile.TemporaryDirectory() as build:
        wheel = build_wheel(root, Path(build))
        done = [place(wheel, folder / "wheels" / wheel.name, immutable=True)]
    names = [entry.script for entry in RECIPES] + list(DOCS)
    return done + [place(root / name, folder / name, immutable=False) for name in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("render", help="write each script from its model's module in src/ocr_models")
    actions.add_parser("check", help="fail if a script disagrees with its rendering or this release; write nothing")
    actions.add_parser("layout", help="check, build the wheel and add this release to FOLDER").add_argument(
        "folder", type=Path
    )
    args = parser.parse_args()
    try:
        if args.action == "render":
            print("\n".join(write_scripts()) or "every script is as its model's module renders it")
        elif args.action == "check":
            problems = check()
            print("\n".join(problems) or f"every script is as rendered and pins {DISTRIBUTION}=={core_version()}")
            return 1 if problems else 0
        else:
            print("\n".join(layout(args.folder)))
    except ReleaseRefused as exc:
        print(f"release refused: {exc}", file=sys.stderr)
        return 1
    except RenderRefused as exc:
        print(f"render refused: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
