"""A blank page sent when a page's failures have no witness: whether the servers answer anything at all.

A page whose retry budget is spent while nothing else was answered says nothing by itself: the page may be at
fault, or the servers may be down. Mid-run the pages still waiting tell them apart; at the tail of a run there are
none, so the fleet is asked one blank page of one token. A server that answers it works, and the failures are the
page's own; one that fails it too is down, and no page is struck for that.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import httpx
from PIL import Image

from ..facts import ModelFacts
from ..inputs.images import placeholder_part, prepare_image
from .chat import Retryable, RowFailed, chat_body, post_chat
from .routing import PageRouting

PROBE_SIDE = 64


def probe_body(facts: ModelFacts, model: str, sampling: Mapping[str, Any]) -> bytes:
    """The recipe's own request for a small white page, asking for a single token."""
    buffer = io.BytesIO()
    Image.new("RGB", (PROBE_SIDE, PROBE_SIDE), "white").save(buffer, format="PNG")
    image = prepare_image(buffer.getvalue(), facts.max_side, facts.max_pixels)
    body = chat_body(
        model, facts.build_content(placeholder_part()), {**sampling, "max_tokens": 1}, facts.request_extras
    )
    return image.json_with_image(body)


async def servers_answer(routing: PageRouting, client: httpx.AsyncClient, body: bytes) -> bool:
    """Whether a serving replica answers the probe; a refusal of it (400) is an answer too: the server judged it."""
    replica = await routing.pick()
    try:
        await post_chat(client, replica.url, body, replica.handle.headers)
    except Retryable:
        return False
    except RowFailed:
        return True
    return True
