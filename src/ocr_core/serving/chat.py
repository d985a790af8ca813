"""One page, one chat completion: the request body and what each kind of failure means for the row.

Transport errors, timeouts, 408, 425, 429 and 5xx say nothing about the page, so they are retried (after the pause
the server asks for in Retry-After, if it names one); a 400 says the page itself was refused, so that row fails at
once; 401/403/404 say the whole job is misconfigured, so it stops. A 200 the driver cannot read fails its row. A
server that refuses the connection, cannot be reached within the connect timeout or answers 5xx may be dead: its
replica is looked at (a health check) before it gets pages again.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, NamedTuple

import httpx

from ..errors import ERROR_TEXT_LIMIT, JobFailed, internal_error

JSON_HEADERS = {"Content-Type": "application/json"}
TRANSIENT_STATUSES = (408, 425, 429)
RETRY_AFTER_CAP_S = 600.0


class Retryable(Exception):
    """Worth another attempt after a pause.

    `engine_dead` asks for a health check first; `stalled` says the engine stopped making progress; `retry_after`
    is the pause the server asked for, in seconds.
    """

    def __init__(
        self, reason: str, engine_dead: bool = False, *, stalled: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(reason)
        self.engine_dead = engine_dead
        self.stalled = stalled
        self.retry_after = retry_after


class RowFailed(Exception):
    """This page cannot succeed; the message is its error column."""


class Answer(NamedTuple):
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


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


def retry_after(response: httpx.Response) -> float | None:
    """The pause a 429 or 503 asks for (seconds or an HTTP date), bounded; None when absent or unreadable."""
    value = response.headers.get("Retry-After", "").strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    return min(max(0.0, seconds), RETRY_AFTER_CAP_S)


def read_answer(payload: Any) -> Answer:
    """The first choice of a chat completion; raises on any other shape (KeyError, TypeError, IndexError)."""
    choice = payload["choices"][0]
    usage = payload.get("usage") or {}
    text = choice["message"].get("content") or ""
    if not isinstance(text, str):
        raise TypeError(f"message content is {type(text).__name__}, not text")
    return Answer(
        text,
        choice.get("finish_reason"),
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )


async def post_chat(
    client: httpx.AsyncClient, url: str, body: bytes, headers: Mapping[str, str] | None = None
) -> Answer:
    """Posts a JSON body that is already bytes (see PreparedImage.json_with_image)."""
    try:
        response = await client.post(
            f"{url}/v1/chat/completions", content=body, headers={**(headers or {}), **JSON_HEADERS}
        )
    except httpx.ConnectTimeout as exc:
        raise Retryable(f"could not connect within the connect timeout: {exc}", engine_dead=True) from exc
    except httpx.TimeoutException as exc:
        raise Retryable(f"request timed out ({type(exc).__name__}); raise --request-timeout for long pages") from exc
    except httpx.TransportError as exc:
        raise Retryable(f"connection failed: {type(exc).__name__}: {exc}", engine_dead=True) from exc
    status = response.status_code
    if status == 200:
        try:
            return read_answer(response.json())
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise RowFailed(internal_error("reading the answer", exc)) from exc
    reason = error_text(response)
    if status in TRANSIENT_STATUSES or status >= 500:
        raise Retryable(
            f"server answered {status}: {reason}", engine_dead=status >= 500, retry_after=retry_after(response)
        )
    if status in (401, 403):
        raise JobFailed(f"server refused the API key ({status}); set VLLM_API_KEY, or HF_TOKEN for an HF Jobs endpoint")
    if status == 404:
        raise JobFailed(f"server answered 404: {reason} (check --model and --server)")
    raise RowFailed(f"server rejected the page ({status}): {reason}")
