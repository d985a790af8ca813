"""The progress store at a million pages, with no engine: how many files reach the Hub, and how fast a rerun starts.

A run is simulated as the driver and the mirror would do it: results are logged in parts of --rows-per-part rows,
and every --cycle-rows rows (5 minutes at 5 pages/s by default) the mirror merges what piled up and commits to a
folder-backed Hub double. Then a rerun on a fresh machine fetches the progress from the double and counts what is
done, which is the part of start-up that grows with the dataset.

Run: .testbed/venv/bin/python bench/progress_store.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import tempfile
import time
from pathlib import Path

from common import ROOT, save

from ocr_core.internals import (
    Destination,
    Lease,
    ProgressMirror,
    ResultLog,
    RowResult,
    finished_ids,
    part_files,
    read_results,
)
from tests.testbed.hub_double import FolderHub

REPO = "bench/progress"
WORDS = [f"w{index:04d}" for index in range(5000)]


class CountingHub(FolderHub):
    """The folder double, counting the bytes every commit uploads (merging rewrites rows: this says how often)."""

    uploaded_bytes: int = 0

    def commit(self, repo_id, add, delete, message, create_pr=False):
        self.uploaded_bytes += sum(Path(path).stat().st_size for path in add.values())
        return super().commit(repo_id, add, delete, message, create_pr)


def corpus(rng: random.Random, chars: int) -> str:
    """Random words; every page is a slice at its own offset, so no two pages share a text (as in real OCR)."""
    return " ".join(rng.choice(WORDS) for _ in range(chars // 6))


def simulate_run(hub: CountingHub, work: Path, rows: int, rows_per_part: int, cycle_rows: int, chars: int) -> dict:
    """Writes `rows` results as a run would; returns the figures of the Hub side."""
    destination = Destination(REPO, "train", None, hub, work_dir=work)
    mirror = ProgressMirror(destination, 300.0, {"bench": True}, Lease.new("bench", "all", 900.0))
    log = ResultLog(destination.progress_dir, "20261130T000000Z-bench0", flush_rows=rows_per_part)
    rng = random.Random(0)
    words = corpus(rng, 4_000_000)
    started = time.monotonic()
    peak_files = 0
    for index in range(rows):
        error = "bad image: not a readable image" if index % 997 == 0 else None
        start = rng.randrange(len(words) - chars)
        text = None if error else words[start : start + chars]
        log.add(RowResult(index, f"train-{index}", text=text, error=error))
        if (index + 1) % cycle_rows == 0:
            mirror.compact()
            mirror.upload()
            peak_files = max(peak_files, len(progress_files(hub)))
    log.flush()
    mirror.compact()
    mirror.upload()
    written_s = time.monotonic() - started
    uploaded = sum(path.stat().st_size for path in part_files(destination.progress_dir))
    return {
        "write_and_mirror_s": round(written_s, 1),
        "hub_files_at_end": len(progress_files(hub)),
        "hub_files_peak": max(peak_files, len(progress_files(hub))),
        "local_files_at_end": len(part_files(destination.progress_dir)),
        "hub_commits": len(hub.commits),
        "store_bytes": uploaded,
        "uploaded_bytes": hub.uploaded_bytes,
        "upload_amplification": round(hub.uploaded_bytes / max(1, uploaded), 2),
    }


def progress_files(hub: FolderHub) -> list[str]:
    return [name for name in hub.list_files(REPO) if name.endswith(".parquet")]


def resume(hub: CountingHub, work: Path, rows: int) -> dict:
    """A rerun on a fresh machine: fetch the progress, read which rows are done, count what is left."""
    destination = Destination(REPO, "train", None, hub, work_dir=work)
    started = time.monotonic()
    fetched = destination.pull_progress()
    pulled = time.monotonic()
    done = finished_ids(read_results(destination.progress_dir, ["error"]), retry_errors=False)
    read = time.monotonic()
    todo = sum(f"train-{index}" not in done for index in range(rows))
    finished = time.monotonic()
    return {
        "files_fetched": fetched,
        "fetch_s": round(pulled - started, 2),
        "read_done_s": round(read - pulled, 2),
        "count_todo_s": round(finished - read, 2),
        "resume_start_s": round(finished - started, 2),
        "rows_done": len(done),
        "rows_todo": todo,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rows-per-part", type=int, default=32, help="rows per part (the driver flushes 16-64)")
    parser.add_argument("--cycle-rows", type=int, default=1500, help="rows between uploads (300 s at 5 pages/s)")
    parser.add_argument("--text-chars", type=int, default=2000, help="characters of text per page")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="progress-bench-", dir=ROOT / "out" if (ROOT / "out").is_dir() else None))
    try:
        hub = CountingHub(folder / "hub")
        hub.create_repo(REPO, private=False)
        machine = folder / "machine-1"
        written = simulate_run(hub, machine, args.rows, args.rows_per_part, args.cycle_rows, args.text_chars)
        print(f"write: {written}")
        resumed = resume(hub, folder / "machine-2", args.rows)
        print(f"resume: {resumed}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    parts_without_merging = -(-args.rows // args.rows_per_part)
    save(
        "progress-store",
        {
            "rows": args.rows,
            "rows_per_part": args.rows_per_part,
            "cycle_rows": args.cycle_rows,
            "text_chars": args.text_chars,
            "parts_without_merging": parts_without_merging,
            "targets": {"hub_files_at_end": 200, "resume_start_s": 60},
            **written,
            **resumed,
        },
    )


if __name__ == "__main__":
    main()
