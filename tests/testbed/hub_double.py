"""A Hub client double: each dataset repo is a folder, each commit copies files in and records itself.

It implements the same calls as ocr_core.store.hub.HfHub, so the publishing and resume code under test is the real
code; only the network is missing.
"""

from __future__ import annotations

import fnmatch
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


@dataclass
class Commit:
    repo_id: str
    added: list[str]
    deleted: list[str]
    message: str
    create_pr: bool


@dataclass
class FolderHub:
    root: Path
    commits: list[Commit] = field(default_factory=list)
    private: dict[str, bool] = field(default_factory=dict)
    fail_commits: int = 0
    fail_after_commit: str | None = None
    refuse: Callable[[str, bool], Exception | None] | None = None

    def repo(self, repo_id: str) -> Path:
        return self.root / repo_id

    def create_repo(self, repo_id: str, private: bool) -> None:
        self.repo(repo_id).mkdir(parents=True, exist_ok=True)
        self.private.setdefault(repo_id, private)

    def list_files(self, repo_id: str) -> list[str]:
        folder = self.repo(repo_id)
        return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())

    def download(self, repo_id: str, path_in_repo: str, local_dir: Path) -> Path:
        target = Path(local_dir) / path_in_repo
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.repo(repo_id) / path_in_repo, target)
        return target

    def download_parts(self, repo_id: str, folder: str, local_dir: Path, names: Sequence[str]) -> None:
        """Matches like snapshot_download's allow_patterns (fnmatch on the path in the repo)."""
        for name in self.list_files(repo_id):
            if any(fnmatch.fnmatchcase(name, f"{folder}/{pattern}") for pattern in names):
                self.download(repo_id, name, local_dir)

    def read_columns(self, repo_id: str, path_in_repo: str, columns: Sequence[str]) -> pa.Table:
        with pq.ParquetFile(self.repo(repo_id) / path_in_repo) as parquet:
            return parquet.read(columns=[name for name in columns if name in parquet.schema_arrow.names])

    def input_revision(self, repo_id: str) -> str | None:
        return f"sha-of-{repo_id}-{len(self.commits)}"

    def history(self, repo_id: str) -> Path:
        """The repo's commit titles, one a line, beside the repos: shared by every double (and process) on `root`."""
        return self.root / ".history" / repo_id.replace("/", "__")

    def commit_titles(self, repo_id: str) -> list[str]:
        path = self.history(repo_id)
        return path.read_text().splitlines() if path.exists() else []

    def commit(
        self, repo_id: str, add: Mapping[str, Path], delete: Sequence[str], message: str, create_pr: bool = False
    ) -> str:
        if self.fail_commits:
            self.fail_commits -= 1
            raise ConnectionError("simulated Hub outage")
        refusal = self.refuse(message, create_pr) if self.refuse else None
        if refusal is not None:
            raise refusal
        self.create_repo(repo_id, private=False)
        if not create_pr:
            for name in delete:
                (self.repo(repo_id) / name).unlink()
            for name, path in add.items():
                target = self.repo(repo_id) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        self.commits.append(Commit(repo_id, sorted(add), list(delete), message, create_pr))
        if not create_pr:
            self.history(repo_id).parent.mkdir(parents=True, exist_ok=True)
            with self.history(repo_id).open("a") as history:
                history.write(message.splitlines()[0] + "\n")
        if self.fail_after_commit and message.startswith(self.fail_after_commit):
            self.fail_after_commit = None
            raise TimeoutError("simulated: the commit went through, but the answer never reached the client")
        return f"folder://{repo_id}/commit/{len(self.commits)}"
