"""An engine cache that outlives the job (--engine-cache): vLLM's, torch's and Triton's compile caches on a volume.

The next job mounts the volume again and loads what an earlier job compiled instead of compiling it anew.

HF Jobs start every job on a fresh machine, so each one paid the whole compile and warm-up again (on 2026-12-02
the LightOn shape took 238 s from launch to healthy on an H200, 122 s of it torch.compile and the first warm-up
run). The caches live under VLLM_CACHE_ROOT (vLLM points torch's Inductor and Triton under it while it compiles),
TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR and FLASHINFER_WORKSPACE_BASE (FlashInfer's JIT builds); this module points
all four at one private folder of the run and moves that folder to and from the volume.

This module is the cache's life in a run: open (find the volume, claim the fixed folder, load), publish, close and
report. The volume holds one archive per key (cache_key.py names what an artifact is valid for, so no run ever loads
another build's artifacts), written and checked whole (cache_archive.py). Every job unpacks at one fixed path,
WORK_ROOT/<key>, whatever its TMPDIR, since compiled artifacts name their folder; a second run of the key on the same
machine neither loads nor writes the archive (cache_claim.py). Every failure (nothing mounted, a partial, corrupt or
foreign archive, a folder that cannot be written) is a note in the summary and a cold start, never the end of the
job; a file that holds a secret of the run is never written to the volume.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..console import say
from ..planning.cache_key import CacheKey, make_key
from ..planning.cache_volume import BUCKET_SCHEME, ENGINE_CACHE_MOUNT, bucket_mounts
from ..redaction import SECRET_ENVIRONMENT, SECRET_VALUES, redact
from .cache_archive import UnusableEntry, local_files, pack, unpack
from .cache_claim import claimed_folder

# What the shapes import from here to key and open a run's cache.
__all__ = ["EngineCache", "make_key", "open_engine_cache"]

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
HIT, MISS, OFF = "hit", "miss", "off"


@dataclass
class EngineCache:
    """One run's use of the volume: `folder` is the mounted (or local) volume folder, `local` the run's private
    copy that the engines write to, `claim` the lock on the fixed folder (None: another run of the key here holds
    it, and this run neither loads nor writes the archive). `outcome` is hit (loaded), miss (started cold) or off
    (the volume cannot be used at all); `notes` say why."""

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
        if self.claim is None:
            self.note(
                f"another run of this key on this machine holds the fixed folder {self.local.parent / self.key.name}"
                f", so this run starts cold in {self.local} and its archive is not written (compiled artifacts name "
                "their folder: no later job could load it); run one job of a model and flag set per machine at a time"
            )
            return
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
        at a time: the served shape calls it once its fleet serves and again at the end); only a run that holds the
        fixed folder writes. A failure is a note (the next job starts cold), never an error."""
        if self.local is None or self.key is None or self.claim is None:
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


def secret_values() -> set[str]:
    """The secrets the run registered, and those in its environment (the engine inherits that environment)."""
    return {*SECRET_VALUES, *(value for name in SECRET_ENVIRONMENT if (value := os.environ.get(name)))}
