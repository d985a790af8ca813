"""The thin layer between a run and the Hugging Face Hub.

Everything the core needs from the Hub is these few calls, so tests hand `run` a double that keeps a repo in a
folder, and the real network path stays a few lines of `huggingface_hub`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from ..console import say
from ..errors import CommandError

UPLOAD_ATTEMPTS = 5
UPLOAD_BACKOFF_S = 15.0
DOWNLOAD_WORKERS = 8
REFUSALS = {401: "refused the token", 403: "refused access", 404: "has no such repo or file"}
T = TypeVar("T")


class HubRefused(CommandError, RuntimeError):
    """The Hub said no (401/403/404): retrying cannot help, the token or the repo id must change."""


class HubClient(Protocol):
    def create_repo(self, repo_id: str, private: bool) -> None: ...

    def list_files(self, repo_id: str) -> list[str]: ...

    def download(self, repo_id: str, path_in_repo: str, local_dir: Path) -> Path: ...

    def download_parts(self, repo_id: str, folder: str, local_dir: Path, names: Sequence[str]) -> None: ...

    def read_columns(self, repo_id: str, path_in_repo: str, columns: Sequence[str]) -> pa.Table: ...

    def input_revision(self, repo_id: str) -> str | None: ...

    def commit_titles(self, repo_id: str) -> list[str]: ...

    def commit(
        self,
        repo_id: str,
        add: Mapping[str, Path],
        delete: Sequence[str],
        message: str,
        create_pr: bool = False,
    ) -> str: ...


class HfHub:
    """HubClient over `huggingface_hub.HfApi`, dataset repos only."""

    def __init__(self, token: str | None) -> None:
        from huggingface_hub import HfApi

        self.api = HfApi(token=token)

    def create_repo(self, repo_id: str, private: bool) -> None:
        self.api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)

    def list_files(self, repo_id: str) -> list[str]:
        from huggingface_hub.errors import RepositoryNotFoundError

        try:
            return self.api.list_repo_files(repo_id, repo_type="dataset")
        except RepositoryNotFoundError:
            return []

    def download(self, repo_id: str, path_in_repo: str, local_dir: Path) -> Path:
        return Path(self.api.hf_hub_download(repo_id, path_in_repo, repo_type="dataset", local_dir=str(local_dir)))

    def download_parts(self, repo_id: str, folder: str, local_dir: Path, names: Sequence[str]) -> None:
        """The files under `folder` whose names match the glob patterns `names`, fetched in parallel; files already
        here and unchanged are not fetched again."""
        self.api.snapshot_download(
            repo_id,
            repo_type="dataset",
            allow_patterns=[f"{folder}/{name}" for name in names],
            local_dir=str(local_dir),
            max_workers=DOWNLOAD_WORKERS,
        )

    def read_columns(self, repo_id: str, path_in_repo: str, columns: Sequence[str]) -> pa.Table:
        """These columns of a parquet file in the repo (those it has), read by byte ranges: its footer, then only
        their column chunks, so a reader of a few small columns never fetches the file's text. A fresh file
        system each time: huggingface_hub keeps one per token, whose folder listing, filled at its first read, would
        call every file published since "not found" without asking the Hub (the watch reads new files each poll)."""
        from huggingface_hub import HfFileSystem

        remote = HfFileSystem(token=self.api.token, endpoint=self.api.endpoint, skip_instance_cache=True)
        path = f"datasets/{repo_id}/{path_in_repo}"
        with remote.open(path, "rb", cache_type="none") as handle, pq.ParquetFile(handle) as parquet:
            return parquet.read(columns=[name for name in columns if name in parquet.schema_arrow.names])

    def input_revision(self, repo_id: str) -> str | None:
        """The commit a Hub dataset's main branch points at now, so a run reads one fixed version of it."""
        return self.api.dataset_info(repo_id).sha

    def commit_titles(self, repo_id: str) -> list[str]:
        """The titles of the main branch's commits, oldest first: the order the Hub took them in."""
        return [commit.title for commit in reversed(self.api.list_repo_commits(repo_id, repo_type="dataset"))]

    def commit(
        self,
        repo_id: str,
        add: Mapping[str, Path],
        delete: Sequence[str],
        message: str,
        create_pr: bool = False,
    ) -> str:
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(path)) for name, path in add.items()]
        operations += [CommitOperationDelete(path_in_repo=name) for name in delete]
        info = self.api.create_commit(
            repo_id, operations, commit_message=message, repo_type="dataset", create_pr=create_pr
        )
        return info.pr_url or info.commit_url


def refusal(exc: Exception) -> int | None:
    """The status of a Hub answer that no retry can change, if `exc` carries one.

    A missing file (EntryNotFoundError, also a 404) is not one: a retry recomputes what to delete.
    """
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status not in REFUSALS or type(exc).__name__ == "EntryNotFoundError":
        return None
    return status


def with_retries(
    action: Callable[[], T],
    what: str,
    attempts: int = UPLOAD_ATTEMPTS,
    permanent: Callable[[Exception], str | None] | None = None,
) -> T:
    """Retries Hub calls with backoff: a network blip must not cost the results of a long job.

    A refusal (401/403/404) is raised at once as HubRefused: waiting minutes to hear it again helps nobody. So is
    any failure `permanent` explains (it returns the fix), in its words.
    """
    attempt = 1
    while True:
        try:
            return action()
        except Exception as exc:
            reason = permanent(exc) if permanent is not None else None
            if reason is not None:
                raise HubRefused(reason) from exc
            status = refusal(exc)
            if status is not None:
                raise HubRefused(
                    f"{what}: the Hub {REFUSALS[status]} ({status}: {exc}). Check that HF_TOKEN (or --hf-token) is "
                    "set to a token with write access to the output repo, and the repo ids"
                ) from exc
            if attempt >= attempts:
                raise
            delay = UPLOAD_BACKOFF_S * 2 ** (attempt - 1)
            say(f"{what} failed ({type(exc).__name__}: {exc}); retrying in {delay:.0f} s")
            time.sleep(delay)
            attempt += 1
