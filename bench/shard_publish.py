"""Per-shard publishing at a million pages, with no engine: what one shard's publish costs, and what the Hub gets.

A synthetic input of --rows small page images (a `save_to_disk` folder) is split over --shards shards. Each shard
runs in its own process, as a job would: it writes its rows' results (about --text-chars characters each) to its
progress folder in parts of 32 rows, merged as the mirror would, then publishes its slice through the recipes'
own `publish` to a folder-backed Hub double. Each shard process reports its peak RSS and the peak disk of its
working folder (progress store plus the slice being written) next to the size of the slice it published. At the
end: the files and commits on the Hub, whether the union loads in input order, and the time from the last shard's
last page to a loadable dataset (its publish, since no step waits for the others).

Run: .testbed/venv/bin/python bench/shard_publish.py [--rows 1000000 --shards 8]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT, save

REPO = "bench/shards"
SCRIPT = "lighton-ocr3-saturate.py"
WORDS = [f"w{index:04d}" for index in range(5000)]
IMAGE_VARIANTS = 256


def build_input(folder: Path, rows: int) -> int:
    """`rows` pages of 16x16 noise PNGs (a few hundred bytes each) with a page_id; returns the folder's bytes."""
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable
    from PIL import Image

    rng = random.Random(0)
    variants = []
    for _ in range(IMAGE_VARIANTS):
        buffer = io.BytesIO()
        Image.frombytes("L", (16, 16), bytes(rng.randrange(256) for _ in range(256))).save(buffer, "PNG")
        variants.append(buffer.getvalue())
    images = pa.array(
        [{"bytes": variants[index % IMAGE_VARIANTS], "path": f"page-{index}.png"} for index in range(rows)],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
    )
    table = pa.table({"image": images, "page_id": pa.array(range(rows), pa.int64())})
    features = datasets.Features({"image": datasets.Image(), "page_id": datasets.Value("int64")})
    dataset = datasets.Dataset(InMemoryTable(table), info=datasets.DatasetInfo(features=features))
    dataset.save_to_disk(str(folder), max_shard_size="200MB")
    return folder_bytes(folder)


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.exists() else 0


def process_status(field: str) -> int:
    """A byte count from /proc/self/status. VmHWM is this process's peak RSS (ru_maxrss is not: Linux carries the
    parent's peak over fork and exec); RssAnon is its heap, without the pages of memory-mapped files (the input
    `datasets` maps), which the kernel can drop at any time."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


class DiskPeak:
    """Samples a folder's size and this process's heap every 50 ms from a thread; the peaks are what the shard
    needed at once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.peak = 0
        self.peak_anonymous = process_status("RssAnon")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stopping.wait(0.05):
            self.peak_anonymous = max(self.peak_anonymous, process_status("RssAnon"))
            try:
                self.peak = max(self.peak, folder_bytes(self.folder))
            except FileNotFoundError:
                continue

    def __enter__(self) -> DiskPeak:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()


class ShardJob:
    """One shard's job as its recipe settles it (prepare_job: arguments, lease, its slice of the input) against a
    Hub double that counts the bytes committed to it; the lease and locks go back when the phase ends."""

    def __init__(self, input_folder: Path, hub_folder: Path, work: Path, shard: int, shards: int) -> None:
        from ocr_core.internals import WORK_DIR_ENV, Launch, build_parser, command_plan, parse_arguments, prepare_job
        from tests.testbed.hub_double import FolderHub
        from tools.recipes import load_script

        class CountingHub(FolderHub):
            uploaded_bytes: int = 0

            def commit(self, repo_id, add, delete, message, create_pr=False):
                self.uploaded_bytes += sum(Path(path).stat().st_size for path in add.values())
                return super().commit(repo_id, add, delete, message, create_pr)

        self.script = load_script(SCRIPT)
        facts = self.script.FACTS
        argv = [str(input_folder), REPO, "--shard", f"{shard}/{shards}", "--server", "http://127.0.0.1:9"]
        settings = parse_arguments(build_parser(SCRIPT, facts, "saturate"), argv)
        os.environ[WORK_DIR_ENV] = str(work)
        plan = command_plan(settings, facts, "saturate")
        self.job = prepare_job(plan, facts, Launch(SCRIPT, "saturate", argv), CountingHub(hub_folder))

    def __enter__(self):
        return self.job

    def __exit__(self, *exc: object) -> None:
        from ocr_core.internals import release

        job = self.job
        release(job.destination, job.lease, job.locks, job.mirror)


def log_results(job, chars: int) -> dict:
    """The shard's run, as the driver and the mirror leave it: its rows' results in parts of 32, merged."""
    from ocr_core.internals import ResultLog, RowResult, compact

    folder, tag = job.destination.progress_dir, job.destination.slice_tag
    rng = random.Random(job.source.shard[0])
    words = " ".join(rng.choice(WORDS) for _ in range(400_000))
    log = ResultLog(folder, job.run_id, flush_rows=32)
    span = job.source.span
    for count, (index, row_id) in enumerate(zip(job.source.selected[span.start : span.stop], job.source.owned())):
        start = rng.randrange(len(words) - chars)
        error = "bad image: not a readable image" if index % 997 == 0 else None
        log.add(RowResult(index, row_id, text=None if error else words[start : start + chars], error=error))
        if (count + 1) % 1500 == 0:
            list(compact(folder, tag))
    log.flush()
    list(compact(folder, tag))
    return {"rows": len(job.source.owned()), "progress_store_bytes": folder_bytes(folder)}


def publish_slice_of(job) -> dict:
    """The shard's publish from its last page on, as `finish` runs it: its figures and what it cost."""
    from ocr_core.internals import Drive, publish, script_source

    work, hub, shard = job.destination.work_dir, job.destination.hub, job.source.shard
    store = folder_bytes(work)
    origin = script_source(ROOT / SCRIPT, None)
    with DiskPeak(work) as disk:
        last_page = time.monotonic()
        publish(job, Drive(), errors=0, truncated=0, cost=None, origin=origin)
        publish_s = time.monotonic() - last_page
    sliced = sum(
        (hub.root / REPO / name).stat().st_size
        for name in hub.list_files(REPO)
        if name.startswith(f"data/train-{shard[0]:05d}-of-{shard[1]:05d}-")
    )
    return {
        "publish_s": round(publish_s, 1),
        "slice_bytes": sliced,
        "peak_work_dir_bytes": disk.peak,
        "peak_publish_extra_bytes": max(0, disk.peak - store),
        "peak_disk_over_slice": round(max(0, disk.peak - store) / max(1, sliced), 2),
        "peak_rss_mib": round(process_status("VmHWM") / 1024**2),
        "peak_heap_rss_mib": round(disk.peak_anonymous / 1024**2),
        "commits": len(hub.commits),
        "uploaded_bytes": hub.uploaded_bytes,
    }


def run_shard(arguments: argparse.Namespace, folder: Path, shard: int) -> dict:
    """One shard as two processes of its own: its run (logging results), then its publish, so the publish's peak
    RSS is its own, not the progress store's."""
    work = folder / f"machine-{shard}"
    env = {**os.environ, "TMPDIR": str(work / "tmp")}
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    figures = {"shard": shard}
    for phase in ("run", "publish"):
        command = [sys.executable, __file__, "--one-shard", str(shard), "--phase", phase, "--folder", str(folder),
                   "--shards", str(arguments.shards), "--text-chars", str(arguments.text_chars)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"shard {shard} ({phase}) failed:\n{done.stderr[-3000:]}")
        figures.update(json.loads(done.stdout.strip().splitlines()[-1]))
    shutil.rmtree(work, ignore_errors=True)
    print(f"shard {shard}: {figures}", flush=True)
    return figures


def check_union(hub_folder: Path, rows: int, shards: int) -> dict:
    """The published union: its files in name order hold every page once, in input order; and it loads."""
    import datasets
    import pyarrow.parquet as pq

    repo = hub_folder / REPO
    files = sorted(path for path in (repo / "data").glob("*.parquet"))
    started = time.monotonic()
    page_ids = []
    for path in files:
        page_ids.extend(pq.read_table(path, columns=["page_id"])["page_id"].to_pylist())
    streamed = datasets.load_dataset(str(repo), split="train", streaming=True)
    first = next(iter(streamed))
    card = (repo / "README.md").read_text()
    return {
        "data_files": len(files),
        "hub_files": sum(1 for path in repo.rglob("*") if path.is_file()),
        "rows_in_input_order": page_ids == list(range(rows)),
        "first_row_loads": first["page_id"] == 0,
        "card_says_all_in": f"**{shards} of {shards} shards are in.**" in card,
        "check_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--text-chars", type=int, default=2000, help="characters of text per page")
    parser.add_argument("--one-shard", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=["run", "publish"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one_shard is not None:
        folder, shard = arguments.folder, arguments.one_shard
        with ShardJob(folder / "in", folder / "hub", folder / f"machine-{shard}", shard, arguments.shards) as job:
            figures = log_results(job, arguments.text_chars) if arguments.phase == "run" else publish_slice_of(job)
        print(json.dumps(figures))
        return
    folder = Path(tempfile.mkdtemp(prefix="shard-bench-", dir=ROOT / "out" if (ROOT / "out").is_dir() else None))
    try:
        started = time.monotonic()
        input_bytes = build_input(folder / "in", arguments.rows)
        print(f"input: {arguments.rows} rows, {input_bytes / 1e6:.0f} MB in {time.monotonic() - started:.0f} s")
        shards = [run_shard(arguments, folder, shard) for shard in range(arguments.shards)]
        union = check_union(folder / "hub", arguments.rows, arguments.shards)
        print(f"union: {union}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    measured = ("peak_rss_mib", "peak_heap_rss_mib", "peak_disk_over_slice", "publish_s")
    worst = {key: max(shard[key] for shard in shards) for key in measured}
    save(
        "shard-publish",
        {
            "rows": arguments.rows,
            "shards": arguments.shards,
            "text_chars": arguments.text_chars,
            "input_bytes": input_bytes,
            "targets": {"peak_disk_over_slice": 1.5, "peak_rss_mib": 2048},
            "worst": worst,
            "commits_total": sum(shard["commits"] for shard in shards),
            "last_page_to_loadable_s": shards[-1]["publish_s"],
            "union": union,
            "per_shard": shards,
        },
    )


if __name__ == "__main__":
    main()
