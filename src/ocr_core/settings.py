"""Every choice a run's command line made, as one typed, frozen record built once in `main`.

The pump, the offline runner, the server handle and the answer judge read the same record, so a setting cannot
mean one thing in one shape and another in the other, and nothing downstream can change it halfway through a run.
Options a model's `add_arguments` hook adds are kept apart in `model_options`: they are what its `parse` hook
reads, and they are part of the results' fingerprint.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class Settings:
    """The parsed command line; fields of the other shape are None (offline has no server, a server no batch)."""

    input: str
    output: str
    image_column: str
    split: str
    input_config: str | None
    input_revision: str | None
    id_column: str | None
    max_samples: int | None
    shuffle: bool
    seed: int
    shard: tuple[int, int] | None
    pdf_longest_edge: int | None
    output_column: str
    error_column: str
    columns: tuple[str, ...] | None
    null_failed_text: bool
    config: str | None
    create_pr: bool
    private: bool
    overwrite: bool
    take_over: bool
    retry_errors: bool
    max_error_rate: float
    canary_pages: int
    no_canary: bool
    hf_token: str | None = field(repr=False)
    upload_every: float
    model: str
    max_model_len: int
    max_tokens: int | None
    temperature: float
    ignore_eos: bool
    extra_serve_args: str
    verbose: bool
    price_per_hour: float | None
    engine_cache: str | None = None
    batch_size: int | None = None
    server: str | None = None
    api_key: str | None = field(default=None, repr=False)
    max_inflight: int | None = None
    request_timeout: float | None = None
    retry_budget: float | None = None
    startup_timeout: float | None = None
    max_restarts: int | None = None
    stall_timeout: float | None = None
    data_parallel_size: int | None = None
    api_server_count: int | None = None
    replicas: int | None = None
    take_over_jobs: tuple[str, ...] = ()
    model_options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_namespace(cls, parsed: argparse.Namespace) -> Settings:
        """The record of what argparse parsed; a name that is not a field is one of the model's own options."""
        known = {item.name for item in fields(cls)}
        values = vars(parsed)
        own = {name: value for name, value in values.items() if name not in known}
        return cls(**{name: value for name, value in values.items() if name in known}, model_options=own)
