"""Where each process of a starting `vllm serve` spends its main thread, from `py-spy record --subprocesses --idle
--threads --format raw` (issue 51: the warm start's 49-53 s before the model loads).

Each folded stack starts with its process (`process PID:"CMDLINE"`, after its parents') and its thread; a main
thread's stack starts in a `<module>` frame or runpy, another thread's in threading's `_bootstrap`. A sample of the
main thread is an import while `_find_and_load` is on its stack; the module being imported at the top is the first
`<module>` frame above it. Seconds are samples over the rate.

    python3 bench/gpu/startup_spy.py STACKS.txt --rate 50 > summary.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

LINE = re.compile(r"^(.*) (\d+)$")
# py-spy names a process by its parents too (`process 1:"...";process 2:"..."`), then the thread; a command line
# may hold `;` and `"` (a JSON serve flag), so the process part ends at the last `";thread (`.
PROCESS = re.compile(r'process (\d+):"')
THREAD_START = '";thread ('
THREAD = re.compile(r"^thread \(\w+\)(: .*)?$")
IMPORT = "_find_and_load"
LINENO = re.compile(r":\d+\)$")


def frame_name(frame: str) -> str:
    return LINENO.sub(")", frame.strip())


def split(stack: str) -> tuple[str, list[str]]:
    """(process, code frames) of one folded stack: its own process (the last named) and its thread taken off."""
    process, rest = "?", stack
    end = stack.rfind(THREAD_START)
    if stack.startswith("process ") and end >= 0:
        head, rest = stack[: end + 1], stack[end + 2 :]
        last = list(PROCESS.finditer(head))[-1]
        process = f"{last.group(1)} {head[last.end() : -1][:120]}"
    frames = rest.split(";")
    if frames and THREAD.match(frames[0].strip()):
        frames = frames[1:]
    return process, frames


def is_main(code: list[str]) -> bool:
    return bool(code) and not code[0].startswith("_bootstrap ")


def imported_module(code: list[str]) -> str | None:
    """The file of the outermost module being imported (its `<module>` frame above the first import)."""
    seen_import = False
    for frame in code:
        if IMPORT in frame:
            seen_import = True
        elif seen_import and frame.startswith("<module>"):
            return frame_name(frame)[len("<module> (") : -1]
    return None


def summarize(text: str, rate: float, top: int = 15) -> dict:
    main: Counter[str] = Counter()
    imports: Counter[str] = Counter()
    modules: dict[str, Counter[str]] = defaultdict(Counter)
    functions: dict[str, Counter[str]] = defaultdict(Counter)
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if not match:
            continue
        process, code = split(match.group(1))
        count = int(match.group(2))
        if not is_main(code):
            continue
        main[process] += count
        if any(IMPORT in frame for frame in code):
            imports[process] += count
            modules[process][imported_module(code) or "?"] += count
        else:
            for name in {frame_name(frame) for frame in code}:
                functions[process][name] += count
    return {
        process: {
            "main_thread_s": round(samples / rate, 2),
            "imports_s": round(imports[process] / rate, 2),
            "top_imports_s": [[m, round(c / rate, 2)] for m, c in modules[process].most_common(top)],
            "outside_imports_on_stack_s": [[f, round(c / rate, 2)] for f, c in functions[process].most_common(top)],
        }
        for process, samples in main.most_common()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stacks", type=Path)
    parser.add_argument("--rate", type=float, required=True, help="py-spy's --rate (samples a second)")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    json.dump(summarize(args.stacks.read_text(errors="replace"), args.rate, args.top), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
