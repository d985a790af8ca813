"""Where results go: a local folder or a Hub dataset repo, with progress parts mirrored as the run goes.

Both kinds keep the same layout, so resuming, publishing and reading back are one code path:
  .ocr-progress/<config>/<split>/part-*.parquet   results as they come (kept for resume and --retry-errors)
  <data dir>/<split>-00000-of-0000N.parquet       the final dataset, in input order
  README.md                                       the dataset card
"""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .hub import HubClient, with_retries
from .progress import MANIFEST
from .report import say

PROGRESS_ROOT = ".ocr-progress"
UPLOAD_EVERY_S = 300.0


def is_local_output(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or Path(spec).expanduser().exists()


@dataclass
class Destination:
    spec: str
    split: str
    config: str | None
    hub: HubClient | None
    private: bool = False
    create_pr: bool = False
    work_root: Path | None = None

    @property
    def local(self) -> bool:
        return self.hub is None

    @property
    def root(self) -> Path:
        """The local folder that holds (or mirrors) the output."""
        if self.local:
            return Path(self.spec).expanduser()
        base = self.work_root or Path(os.environ.get("OCR_WORK_DIR", Path(tempfile.gettempdir()) / "ocr-work"))
        return base / self.spec.replace("/", "__")

    @property
    def progress_prefix(self) -> str:
        return f"{PROGRESS_ROOT}/{self.config or 'default'}/{self.split}"

    @property
    def progress_dir(self) -> Path:
        return self.root / self.progress_prefix

    @property
    def data_prefix(self) -> str:
        return self.config or "data"

    def describe(self) -> str:
        return str(self.root) if self.local else f"https://huggingface.co/datasets/{self.spec}"

    def pull_progress(self) -> int:
        """Fetches parts an earlier job pushed to the Hub; returns how many were new here."""
        if self.local:
            return 0
        self.progress_dir.mkdir(parents=True, exist_ok=True)
        names = [name for name in self.hub.list_files(self.spec) if name.startswith(self.progress_prefix + "/")]
        fetched = 0
        for name in names:
            if name.endswith((".parquet", MANIFEST)) and not (self.root / name).exists():
                self.hub.download(self.spec, name, self.root)
                fetched += 1
        return fetched

    def push_parts(self, parts: list[Path]) -> None:
        if self.local or self.create_pr or not parts:
            return
        files = {part.relative_to(self.root).as_posix(): part for part in parts}
        manifest = self.progress_dir / MANIFEST
        if manifest.exists():
            files[f"{self.progress_prefix}/{MANIFEST}"] = manifest
        with_retries(
            lambda: self.hub.commit(self.spec, files, [], f"OCR progress: {len(files)} part(s)"),
            "uploading progress",
        )

    def existing_card(self) -> str | None:
        if self.local:
            path = self.root / "README.md"
            return path.read_text() if path.exists() else None
        if "README.md" not in self.hub.list_files(self.spec):
            return None
        with tempfile.TemporaryDirectory() as folder:
            return self.hub.download(self.spec, "README.md", Path(folder)).read_text()

    def existing_data_files(self) -> list[str]:
        prefix = f"{self.data_prefix}/{self.split}-"
        if self.local:
            folder = self.root / self.data_prefix
            names = [f"{self.data_prefix}/{p.name}" for p in folder.glob(f"{self.split}-*.parquet")]
            return sorted(names)
        return sorted(name for name in self.hub.list_files(self.spec) if name.startswith(prefix))

    def publish(self, files: dict[str, Path], card: str, message: str) -> str:
        """Replaces this split's data files and the card in one step (one commit on the Hub)."""
        stale = [name for name in self.existing_data_files() if name not in files]
        if self.local:
            for name in stale:
                (self.root / name).unlink()
            for name, path in files.items():
                (self.root / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(path), self.root / name)
            (self.root / "README.md").write_text(card)
            return str(self.root)
        with tempfile.TemporaryDirectory() as folder:
            card_path = Path(folder) / "README.md"
            card_path.write_text(card)
            add = {**files, "README.md": card_path}
            return with_retries(
                lambda: self.hub.commit(self.spec, add, stale, message, create_pr=self.create_pr),
                "publishing",
            )


class PartUploader:
    """Mirrors new progress parts to the Hub from a background thread, a commit every `every_s` seconds.

    Uploads never block the driver; a failed upload keeps its parts queued for the next try and the final flush.
    """

    def __init__(self, destination: Destination, every_s: float = UPLOAD_EVERY_S) -> None:
        self.destination = destination
        self.every_s = every_s
        self.incoming: queue.Queue[Path] = queue.Queue()
        self.pending: list[Path] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="uploader", daemon=True)
        self.active = not destination.local and not destination.create_pr

    def start(self) -> None:
        if self.active:
            self.thread.start()

    def add(self, part: os.PathLike) -> None:
        if self.active:
            self.incoming.put(Path(part))

    def loop(self) -> None:
        while not self.stopping.wait(self.every_s):
            self.upload_pending()

    def upload_pending(self) -> None:
        while not self.incoming.empty():
            self.pending.append(self.incoming.get())
        if not self.pending:
            return
        batch = list(self.pending)
        try:
            self.destination.push_parts(batch)
        except Exception as exc:
            say(f"progress upload failed, will retry: {type(exc).__name__}: {exc}")
            return
        self.pending = [part for part in self.pending if part not in batch]

    def close(self) -> None:
        """Stops the thread and uploads whatever is left, with retries; raises if the Hub stays unreachable."""
        if not self.active:
            return
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        while not self.incoming.empty():
            self.pending.append(self.incoming.get())
        started = time.monotonic()
        self.destination.push_parts(self.pending)
        if self.pending:
            say(f"uploaded {len(self.pending)} progress part(s) in {time.monotonic() - started:.1f} s")
        self.pending = []
