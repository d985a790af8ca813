"""A server's Prometheus /metrics read as numbers: samples summed over their label sets, and the KV cache's size
in full-length sequences.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence


def parse_metrics(text: str, names: Sequence[str] | None = None) -> dict[str, float]:
    """Sums each named (or every) Prometheus sample over its label sets (one per model, API server or engine)."""
    totals: dict[str, float] = {}
    wanted = set(names) if names is not None else None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        if wanted is None or name in wanted:
            try:
                totals[name] = totals.get(name, 0.0) + float(value)
            except ValueError:
                continue
    return totals


def kv_capacity(text: str, max_model_len: int) -> int | None:
    """How many full-length sequences the engines' KV cache holds, from vllm:cache_config_info's labels.

    One engine line per data-parallel rank; None when the server does not publish its cache size.
    """
    tokens = 0
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            with contextlib.suppress(KeyError, ValueError):
                tokens += int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    return tokens // max_model_len if tokens else None
