"""Model folders with real shapes and random weights, for vLLM (`--load-format dummy`, or the tiny LLaVA's seeded
weights): the one builder the GPU bench, the test bed and the pinned test tier use.

    python -m tools.dummy_models KIND FOLDER     # KIND: qwen2_5_vl, qwen3_5, tiny_qwen3_5, tiny_llava

`build_model` writes a kind into a folder; `cached_model` returns a complete copy under a cache folder, named after a
hash of this package and the committed configs (editing either builds it anew), written into a sibling and renamed
into place so that parallel test processes never see half a model.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .llava import tiny_llava
from .qwen import QWEN35, qwen2_5_vl, qwen3_5, tiny_qwen3_5

KINDS: dict[str, Callable[[Path], None]] = {
    "qwen2_5_vl": qwen2_5_vl,
    "qwen3_5": qwen3_5,
    "tiny_qwen3_5": tiny_qwen3_5,
    "tiny_llava": tiny_llava,
}
COMPLETE_MARKER = ".complete"


def build_model(kind: str, folder: Path) -> Path:
    """Writes the model `kind` into `folder` (created if absent)."""
    if kind not in KINDS:
        raise ValueError(f"no model kind {kind!r}; the kinds are {sorted(KINDS)}")
    folder.mkdir(parents=True, exist_ok=True)
    KINDS[kind](folder)
    return folder


def sources_digest() -> str:
    """A hash of what the models are built from: this package's code and the committed Qwen3.5 files."""
    digest = hashlib.sha256()
    for path in [*sorted(Path(__file__).parent.glob("*.py")), *sorted(QWEN35.iterdir())]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def cached_model(kind: str, cache_dir: Path) -> Path:
    """The model `kind` under `cache_dir`, building it first unless a complete copy is there; a process that loses
    the race to build it keeps the winner's copy."""
    target = cache_dir / f"{kind.replace('_', '-')}-{sources_digest()}"
    if (target / COMPLETE_MARKER).exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache_dir))
    try:
        build_model(kind, staging)
        (staging / COMPLETE_MARKER).touch()
        staging.rename(target)
    except OSError:
        if not (target / COMPLETE_MARKER).exists():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    built = build_model(sys.argv[1], Path(sys.argv[2]))
    print(f"{built}: {sys.argv[1]}, {sum(p.stat().st_size for p in built.iterdir()) / 1e6:.1f} MB")
