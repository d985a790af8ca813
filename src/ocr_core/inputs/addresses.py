"""What INPUT and OUTPUT name, settled before any retry: a local path that must exist, or a Hub dataset whose
failures are sorted into those a retry can heal (network, 5xx, rate limits) and those only a changed command can
(exit 2).

Without this, a mistyped folder was taken for a Hub id and retried for minutes before ending as an internal error.
The sorting is a pure function over the errors huggingface_hub and datasets raise, so it is tested without a Hub.
"""

from __future__ import annotations

import socket
from pathlib import Path

from datasets.data_files import EmptyDatasetError
from datasets.exceptions import DatasetNotFoundError
from huggingface_hub.errors import (
    GatedRepoError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from ..errors import CommandError

LOCAL_PREFIXES = (".", "/", "~")
SPLIT_MARKERS = ("Unknown split", "Bad split")
CONFIG_MARKERS = ("BuilderConfig", "Config name is missing")
CONNECTION_NEVER_MADE = (socket.gaierror, ConnectionRefusedError)
CONNECT_FAILURES = frozenset({"ConnectError", "ConnectionError", "NewConnectionError", "NameResolutionError"})
HTTP_CLIENTS = ("httpx", "requests", "urllib3")
TOKEN_HINT = "pass a token with read access (-s HF_TOKEN on HF Jobs, HF_TOKEN or --hf-token elsewhere)"


class InputMissing(CommandError, FileNotFoundError):
    """INPUT is a local path that does not exist."""


def check_local_input(name: str) -> None:
    """Refuses a local-looking INPUT that does not exist, before it can be taken for a Hub id."""
    if name.startswith(LOCAL_PREFIXES) and not Path(name).expanduser().exists():
        raise InputMissing(
            f"INPUT {name!r} does not exist here; check the path (a folder of images or PDFs, a PDF file, or a "
            "dataset folder), or give a Hub dataset id as namespace/name"
        )


def id_problem(exc: BaseException, role: str, name: str) -> str | None:
    """Why `name` (INPUT or OUTPUT) cannot name a Hub dataset at all; None when it can."""
    if isinstance(exc, OfflineModeIsEnabled):
        return f"{role} {name!r} is on the Hub, but HF_HUB_OFFLINE is set; unset it, or give a local folder"
    if isinstance(exc, HFValidationError):
        return (
            f"{role} {name!r} is neither a local path nor a valid Hub dataset id ({exc}); a Hub id is "
            "namespace/name, a local path starts with ./ or /"
        )
    return None


def unreachable_problem(exc: BaseException, role: str, name: str, in_a_job: bool) -> str | None:
    """Why a run's first call to the Hub failed when no connection could be made at all (refused, or the host name
    did not resolve); None for any other failure. Nothing has been reached yet, so minutes of retries would only
    delay the same answer; a failure after the Hub answered once is left to the retries. So is any in a job on HF
    Jobs (`in_a_job`), whose network is the platform's: there a failed lookup is a blip, not the user's to fix."""
    if in_a_job:
        return None
    unreachable = hub_unreachable(exc)
    if unreachable is None:
        return None
    local = "or give a local folder (a path starting with ./ or /)"
    return f"{role} {name!r} is a Hub dataset id, but {unreachable}, {local}"


def hub_unreachable(exc: BaseException) -> str | None:
    """Says that this machine cannot reach the Hub, and what to check, when `exc` is, or was raised from, a
    connection that could not be made at all; None for any other failure."""
    for link in exception_chain(exc):
        if isinstance(link, CONNECTION_NEVER_MADE) or (
            type(link).__name__ in CONNECT_FAILURES and type(link).__module__.startswith(HTTP_CLIENTS)
        ):
            from huggingface_hub import constants

            return (
                f"this machine cannot reach the Hub at {constants.ENDPOINT} ({type(link).__name__}: {link}); check "
                "its network (a proxy, or HF_ENDPOINT)"
            )
    return None


def exception_chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, outermost first."""
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    return chain


def output_problem(exc: BaseException, name: str) -> str | None:
    """Why OUTPUT `name` cannot be written as the command stands; None when a retry may heal it."""
    return id_problem(exc, "OUTPUT", name)


def input_problem(exc: BaseException, name: str) -> str | None:
    """Why INPUT `name` cannot be read as the command stands, with what would work; None when a retry may heal it."""
    named = id_problem(exc, "INPUT", name)
    if named is not None:
        return named
    if isinstance(exc, GatedRepoError):
        return f"INPUT {name!r} is gated: accept its terms on https://huggingface.co/datasets/{name}, then {TOKEN_HINT}"
    if isinstance(exc, EmptyDatasetError):
        return (
            f"INPUT {name!r} holds nothing to read ({exc}); give a folder of images or PDFs, a PDF file, a dataset "
            "folder, or a Hub dataset id"
        )
    if isinstance(exc, RevisionNotFoundError):
        return f"INPUT {name!r} has no such revision ({exc}); check --input-revision"
    if isinstance(exc, RepositoryNotFoundError | DatasetNotFoundError):
        return (
            f"INPUT {name!r}: no such dataset on the Hub, or it is private and this run has no token for it; "
            f"check the id, or {TOKEN_HINT}"
        )
    return split_or_config_problem(exc, name)


def split_or_config_problem(exc: BaseException, name: str) -> str | None:
    """datasets says a split or config does not exist only in a ValueError's words (which list the ones that do)."""
    if not isinstance(exc, ValueError):
        return None
    text = str(exc)
    if any(marker in text for marker in SPLIT_MARKERS):
        return f"INPUT {name!r}: {text} (pass --split)"
    if any(marker in text for marker in CONFIG_MARKERS):
        return f"INPUT {name!r}: {text} (pass --input-config)"
    return None


class InputError(CommandError, ValueError):
    """The input cannot be used as asked; the message says how to fix the command."""


class UsageError(CommandError, ValueError):
    """The command cannot work as written; the message says what to change."""
