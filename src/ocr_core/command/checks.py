"""The checks on a parsed command line: a combination that cannot work exits 2 with its fix, as argparse does."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import replace
from urllib.parse import urlsplit

from ..errors import CommandError
from ..planning.serve_flags import user_flags
from ..settings import Settings
from .core_wheel import take_core_wheel
from .jobs_request import FanoutRequest, take_fanout_request

MIN_UPLOAD_EVERY_S = 1.0


COUNT_FLOORS = {
    "--max-tokens": 1,
    "--data-parallel-size": 1,
    "--api-server-count": 1,
    "--replicas": 1,
    "--max-restarts": 0,
}


CONFIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


RESERVED_CONFIGS = frozenset({"data", "default", "readme.md"})


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str]) -> Settings:
    """The checked, typed settings of a command line; a wrong combination exits 2 with the fix, as argparse does."""
    return parse_command(parser, argv)[0]


def parse_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[Settings, FanoutRequest | None, bool]:
    """The settings, the launcher's request when the command fans out over HF Jobs (`--jobs N`), and whether it
    asks only for the plan (`--plan`, which is no setting: it changes nothing the run would do)."""
    args = parser.parse_args(argv)
    plan_only = vars(args).pop("plan")
    request = take_fanout_request(parser, args)
    if plan_only and request is not None:
        parser.error("--plan shows this machine's run; for --jobs N, --dry-run prints each job's command instead")
    wheel = take_core_wheel(parser, args, in_job=request is None)
    if request is not None:
        request = replace(request, core_wheel=wheel)
    return checked_settings(parser, args), request, plan_only


def checked_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Settings:
    if args.max_tokens is not None and args.max_tokens >= args.max_model_len:
        parser.error(
            f"--max-tokens {args.max_tokens} must be below --max-model-len {args.max_model_len} "
            "(the prompt's image tokens need room too)"
        )
    if getattr(args, "max_inflight", None) is not None and args.max_inflight < 1:
        parser.error("--max-inflight must be at least 1")
    if getattr(args, "replicas", None) and args.replicas > 1 and (getattr(args, "data_parallel_size", 1) or 1) > 1:
        parser.error("--replicas and --data-parallel-size exclude each other: pass one of them")
    if getattr(args, "batch_size", 1) < 1:
        parser.error("--batch-size must be at least 1")
    if args.pdf_longest_edge is not None and args.pdf_longest_edge < 16:
        parser.error("--pdf-longest-edge must be at least 16 pixels")
    if vars(args).pop("finalize"):
        parser.error(
            "--finalize is no longer needed: each --shard I/N publishes its own rows when it finishes, and "
            "load_dataset returns every finished shard in input order; rerun an unfinished shard with its own --shard"
        )
    if args.canary_pages < 1:
        parser.error("--canary-pages must be at least 1 (--no-canary turns the canary off)")
    if not 0.0 <= args.max_error_rate <= 1.0:
        parser.error("--max-error-rate must be between 0 and 1 (1.0 turns the check off)")
    if args.price_per_hour is not None and args.price_per_hour < 0:
        parser.error("--price-per-hour must be 0 or more")
    if getattr(args, "retry_budget", 1.0) <= 0:
        parser.error("--retry-budget must be more than 0 seconds")
    check_counts(parser, args)
    if getattr(args, "server", None) and (problem := server_address_problem(args.server)) is not None:
        parser.error(problem)
    if args.config is not None and (problem := config_name_problem(args.config)):
        parser.error(problem)
    try:
        user_flags(args.extra_serve_args)
    except CommandError as exc:
        parser.error(str(exc))
    args.take_over_jobs = tuple(args.take_over_jobs)
    return Settings.from_namespace(args)


def check_counts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Counts that would silently drop rows (a slice `[:-1]`) or flood the Hub with commits are command errors."""
    if args.max_samples is not None and args.max_samples < 1:
        parser.error(f"--max-samples must be at least 1 (got {args.max_samples}); leave it out to process every row")
    for flag, least in COUNT_FLOORS.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
        if value is not None and value < least:
            parser.error(f"{flag} must be at least {least} (got {value})")
    if args.upload_every < MIN_UPLOAD_EVERY_S:
        parser.error(
            f"--upload-every must be at least {MIN_UPLOAD_EVERY_S:.0f} second (got {args.upload_every:g}): each upload "
            "is a commit, and the Hub rate-limits a repo that commits without pause (default: 300)"
        )


def server_address_problem(servers: str) -> str | None:
    """Why a --server URL names no server: no http(s) scheme (`gpu-box` reads as a path, `gpu-box:8000` as a scheme,
    and either has no host), or a port there cannot be (past 65535), before anything waits on or binds it."""
    for url in (part.strip() for part in servers.split(",")):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            host = url.split("://")[-1].strip("/") or "HOST"
            return (
                f"--server {url} is not a URL a server answers at: give its scheme and port, such as "
                f"--server http://{host}{'' if ':' in host else ':8000'}"
            )
        try:
            if urlsplit(url).port != 0:
                continue
        except ValueError:
            pass
        return f"--server {url} names no valid port (ports go from 1 to 65535): pass one such as :8000"
    return None


def config_name_problem(name: str) -> str | None:
    """Why `--config NAME` would share or break the output's layout: `data` is where the default config's files
    live, `default` is the default config's progress folder, and a name with a slash, a leading dot or the card's
    name would land in (or over) files of the layout itself."""
    if CONFIG_NAME.fullmatch(name) and name.lower() not in RESERVED_CONFIGS:
        return None
    return (
        f"--config {name!r} cannot be used: a config name is letters, digits, '-', '_' and '.' (not first), and not "
        f"one of {', '.join(sorted(RESERVED_CONFIGS))} (the output's own layout uses those); for example --config "
        "lighton or leave --config out for the default config"
    )
