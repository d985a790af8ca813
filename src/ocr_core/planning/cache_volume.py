"""Where an --engine-cache lives inside a job: a folder given as is, or an HF bucket that the job command mounts.

The job command (command/job_commands.py, fanout/) writes the mount and the engine cache (serving/) looks for the
bucket there, so the rule is stated once, below both.
"""

from __future__ import annotations

from collections.abc import Sequence

BUCKET_SCHEME = "hf://buckets/"
# Where a job mounts an --engine-cache bucket; the run opens the cache there.
ENGINE_CACHE_MOUNT = "/engine-cache"
ENGINE_CACHE_FLAG = "--engine-cache"


def bucket_mounts(arguments: Sequence[str]) -> list[str]:
    """The `-v` specs a job needs for the arguments: an --engine-cache in a bucket is mounted read-write at
    ENGINE_CACHE_MOUNT, where the job's run looks for it (serving/engine_cache.py)."""
    location = ""
    for arg, following in zip(arguments, [*arguments[1:], ""]):
        if arg == ENGINE_CACHE_FLAG:
            location = following
        elif arg.startswith(f"{ENGINE_CACHE_FLAG}="):
            location = arg.partition("=")[2]
    return [f"{location.rstrip('/')}:{ENGINE_CACHE_MOUNT}"] if location.startswith(BUCKET_SCHEME) else []
