"""The fixed folder a run's engines compile in, WORK_ROOT/<key>, held by one run of the key on a machine at a time.

vLLM's AOT-compiled function names the folder it was compiled in (on 2026-12-02, vLLM 0.26.0 on an H200, an archive
unpacked under another TMPDIR killed every engine core with FileNotFoundError), so every job unpacks at the same path
and a job loads only an archive built there. Two runs of one key on one machine (two datasets on one GPU box) cannot
share that folder: the first holds it by an exclusive lock for its life, a second works in a folder of its own, and
only the holder writes the key's archive (engine_cache.py), since one built elsewhere is one no later job loads.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path


def claimed_folder(base: Path, name: str) -> tuple[Path, int | None]:
    """The run's private folder and the claim's descriptor: `base/<name>` held by an exclusive lock, emptied first
    (the volume's archive, not what an earlier run left here, is what a run starts from); or, while another run holds
    it, a new folder under `base` and no claim. Raises OSError when `base` cannot be written."""
    base.mkdir(parents=True, exist_ok=True)
    claim = os.open(base / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(claim)
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base)), None
    folder = base / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder, claim
