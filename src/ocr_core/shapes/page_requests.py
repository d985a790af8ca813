"""One page's request as the pump sends it, the streak of failures behind it and its retry pause."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..inputs.images import PreparedImage
from ..serving.chat import Answer, Retryable
from ..serving.replica import Replica

BACKOFF_BASE_S = 1.0


BACKOFF_CAP_S = 60.0


BACKOFF_MAX_EXPONENT = 16


@dataclass(frozen=True)
class PageRequest:
    image: PreparedImage
    body: dict
    encoded: bytes


@dataclass(frozen=True)
class Streak:
    """Since when a page keeps failing, and the fleet's restarts and answers then: a restart gives the page a
    fresh budget; answers meanwhile say the servers work and the page does not."""

    since: float
    restarts: int
    answered: int


@dataclass
class Sent:
    """One request's end: the replica and generation it went to, and its answer or the retryable failure."""

    replica: Replica
    generation: int
    answer: Answer | None = None
    retry: Retryable | None = None


def retry_delay(attempt: int, retry_after: float | None = None) -> float:
    """Exponential with jitter, so a restarted server is not hit by every page at the same instant.

    A server that names its pause (Retry-After) gets at least that, plus the same jitter.
    """
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(attempt - 1, BACKOFF_MAX_EXPONENT))
    if retry_after is not None:
        return retry_after + random.uniform(0, ceiling / 2)
    return ceiling / 2 + random.uniform(0, ceiling / 2)
