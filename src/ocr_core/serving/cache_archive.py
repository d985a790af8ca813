"""One key's archive on the engine cache's volume: written whole or not at all, and checked whole before use.

The archive is `<key>.tar`, whose last member is a manifest of every file with its size and sha256, the key and the
folder it was built in. A writer packs a temporary archive beside it and renames it into place, so two jobs writing
at once each leave a complete archive (the last rename wins) and a reader never sees a half-written one under the
key's name. A reader extracts into its private folder and checks every member against the manifest before any engine
sees it. A file that holds a secret of the run is never written.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import IO

from ..console import say
from ..planning.cache_key import CacheKey

MANIFEST = "MANIFEST.json"
PARTIAL = ".partial"
STALE_PARTIAL_S = 24 * 3600
CHUNK_BYTES = 1 << 20


class UnusableEntry(Exception):
    """The volume's archive for this key cannot be used: the message says why."""


def local_files(root: Path) -> dict[str, int]:
    """The regular files under `root`, by their path relative to it, with their sizes (links are left out)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[path.relative_to(root).as_posix()] = path.stat().st_size
    return found


def pack(root: Path, files: Mapping[str, int], archive: Path, key: CacheKey, secrets: set[str]) -> int:
    """Writes `files` under `root` and their manifest (last) to a temporary archive beside `archive`, then renames
    it into place; a file that holds a secret is left out, and an archive left with no file is not written.
    Returns how many files it wrote."""
    clear_stale_partials(archive.parent)
    partial = archive.with_name(f".{archive.name}.{uuid.uuid4().hex}{PARTIAL}")
    encoded = [secret.encode() for secret in secrets if secret]
    manifest: dict[str, dict] = {}
    try:
        with tarfile.open(partial, "w") as tar:
            for name in files:
                data = (root / name).read_bytes()
                if any(secret in data for secret in encoded):
                    say(f"engine cache: left out {name}: it holds a secret of this run")
                    continue
                manifest[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                add_member(tar, name, data, (root / name).stat().st_mode)
            record = {"key": asdict(key), "folder": str(root), "files": manifest}
            add_member(tar, MANIFEST, json.dumps(record).encode(), 0o644)
        with open(partial, "rb+") as written:
            os.fsync(written.fileno())
        if manifest:
            move_into_place(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    return len(manifest)


def move_into_place(partial: Path, archive: Path) -> None:
    """Renames the finished archive onto its key's name; a volume that cannot rename (some bucket mounts) gets a
    copy instead, which a reader may catch half-written: it then fails the manifest's check and is skipped."""
    try:
        os.replace(partial, archive)
    except OSError:
        shutil.copyfile(partial, archive)


def add_member(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode & 0o755 | 0o600
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def unpack(archive: Path, root: Path, key: CacheKey) -> dict[str, int]:
    """Extracts the archive into `root`, checking it whole: its manifest comes last, names this key and `root` as the
    folder it was built in, and every file is there once, a plain file inside `root`, of the manifest's sha256. On an
    error `root` may hold part of it: the caller empties it."""
    with tarfile.open(archive, "r") as tar:
        members = tar.getmembers()
        if not members or members[-1].name != MANIFEST:
            raise UnusableEntry("it has no manifest at its end: it was cut short")
        manifest = json.loads(read_member(tar, members[-1]).read())
        if manifest.get("key") != json.loads(json.dumps(asdict(key))):
            raise UnusableEntry("its manifest names another key: it is another build's")
        if (built_in := manifest.get("folder")) != str(root):
            raise UnusableEntry(f"it was built in {built_in}, not {root}, and compiled artifacts name their folder")
        listed: dict = manifest.get("files", {})
        extracted: dict[str, int] = {}
        for member in members[:-1]:
            known = member.isfile() and safe_name(member.name) and member.name in listed
            if not known or member.name in extracted:
                raise UnusableEntry(f"{member.name!r} is not a file its manifest lists")
            if extract(read_member(tar, member), root / member.name, member.mode) != listed[member.name]["sha256"]:
                raise UnusableEntry(f"{member.name} does not match its manifest")
            extracted[member.name] = member.size
    if set(extracted) != set(listed):
        raise UnusableEntry(f"{len(set(listed) - set(extracted))} file(s) of its manifest are missing")
    return extracted


def extract(source: IO[bytes], path: Path, mode: int) -> str:
    """Copies one member to `path`; returns the sha256 of what it copied."""
    digest = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as target:
        while chunk := source.read(CHUNK_BYTES):
            digest.update(chunk)
            target.write(chunk)
    path.chmod(mode & 0o755 | 0o600)
    return digest.hexdigest()


def read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    handle = tar.extractfile(member)
    if handle is None:
        raise UnusableEntry(f"{member.name!r} cannot be read")
    return handle


def safe_name(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and name != MANIFEST


def clear_stale_partials(folder: Path) -> None:
    """Removes the temporary archives of writers that died a day ago or more (a live writer's is younger)."""
    for path in folder.glob(f".*{PARTIAL}"):
        try:
            if time.time() - path.stat().st_mtime > STALE_PARTIAL_S:
                path.unlink()
        except OSError:
            continue
