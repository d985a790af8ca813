"""The thin layer between a run and the Hugging Face Hub.

Everything the core needs from the Hub is these five calls, so tests hand `run` a double that keeps a repo in a
folder, and the real network path stays a few lines of `huggingface_hub`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from .report import say

UPLOAD_ATTEMPTS = 5
UPLOAD_BACKOFF_S = 15.0
T = TypeVar("T")


class HubClient(Protocol):
    def create_repo(self, repo_id: str, private: bool) -> None: ...

    def list_files(self, repo_id: str) -> list[str]: ...

    def download(self, repo_id: str, path_in_repo: str, local_dir: Path) -> Path: ...

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


def with_retries(action: Callable[[], T], what: str, attempts: int = UPLOAD_ATTEMPTS) -> T:
    """Retries Hub calls with backoff: a network blip must not cost the results of a long job."""
    for attempt in range(1, attempts):
        try:
            return action()
        except Exception as exc:
            delay = UPLOAD_BACKOFF_S * 2 ** (attempt - 1)
            say(f"{what} failed ({type(exc).__name__}: {exc}); retrying in {delay:.0f} s")
            time.sleep(delay)
    return action()
