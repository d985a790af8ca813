"""py-spy on the busiest engine core and API server of an arm, once it serves (issue 41: a bound is named by the
profile of the saturated process, not guessed).

monitor.py starts `py-spy record` on each when the engines have run requests for `--py-spy-at` seconds
(default 60), for `--py-spy-s` seconds (default 20), when bench.py's `--py-spy` names the py-spy binary; an arm's
`py_spy_flags` add `--idle` (samples of threads that wait too) and `--gil` (only the thread holding the GIL). The folded
stacks (`--format raw --threads`) land beside the arm's stats; the merge reads each into the share of samples by
thread, by innermost frame (where the time is spent) and by frame anywhere on the stack (what it is spent under).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

LINE = re.compile(r"^(.*) (\d+)$")
TOP = 15


class Profiler:
    """Starts py-spy once on the given processes and ends whatever is still running at the arm's end."""

    def __init__(self, binary: str, folder: Path, seconds: int, flags: tuple[str, ...] = ()) -> None:
        self.binary = binary
        self.flags = flags
        self.folder = folder
        self.seconds = seconds
        self.running: list[subprocess.Popen] = []
        self.started = False

    def start(self, targets: dict[str, int]) -> None:
        self.started = True
        self.folder.mkdir(parents=True, exist_ok=True)
        for role, pid in targets.items():
            command = [
                self.binary, "record", "--pid", str(pid), "--duration", str(self.seconds), "--rate", "100",
                "--nonblocking", "--threads", *self.flags, "--format", "raw",
                "--output", str(self.folder / f"{role}-{pid}.txt"),
            ]  # fmt: skip
            with open(self.folder / f"{role}-{pid}.log", "w") as log:
                self.running.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))

    def finish(self) -> None:
        for process in self.running:
            try:
                process.wait(timeout=self.seconds + 30)
            except subprocess.TimeoutExpired:
                process.kill()


def function(frame: str) -> str:
    """A frame without its line number: `step (vllm/v1/engine/core.py:412)` -> `step (vllm/v1/engine/core.py)`."""
    return re.sub(r":\d+\)$", ")", frame.strip())


def summarize(path: Path) -> dict:
    """Shares of one folded-stack file: by thread (its first frame), by innermost frame and by frame anywhere."""
    threads: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        match = LINE.match(line.strip())
        if not match:
            continue
        frames, count = match.group(1).split(";"), int(match.group(2))
        total += count
        threads[frames[0]] += count
        inner[function(frames[-1])] += count
        for name in {function(frame) for frame in frames[1:]}:
            anywhere[name] += count

    def shares(counter: Counter[str]) -> list[list]:
        return [[name, round(count / total, 3)] for name, count in counter.most_common(TOP)]

    return {
        "file": path.name,
        "samples": total,
        "threads": shares(threads) if total else [],
        "innermost": shares(inner) if total else [],
        "on_stack": shares(anywhere) if total else [],
    }


def summarize_folder(folder: Path) -> list[dict]:
    return [summarize(path) for path in sorted(folder.glob("*.txt"))] if folder.is_dir() else []
