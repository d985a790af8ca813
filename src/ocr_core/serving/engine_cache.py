"""An engine cache that outlives the job (--engine-cache): vLLM's, torch's and Triton's compile caches on a volume.

The next job mounts the volume again and loads what an earlier job compiled instead of compiling it anew.

HF Jobs start every job on a fresh machine, so each one paid the whole compile and warm-up again (on 2026-12-02
the LightOn shape took 238 s from launch to healthy on an H200, 122 s of it torch.compile and the first warm-up
run). The caches live under VLLM_CACHE_ROOT (vLLM points torch's Inductor and Triton under it while it compiles),
TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR and FLASHINFER_WORKSPACE_BASE (FlashInfer's JIT builds); this module points
all four at one private folder of the run and moves that folder to and from the volume.

The volume holds one archive per key, `<key>.tar`, whose last member is a manifest of every file with its size and
sha256. The key names what an artifact is only valid for (vLLM, torch and Triton versions, the GPU, the model and
the whole serve flag set), so no run ever loads another build's artifacts. A run copies the archive into a private
folder and checks it against the manifest before any engine sees it; it writes back a whole new archive under a
temporary name and renames it into place, so two jobs writing at once each leave a complete archive (the last
rename wins) and a reader never sees a half-written one under the key's name. Every failure (nothing mounted, a
partial, corrupt or foreign archive, a folder that cannot be written) is a note in the summary and a cold start,
never the end of the job; a file that holds a secret of the run is never written to the volume.

Every job unpacks at one fixed path, WORK_ROOT/<key>, whatever its TMPDIR: vLLM's AOT-compiled function names the
folder it was compiled in (on 2026-12-02, vLLM 0.26.0 on an H200, an archive unpacked under another TMPDIR killed
every engine core with FileNotFoundError), so an archive whose manifest names another folder is skipped.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from ..console import say
from ..planning.cache_volume import BUCKET_SCHEME, ENGINE_CACHE_MOUNT, bucket_mounts
from ..redaction import SECRET_ENVIRONMENT, SECRET_VALUES, redact

# Where each cache goes inside the run's private folder; FLASHINFER_WORKSPACE_BASE is the parent of .cache/flashinfer.
CACHE_FOLDERS = {
    "VLLM_CACHE_ROOT": "vllm",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
}
# Triton keeps its autotuning results with its kernels only when asked (vLLM 0.30 sets this default itself).
FIXED_VARIABLES = {"TRITON_CACHE_AUTOTUNING": "1"}
WORK_ROOT = Path("/tmp/ocr-engine-cache")
MANIFEST = "MANIFEST.json"
PARTIAL = ".partial"
STALE_PARTIAL_S = 24 * 3600
CHUNK_BYTES = 1 << 20
KEY_DIGEST_CHARS = 16
VERSION_PACKAGES = ("vllm", "torch", "triton")
VERSIONS_PROBE = (
    "import importlib.metadata as m, json\n"
    "def v(n):\n"
    "    try:\n        return m.version(n)\n"
    "    except m.PackageNotFoundError:\n        return None\n"
    f"print(json.dumps({{n: v(n) for n in {VERSION_PACKAGES!r}}}))\n"
)
HIT, MISS, OFF = "hit", "miss", "off"


class UnusableEntry(Exception):
    """The volume's archive for this key cannot be used: the message says why."""


@dataclass(frozen=True)
class CacheKey:
    """What compiled artifacts are valid for; the archive's name is a readable prefix and a digest of all of it.
    `flags` are the serve flags with any secret masked (redaction.redact), so the key can be shown and stored."""

    vllm: str
    torch: str | None
    triton: str | None
    gpu: str
    model: str
    flags: tuple[str, ...]

    @property
    def name(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        readable = "-".join(slug(part) for part in (f"vllm{self.vllm}", self.gpu, PurePosixPath(self.model).name))
        return f"{readable[:80]}-{digest[:KEY_DIGEST_CHARS]}"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "x"


def make_key(
    versions: Mapping[str, str | None], gpus: Sequence[str], model: str, flags: Sequence[str]
) -> CacheKey | None:
    """The key of a run: `versions` of vllm, torch and triton where the engine runs, the GPUs it sees (none: CPU).
    None when the vLLM version is unknown: no cached artifact can then be trusted."""
    vllm = versions.get("vllm")
    if not vllm:
        return None
    return CacheKey(
        vllm=vllm,
        torch=versions.get("torch"),
        triton=versions.get("triton"),
        gpu=" + ".join(sorted(set(gpus))) or "cpu",
        model=model,
        flags=tuple(redact(flag) for flag in flags),
    )


def versions_of(python: str) -> dict[str, str | None]:
    """The versions of vllm, torch and triton that `python` imports, read from their metadata (nothing imported);
    empty when they cannot be read, which keeps the cache off."""
    try:
        done = subprocess.run([python, "-c", VERSIONS_PROBE], capture_output=True, text=True, timeout=60, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return {}


def served_versions() -> dict[str, str | None]:
    """The versions behind the `vllm` command on PATH: those of the interpreter its launcher script names."""
    command = shutil.which("vllm")
    try:
        with open(command or "", "rb") as script:
            first = script.readline(512).decode(errors="replace")
    except OSError:
        return {}
    words = first[2:].split() if first.startswith("#!") else []
    return versions_of(words[-1]) if words and "python" in Path(words[-1]).name else {}


@dataclass
class EngineCache:
    """One run's use of the volume: `folder` is the mounted (or local) volume folder, `local` the run's private
    copy that the engines write to. `outcome` is hit (loaded), miss (started cold; the run writes the entry) or
    off (the volume cannot be used at all); `notes` say why."""

    location: str
    folder: Path | None
    key: CacheKey | None
    local: Path | None = None
    claim: int | None = None
    outcome: str = MISS
    notes: list[str] = field(default_factory=list)
    loaded: dict[str, int] = field(default_factory=dict)
    stored: set[str] = field(default_factory=set)
    writing: threading.Lock = field(default_factory=threading.Lock)
    written_bytes: int = 0

    @property
    def archive(self) -> Path:
        assert self.folder is not None and self.key is not None
        return self.folder / f"{self.key.name}.tar"

    def environment(self) -> dict[str, str]:
        """The variables that point the engine's caches at the private copy (nothing when the cache is off)."""
        if self.local is None:
            return {}
        return {**{name: str(self.local / sub) for name, sub in CACHE_FOLDERS.items()}, **FIXED_VARIABLES}

    def note(self, text: str) -> None:
        self.notes.append(text)
        say(f"engine cache: {text}")

    def load(self) -> None:
        """Copies this key's archive into the private folder, checked file by file; anything wrong is a miss."""
        assert self.local is not None and self.key is not None
        if not self.archive.is_file():
            self.note(f"nothing cached yet for {self.key.name} in {self.location}; starting cold, this run writes it")
            return
        try:
            self.loaded = unpack(self.archive, self.local, self.key)
            self.stored = set(self.loaded)
        except (UnusableEntry, OSError, tarfile.TarError, ValueError) as exc:
            shutil.rmtree(self.local, ignore_errors=True)
            self.local.mkdir(parents=True, exist_ok=True)
            self.note(f"skipped {self.archive.name} ({exc}); starting cold, and this run writes it anew")
            return
        self.outcome = HIT
        self.note(f"loaded {len(self.loaded)} file(s), {sum(self.loaded.values())} bytes, from {self.archive}")

    def publish(self) -> None:
        """Writes the private folder back as this key's archive when it holds files the archive did not (one call
        at a time: the served shape calls it once its fleet serves and again at the end); a failure is a note (the
        next job starts cold), never an error."""
        if self.local is None or self.key is None:
            return
        with self.writing:
            try:
                files = local_files(self.local)
                if not files or set(files) <= self.stored:
                    return
                written = pack(self.local, files, self.archive, self.key, secret_values())
                self.stored = set(files)
                if written:
                    self.written_bytes = self.archive.stat().st_size
                    self.note(f"wrote {written} file(s), {self.written_bytes} bytes, to {self.archive}")
            except OSError as exc:
                self.note(f"could not write {self.archive} ({exc.strerror or exc}); the next job starts cold")

    def close(self) -> None:
        if self.local is not None:
            shutil.rmtree(self.local, ignore_errors=True)
        if self.claim is not None:
            os.close(self.claim)
            self.claim = None

    def report(self) -> dict:
        """The summary's `engine_cache`: where, which key, what happened and why, bytes in and out."""
        return {
            "location": self.location,
            "key": self.key.name if self.key else None,
            "outcome": self.outcome,
            "notes": [redact(text) for text in self.notes],
            "loaded_bytes": sum(self.loaded.values()),
            "written_bytes": self.written_bytes,
        }


def open_engine_cache(location: str, key: CacheKey | None, mount: Path = Path(ENGINE_CACHE_MOUNT)) -> EngineCache:
    """The run's cache at `location`, loaded when its archive is good: a folder, or a bucket (`hf://buckets/...`),
    which the job command mounts at `mount`. Every way the volume cannot be used turns the cache off with a note."""
    folder, unusable = volume_folder(location, key, mount)
    if unusable is None and key is not None and folder is not None:
        try:
            cache = EngineCache(location, folder, key, *claimed_folder(WORK_ROOT, key.name))
        except OSError as exc:
            unusable = f"{WORK_ROOT} cannot hold the run's copy ({exc.strerror or exc}); this run starts cold"
        else:
            cache.load()
            return cache
    cache = EngineCache(location, None, key, outcome=OFF)
    cache.note(unusable or "the engine's vLLM version could not be told, so no cached artifact can be trusted")
    return cache


def volume_folder(location: str, key: CacheKey | None, mount: Path) -> tuple[Path | None, str | None]:
    """The folder the location names (a bucket: where the job command mounts it), or why it cannot be used."""
    if key is None:
        return None, None
    if location.startswith(BUCKET_SCHEME) and not mount.is_dir():
        return None, (
            f"{location} is not mounted at {mount}: run the job with hf jobs uv run -v "
            f"{bucket_mounts(['--engine-cache', location])[0]} ... (the job command in --help and the --jobs N "
            "launcher add it); this run starts cold"
        )
    folder = mount if location.startswith(BUCKET_SCHEME) else Path(location).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return None, f"{location} cannot be used as a folder ({exc.strerror or exc})"
    return folder, None


def claimed_folder(base: Path, name: str) -> tuple[Path, int | None]:
    """The run's private folder: the same path in every job (`base/<key>`), since compiled artifacts name the paths
    they were built under, held by an exclusive lock for the run's life; another run of the same key on this machine
    holding it gets a folder of its own (whose artifacts no later job loads). Emptied first: the volume's archive,
    not what an earlier run left here, is what a run starts from. Raises OSError when `base` cannot be written."""
    base.mkdir(parents=True, exist_ok=True)
    claim = os.open(base / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(claim)
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base)), None
    folder = base / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder, claim


def local_files(root: Path) -> dict[str, int]:
    """The regular files under `root`, by their path relative to it, with their sizes (links are left out)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[path.relative_to(root).as_posix()] = path.stat().st_size
    return found


def secret_values() -> set[str]:
    """The secrets the run registered, and those in its environment (the engine inherits that environment)."""
    return {*SECRET_VALUES, *(value for name in SECRET_ENVIRONMENT if (value := os.environ.get(name)))}


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
