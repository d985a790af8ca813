"""One page, one chat completion: the request body and what each kind of failure means for the row.

Transport errors, 429 and 5xx say nothing about the page, so they are retried; a 400 says the page itself was
refused, so that row fails at once; 401/403/404 say the whole job is misconfigured, so it stops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

ERROR_TEXT_LIMIT = 500
JSON_HEADERS = {"Content-Type": "application/json"}


class Retryable(Exception):
    """Worth another attempt after a pause; `engine_dead` asks for a health check first."""

    def __init__(self, reason: str, engine_dead: bool = False) -> None:
        super().__init__(reason)
        self.engine_dead = engine_dead


class RowFailed(Exception):
    """This page cannot succeed; the message is its error column."""


class JobFailed(Exception):
    """Nothing can succeed until the command changes; the message says how."""


def chat_body(model: str, content: list[dict], sampling: Mapping[str, Any], extras: Mapping[str, Any]) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": content}], **sampling, **extras}


def error_text(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:ERROR_TEXT_LIMIT]
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    message = error.get("message", error) if isinstance(error, dict) else error
    return str(message)[:ERROR_TEXT_LIMIT]


async def post_chat(client: httpx.AsyncClient, url: str, body: bytes, headers: Mapping[str, str] | None = None) -> dict:
    """Posts a JSON body that is already bytes (see PreparedImage.json_with_image)."""
    try:
        response = await client.post(
            f"{url}/v1/chat/completions", content=body, headers={**(headers or {}), **JSON_HEADERS}
        )
    except httpx.TimeoutException as exc:
        raise Retryable(f"request timed out ({type(exc).__name__}); raise --request-timeout for long pages") from exc
    except httpx.TransportError as exc:
        raise Retryable(f"connection failed: {type(exc).__name__}: {exc}", engine_dead=True) from exc
    status = response.status_code
    if status == 200:
        return response.json()
    reason = error_text(response)
    if status == 429 or status >= 500:
        raise Retryable(f"server answered {status}: {reason}", engine_dead=status >= 500)
    if status in (401, 403):
        raise JobFailed(f"server refused the API key ({status}); set VLLM_API_KEY, or HF_TOKEN for an HF Jobs endpoint")
    if status == 404:
        raise JobFailed(f"server answered 404: {reason} (check --model and --server)")
    raise RowFailed(f"server rejected the page ({status}): {reason}")
