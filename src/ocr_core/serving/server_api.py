"""What a vLLM server's address answers, asked at its OpenAI API root: /health, and /v1/models with the names it
serves the model under; and the error a server that cannot be found,
started or kept alive raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

import httpx

from ..errors import CommandError
from ..planning.serve_flags import flag_value


class ServerError(CommandError, RuntimeError):
    """The server could not be found, started or kept alive; the message says what to do."""


def url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def health_status(url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0) -> int | None:
    """What /health answers, or None when nothing does (refused, timed out)."""
    try:
        return httpx.get(f"{url}/health", headers=headers, timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def healthy(url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0) -> bool:
    return health_status(url, headers, timeout) == 200


def root_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class NotAVllmRoot(ServerError):
    """Something answers at the URL, but not as the root of a vLLM OpenAI server does: no wait can fix it."""

    def __init__(self, url: str, path: str) -> None:
        root = root_url(url)
        instead = (
            f"pass --server {root} (without {url[len(root) :]})"
            if root != url
            else "pass the address vLLM listens on, such as --server http://HOST:8000"
        )
        super().__init__(
            f"{url}{path} answered 404: {url} is not the root of a vLLM server (vLLM answers /health and /v1/models "
            f"at its root). {instead}"
        )


def list_models(url: str, headers: Mapping[str, str] | None = None) -> list[dict]:
    """The entries of /v1/models: `id` (the name requests use), `root` (what was loaded), `max_model_len`."""
    response = httpx.get(f"{url}/v1/models", headers=headers, timeout=30.0)
    if response.status_code == 404:
        raise NotAVllmRoot(url, "/v1/models")
    if response.status_code in (401, 403):
        raise ServerError(
            f"{url} refused the API key ({response.status_code}); set VLLM_API_KEY (or HF_TOKEN for an HF Jobs "
            "endpoint) to a key it accepts"
        )
    response.raise_for_status()
    return [entry for entry in response.json().get("data", []) if isinstance(entry, dict) and "id" in entry]


def served_names(argv: Sequence[str]) -> list[str]:
    """The names given to `--served-model-name` in a serve command (the last use wins, as in vLLM)."""
    names = flag_value(argv, "--served-model-name")
    return names.split() if names else []


def matching_model(entries: Sequence[dict], model: str, names: Sequence[str]) -> dict | None:
    """The entry that serves `model` (by name or by what it loaded), or one served under the recipe's own name."""
    for entry in entries:
        if model in (entry["id"], entry.get("root")):
            return entry
    return next((entry for entry in entries if entry["id"] in names), None)
