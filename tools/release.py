"""Releases the collection: stamps each script's release hash, checks that every script pins the core version this
checkout builds, builds that wheel, and lays out the folder to upload to the Hub repo the scripts' URLs name.

    python tools/release.py stamp           # after editing a script: record the hash of its bytes in it
    python tools/release.py check           # what the tests run: pins, sources URL, image, vLLM pin, stamps
    python tools/release.py layout FOLDER   # check, build, then add this release to FOLDER (a clone of the repo)

The layout is the Hub repo's: the scripts and models.json and the docs at the top, the wheels under wheels/. A wheel
is never overwritten or deleted: a version is released once, so a FOLDER holding this version's wheel with other
bytes is refused (raise the version in pyproject.toml and the scripts' pins). Scripts and docs are replaced in
place (the repo's history keeps each one released before); nothing in FOLDER is ever deleted, so an older script
and the wheel it pins stay reachable. Builds are reproducible (SOURCE_DATE_EPOCH), so rerunning a layout of the
same source finds the same wheel and changes nothing.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from ocr_core.cli import DEFAULT_JOB_TIMEOUT, job_command  # noqa: E402  (src/ is on the path only from here on)
from ocr_core.provenance import RELEASE_HASH_LINE, RELEASE_HASH_NAME, release_digest  # noqa: E402
from ocr_core.version import DISTRIBUTION  # noqa: E402
from ocr_models import RECIPES  # noqa: E402
from tools.recipes import facts_of  # noqa: E402  (a script's FACTS, as the script states them)

WHEELS_URL = "https://huggingface.co/datasets/uv-scripts/ocr-vllm/resolve/main/wheels"
DOCS = ("README.md", "SERVING.md", "models.json", "compare-ocr.py")
# 1980-01-01, the earliest a zip can record: a wheel's bytes then depend on its source only.
BUILD_EPOCH = "315532800"


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


def core_version(root: Path = ROOT) -> str:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def wheel_name(version: str) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{version}-py3-none-any.whl"


def header_of(text: str) -> str:
    found = re.search(r"^# /// script$(.*?)^# ///$", text, re.M | re.S)
    return "\n".join(line.removeprefix("#").removeprefix(" ") for line in found[1].splitlines()) if found else ""


def read_pins(text: str) -> Pins:
    header = tomllib.loads(header_of(text))
    wanted = dict(
        re.fullmatch(r"([A-Za-z0-9_.-]+)\s*==\s*(\S+)", spec).groups()
        for spec in header.get("dependencies", [])
        if "==" in spec
    )
    source = header.get("tool", {}).get("uv", {}).get("sources", {}).get(DISTRIBUTION, {})
    jobs = header.get("tool", {}).get("hf-jobs", {})
    return Pins(
        wanted.get(DISTRIBUTION),
        source.get("url"),
        wanted.get("vllm"),
        jobs.get("image"),
        jobs.get("flavor"),
        jobs.get("timeout"),
    )


def script_problems(script: str, text: str, version: str) -> list[str]:
    """What in one script disagrees with this release: the core pin, its wheel URL, the image, the vLLM pin. A
    script with a job command of its own (an image without uv) names no image in [tool.hf-jobs], which only
    `hf jobs uv run` reads."""
    pins, facts = read_pins(text), facts_of(script)
    offline = next(entry for entry in RECIPES if entry.script == script).shape == "offline"
    expected = Pins(
        version,
        f"{WHEELS_URL}/{wheel_name(version)}",
        facts.vllm_pin if offline else None,
        None if facts.job_command else facts.image,
        facts.flavor,
        DEFAULT_JOB_TIMEOUT,
    )
    problems = [
        f"{script}: its header says {name} {getattr(pins, name)!r}, this release needs {getattr(expected, name)!r}"
        for name in Pins.__dataclass_fields__
        if getattr(pins, name) != getattr(expected, name)
    ]
    if job_command(script, facts) not in text:
        problems.append(f"{script}: its docstring lacks its job command: {job_command(script, facts)}")
    recorded = RELEASE_HASH_LINE.search(text)
    if recorded is None or recorded[0] != f'{RELEASE_HASH_NAME} = "{release_digest(text)}"':
        problems.append(
            f"{script}: its {RELEASE_HASH_NAME} is not the hash of its text; run python tools/release.py stamp"
        )
    return problems


def check(root: Path = ROOT) -> list[str]:
    version = core_version(root)
    return [
        problem
        for entry in RECIPES
        for problem in script_problems(entry.script, (root / entry.script).read_text(), version)
    ]


def stamp(root: Path = ROOT) -> list[str]:
    """Records each script's own hash in it (its value blanked while hashing); returns the scripts it changed."""
    changed = []
    for entry in RECIPES:
        path = root / entry.script
        text = path.read_text()
        stamped = RELEASE_HASH_LINE.sub(f'{RELEASE_HASH_NAME} = "{release_digest(text)}"', text, count=1)
        if stamped != text:
            path.write_text(stamped)
            changed.append(entry.script)
    return changed


def uv_command() -> list[str]:
    """uv from PATH, else the one installed beside this python (the test bed's: requirements-test.txt)."""
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


@contextmanager
def building(root: Path) -> Iterator[None]:
    """One build of this tree at a time, across processes: setuptools writes its scratch (build/, src/*.egg-info)
    into the tree and the build deletes it after, so a second build beside the first (the demo's, the release's, the
    test suite's on another worker) would lose its scratch mid-build."""
    with (root / "pyproject.toml").open("rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build_wheel(root: Path, folder: Path) -> Path:
    """The core's wheel, built by uv with a fixed timestamp, so the same source gives the same bytes."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": BUILD_EPOCH}
    with building(root):
        subprocess.run(
            [*uv_command(), "build", "--wheel", "--quiet", "--out-dir", str(folder), str(root)], check=True, env=env
        )
        for left in [root / "build", *(root / "src").glob("*.egg-info")]:
            shutil.rmtree(left)  # setuptools' scratch in the tree: its metadata would make src/ look installed
    built = folder / wheel_name(core_version(root))
    if not built.is_file():
        raise ReleaseRefused(f"uv build did not write {built.name} into {folder}")
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
    actions.add_parser("stamp", help="record each script's hash in it")
    actions.add_parser("check", help="fail if a script disagrees with this release; write nothing")
    actions.add_parser("layout", help="check, build the wheel and add this release to FOLDER").add_argument(
        "folder", type=Path
    )
    args = parser.parse_args()
    try:
        if args.action == "stamp":
            print("\n".join(f"stamped {name}" for name in stamp()) or "every script's stamp is current")
        elif args.action == "check":
            problems = check()
            print("\n".join(problems) or f"every script pins {DISTRIBUTION}=={core_version()}")
            return 1 if problems else 0
        else:
            print("\n".join(layout(args.folder)))
    except ReleaseRefused as exc:
        print(f"release refused: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
