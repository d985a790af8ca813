"""Where a Python process's start goes in imports, from `python -X importtime` (or PYTHONPROFILEIMPORTTIME=1)
output (issue 51: a warm `vllm serve` start spent ~18 s in the command's imports and ~18 s more in its spawned API
servers' and engine core's).

Each line is `import time: SELF | CUMULATIVE | NAME`, microseconds, NAME indented two spaces per level; a module's
line comes after those of the modules it imported. The top-level lines (no indent) add up to the process's import
time; `by_package` adds each module's own (self) time to its top package (torch, transformers, vllm, ...), so the
figures add up without counting a nested import twice. A file may start with `# cmdline: ...` (written by
bench/gpu/importtime_site/sitecustomize.py for each process) to say which process it was.

    python3 bench/gpu/importtime_summary.py FILE ... [--top 20] > summary.json
    python3 bench/gpu/importtime_summary.py FILE ... --beyond BASELINE   # what each FILE imports that BASELINE does not

`--beyond` answers what an entry point costs over another (the `vllm` command's CLI over `serve` alone): a nested
module's cumulative time counts whatever it happened to import first, shared or not, so only the modules the
baseline never imports, each at its own time, are the difference.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|( *)(\S+)\s*$")
CMDLINE = "# cmdline: "


def parse(text: str) -> list[tuple[int, int, int, str]]:
    """(self_us, cumulative_us, level, module) for each import line; other lines are skipped."""
    rows = []
    for line in text.splitlines():
        match = LINE.search(line)
        if match:
            level = (len(match.group(3)) - 1) // 2
            rows.append((int(match.group(1)), int(match.group(2)), level, match.group(4)))
    return rows


def summarize(text: str, top: int = 20) -> dict:
    """Total import time, the slowest top-level imports (cumulative), the slowest modules by their own time, and
    own time by top package; seconds."""
    rows = parse(text)
    cmdline = next((line[len(CMDLINE) :] for line in text.splitlines() if line.startswith(CMDLINE)), None)
    top_level = [(cum, name) for _, cum, level, name in rows if level == 0]

    def seconds(pairs: list[tuple[int, str]]) -> list[list]:
        return [[name, round(us / 1e6, 3)] for us, name in pairs]

    return {
        "cmdline": cmdline,
        "modules": len(rows),
        "import_s": round(sum(cum for cum, _ in top_level) / 1e6, 3),
        "top_level_cumulative_s": seconds(sorted(top_level, reverse=True)[:top]),
        "slowest_cumulative_any_level_s": seconds(sorted(((c, n) for _, c, _, n in rows), reverse=True)[:top]),
        "slowest_self_s": seconds(sorted(((s, n) for s, _, _, n in rows), reverse=True)[:top]),
        "by_package_s": by_package([(own, name) for own, _, _, name in rows], top),
    }


def by_package(own_times: list[tuple[int, str]], top: int) -> list[list]:
    """Own time (microseconds in, seconds out) added up by each module's top package, largest first."""
    packages: Counter[str] = Counter()
    for own, name in own_times:
        packages[name.split(".")[0]] += own
    return [[name, round(us / 1e6, 3)] for name, us in packages.most_common(top)]


def beyond(text: str, baseline: str, top: int = 20) -> dict:
    """The modules `text` imports that `baseline` does not, their count and own time in all, the slowest of them and
    their own time by top package; seconds."""
    known = {name for _, _, _, name in parse(baseline)}
    extra = [(own, name) for own, _, _, name in parse(text) if name not in known]
    return {
        "modules": len(extra),
        "own_s": round(sum(own for own, _ in extra) / 1e6, 3),
        "slowest_self_s": [[name, round(us / 1e6, 3)] for us, name in sorted(extra, reverse=True)[:top]],
        "by_package_s": by_package(extra, top),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--beyond", type=Path, help="an importtime file: report only what each FILE imports beyond it")
    args = parser.parse_args()
    if args.beyond:
        baseline = args.beyond.read_text(errors="replace")
        out = {path.name: beyond(path.read_text(errors="replace"), baseline, args.top) for path in args.files}
    else:
        out = {path.name: summarize(path.read_text(errors="replace"), args.top) for path in args.files}
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
