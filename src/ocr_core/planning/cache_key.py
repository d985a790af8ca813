"""The engine cache's key: what compiled artifacts are valid for, and the archive name it gives them.

vLLM's, torch's and Triton's compiled code is valid only for the versions that built it, the GPU it was built for, the
model and the whole serve flag set; a run loads only an archive whose key equals its own (engine_cache.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

from ..redaction import redact

KEY_DIGEST_CHARS = 16


@dataclass(frozen=True)
class CacheKey:
    """What compiled artifacts are valid for; the archive's name is a readable prefix and a digest of all of it.
    `flags` are the serve flags with any secret masked (redaction.redact), so the key can be shown and stored."""

    vllm: str
    torch: str | None
    triton: str | None
    gpu: str
    model: str
    flags: tuple[str, ...]

    @property
    def name(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        readable = "-".join(slug(part) for part in (f"vllm{self.vllm}", self.gpu, PurePosixPath(self.model).name))
        return f"{readable[:80]}-{digest[:KEY_DIGEST_CHARS]}"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "x"


def make_key(
    versions: Mapping[str, str | None], gpus: Sequence[str], model: str, flags: Sequence[str]
) -> CacheKey | None:
    """The key of a run: `versions` of vllm, torch and triton where the engine runs (planning/installed.py), the GPUs
    it sees (none: CPU). None when the vLLM version is unknown: no cached artifact can then be trusted."""
    vllm = versions.get("vllm")
    if not vllm:
        return None
    return CacheKey(
        vllm=vllm,
        torch=versions.get("torch"),
        triton=versions.get("triton"),
        gpu=" + ".join(sorted(set(gpus))) or "cpu",
        model=model,
        flags=tuple(redact(flag) for flag in flags),
    )
