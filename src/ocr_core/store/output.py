"""Where results go: a local folder or a Hub dataset repo, with progress mirrored as the run goes.

Both kinds keep the same layout (layout.py names every file of it; CONTRACT.md states it), so resuming, publishing
and reading back are one code path. A Destination is one config and split of OUTPUT, seen from one run: where its
files are here and in the repo, and the steps that read, mirror, replace and publish them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..console import say
from . import layout
from .hub import HubClient, with_retries
from .lease import Lease
from .manifest import differences, read_manifest, write_manifest
from .progress import part_files


class Destination:
    def __init__(
        self,
        spec: str,
        split: str,
        config: str | None,
        hub: HubClient | None,
        private: bool = False,
        create_pr: bool = False,
        work_dir: Path | None = None,
        shard: tuple[int, int] | None = None,
    ) -> None:
        self.spec = spec
        self.shard = shard
        self.split = split
        self.config = config
        self.hub = hub
        self.private = private
        self.create_pr = create_pr
        self.work_dir = work_dir or Path(tempfile.gettempdir()) / "ocr-work"
        self.mirror_progress = hub is not None
        self.created_here = False
        """Whether this run created the local OUTPUT folder (output_folder.make_output_folder)."""

    @property
    def local(self) -> bool:
        return self.hub is None

    @property
    def root(self) -> Path:
        """The local folder that holds (or mirrors) the output."""
        return Path(self.spec).expanduser() if self.local else self.work_dir / self.spec.replace("/", "__")

    @property
    def progress_prefix(self) -> str:
        return layout.progress_prefix(self.config, self.split)

    @property
    def progress_dir(self) -> Path:
        return self.root / self.progress_prefix

    @property
    def slice_tag(self) -> str:
        """How this run's progress files begin after `part-` or `merged-`: a shard's own tag, so a shard fetches and
        merges only its own files; empty for an unsharded run, which owns them all."""
        return layout.shard_tag(self.shard)

    @property
    def data_prefix(self) -> str:
        return layout.data_prefix(self.config)

    def describe(self) -> str:
        return str(self.root) if self.local else f"https://huggingface.co/datasets/{self.spec}"

    def where(self) -> str:
        """This run's slice of OUTPUT, for messages."""
        return f"{self.describe()} (config {layout.config_name(self.config)}, split {self.split})"

    def in_repo(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def in_progress(self, name: str) -> str:
        """The repo path of a file of this config and split's progress folder."""
        return f"{self.progress_prefix}/{name}"

    def listing(self) -> list[str]:
        """Every file of OUTPUT, as paths inside it."""
        if self.local:
            return sorted(self.in_repo(path) for path in self.root.rglob("*") if path.is_file())
        return with_retries(lambda: self.hub.list_files(self.spec), "listing the output repo")

    def manifest_on_hub(self, listing: Iterable[str] | None = None) -> dict | None:
        """The manifest the Hub holds for this config and split now, or None (read aside, never over ours). With
        a listing of OUTPUT it is read when the listing names it; without one it is fetched by name, so a re-check
        costs one call and no listing."""
        name = self.in_progress(layout.MANIFEST)
        if self.local or (listing is not None and name not in set(listing)):
            return None
        with tempfile.TemporaryDirectory() as folder:
            here = Path(folder)
            if listing is None:
                parts = self.hub.download_parts
                wanted = [layout.MANIFEST]
                with_retries(lambda: parts(self.spec, self.progress_prefix, here, wanted), "reading the manifest")
            else:
                with_retries(lambda: self.hub.download(self.spec, name, here), "reading the manifest")
            return read_manifest(here / self.progress_prefix)

    def replaced_by_another_run(self, manifest: dict, listing: Iterable[str] | None = None) -> str | None:
        """Why this run's results are no longer the ones at OUTPUT: another run (an --overwrite with other settings)
        replaced the manifest on the Hub while this one ran; None while they are still this run's."""
        if not self.mirror_progress:
            return None
        theirs = self.manifest_on_hub(self.listing() if listing is None else listing)
        changed = differences(theirs, manifest) if theirs is not None else []
        if not changed:
            return None
        return (
            f"another run replaced the results at {self.where()} with other settings ({', '.join(changed)} differ) "
            "while this one ran; nothing more is uploaded or published, so the two jobs' text never mix"
        )

    def fetch_manifest(self, listing: list[str] | None = None) -> dict | None:
        """The results' manifest (`listing`: as manifest_on_hub reads it). A local copy left by an earlier job whose
        manifest differs from the Hub's is stale (another run replaced those results since): its parts are dropped
        before they can be trusted."""
        local = read_manifest(self.progress_dir)
        remote = self.manifest_on_hub(listing)
        if remote is None:
            return local
        if local is not None and differences(local, remote):
            say(f"dropping this machine's copy of results made another way ({', '.join(differences(local, remote))})")
            self.clear_local_progress()
        write_manifest(self.progress_dir, remote)
        return remote

    def holds_results(self, listing: Iterable[str]) -> bool:
        """Whether any row of this config and split has a result: a progress part here or on the Hub, or a
        published slice. Without one, a manifest only says how a run that never reached its pages would have run."""
        return bool(part_files(self.progress_dir)) or self.lists_results(listing)

    def lists_results(self, listing: Iterable[str]) -> bool:
        """Whether the listing of OUTPUT names a result of this config and split (a progress part or a published
        data file), whatever this machine holds."""
        published = layout.split_data_prefix(self.data_prefix, self.split)
        progress = self.in_progress("")
        return any(
            name.startswith(published) or (name.startswith(progress) and name.endswith(layout.PROGRESS_SUFFIX))
            for name in listing
        )

    def leases(self, listing: list[str]) -> list[Lease]:
        """The lease files runs left on the Hub for this config and split; one that vanished meanwhile (its run
        ended) or cannot be read is passed over."""
        names = [name for name in listing if name.startswith(self.in_progress(layout.LEASE_PREFIX))]
        if self.local or not names:
            return []
        found = []
        with tempfile.TemporaryDirectory() as folder:
            for name in names:
                try:
                    found.append(Lease.from_json(self.hub.download(self.spec, name, Path(folder)).read_text()))
                except Exception as exc:
                    say(f"passing over lease {name}: {type(exc).__name__}: {exc}")
        return found

    def commit_titles(self) -> list[str]:
        """The output repo's commit titles, oldest first (none for a local output)."""
        if self.local:
            return []
        return with_retries(lambda: self.hub.commit_titles(self.spec), "listing the output repo's commits")

    def lease_file(self, lease: Lease) -> tuple[str, Path]:
        """The lease written here, and its name in the repo."""
        path = self.progress_dir / lease.file_name
        path.write_text(lease.to_json())
        return self.in_repo(path), path

    def clear_local_progress(self) -> None:
        if self.progress_dir.is_dir():
            for path in self.progress_dir.iterdir():
                if path.is_file() and not path.name.startswith("."):
                    path.unlink()

    def pull_progress(self) -> int:
        """Fetches (in parallel) the parts earlier jobs of this slice pushed to the Hub, and untagged ones (an
        unsharded run's, which may hold any row); another shard's are never fetched. Returns how many are new here."""
        if self.local:
            return 0
        before = {path.name for path in part_files(self.progress_dir)}
        names = layout.progress_fetch_globs(self.slice_tag)
        with_retries(
            lambda: self.hub.download_parts(self.spec, self.progress_prefix, self.root, names), "fetching progress"
        )
        return len({path.name for path in part_files(self.progress_dir)} - before)

    def discard_progress(self, listing: list[str]) -> None:
        """--overwrite after a fingerprint change: this config's earlier results and published slices go, here and
        on the Hub (shards publish one by one, so a slice made another way must not stay beside the new ones)."""
        self.clear_local_progress()
        data = [name for name in listing if name.startswith(layout.split_data_prefix(self.data_prefix, self.split))]
        if self.local:
            for name in data:
                (self.root / name).unlink()
            return
        old = [name for name in listing if name.startswith(self.in_progress(""))]
        self.push({}, old + data, "OCR progress: --overwrite removes results made another way")

    def push(self, add: Mapping[str, Path], delete: Iterable[str], message: str) -> None:
        """One commit to the main branch; deletes are matched against a fresh listing at every attempt."""
        wanted = list(delete)

        def attempt() -> None:
            present = set(self.hub.list_files(self.spec)) if wanted else set()
            gone = [name for name in wanted if name in present]
            files = {name: path for name, path in add.items() if path.exists()}
            if files or gone:
                self.hub.commit(self.spec, files, gone, message)

        with_retries(attempt, "uploading progress")

    def existing_card(self, listing: Iterable[str] | None = None) -> str | None:
        """The card at OUTPUT, or None; `listing` is a listing of OUTPUT already read, else it is listed now."""
        if self.local:
            path = self.root / layout.CARD
            return path.read_text() if path.exists() else None
        if layout.CARD not in (self.listing() if listing is None else listing):
            return None
        with tempfile.TemporaryDirectory() as folder:
            return with_retries(lambda: self.hub.download(self.spec, layout.CARD, Path(folder)), "reading").read_text()

    def stale_data_files(self, names: Iterable[str], keep: Iterable[str], shard: tuple[int, int]) -> list[str]:
        """This split's data files that a publish of `shard` replaces: the shard's own earlier files, and files not
        cut into this many shards (an earlier layout); the other shards' files stay."""
        keep = set(keep)
        prefix = layout.split_data_prefix(self.data_prefix, self.split)
        own = layout.shard_data_prefix(self.data_prefix, self.split, shard)
        sibling = layout.cut_into(self.data_prefix, self.split, shard[1])
        return sorted(
            name
            for name in names
            if name.startswith(prefix) and name not in keep and (name.startswith(own) or not sibling.fullmatch(name))
        )

    def publish(self, files: dict[str, Path], card: str, message: str, shard: tuple[int, int]) -> str:
        """Replaces this shard's data files and writes the card in one step (one commit on the Hub).

        A retry lists the repo again, so a commit that went through before its answer was lost is not undone, and
        files that another run already deleted are not deleted twice.
        """
        if self.local:
            for name in self.stale_data_files(self.listing(), files, shard):
                (self.root / name).unlink()
            for name, path in files.items():
                (self.root / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(path), self.root / name)
            self.write_card(card, message)
            return str(self.root)
        with tempfile.TemporaryDirectory() as folder:
            card_path = Path(folder) / layout.CARD
            card_path.write_text(card)
            add = {**files, layout.CARD: card_path}

            def attempt() -> str:
                stale = self.stale_data_files(self.hub.list_files(self.spec), files, shard)
                return self.hub.commit(self.spec, add, stale, message, create_pr=self.create_pr)

            return with_retries(attempt, "publishing")

    def write_card(self, card: str, message: str) -> None:
        """The card alone: written aside and renamed here, so a concurrent reader never sees half of one; one
        commit on the Hub."""
        if self.local:
            temporary = self.progress_dir / f".{layout.CARD}.{os.getpid()}.tmp"
            temporary.write_text(card)
            temporary.replace(self.root / layout.CARD)
            return
        with tempfile.TemporaryDirectory() as folder:
            card_path = Path(folder) / layout.CARD
            card_path.write_text(card)
            self.push({layout.CARD: card_path}, [], message)
