"""Gives every Python process of a `vllm serve` tree its own import-time file (issue 51).

With PYTHONPROFILEIMPORTTIME=1 each process writes its `-X importtime` lines to its stderr, and the command, its
spawned API servers and its engine core share one: the lines of several import trees interleave and can no longer
be read as trees. With IMPORTTIME_DIR set and this folder on PYTHONPATH, each process (a forked child too) sends its
stderr to IMPORTTIME_DIR/PID.txt, headed by its command line, for bench/gpu/importtime_summary.py. A sitecustomize
found further along sys.path still runs.
"""

import os
import sys


def _own_stderr(forked: bool = False) -> None:
    folder = os.environ.get("IMPORTTIME_DIR")
    if not folder:
        return
    fd = os.open(os.path.join(folder, f"{os.getpid()}.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with open("/proc/self/cmdline", "rb") as handle:
        cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    os.write(fd, f"# cmdline: {cmdline}\n".encode())
    if forked:
        os.write(fd, f"# forked from: {os.getppid()}\n".encode())
    os.dup2(fd, 2)
    os.close(fd)


def _next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(candidate):
            with open(candidate) as handle:
                exec(compile(handle.read(), candidate, "exec"), {"__name__": "sitecustomize", "__file__": candidate})
            return


_own_stderr()
os.register_at_fork(after_in_child=lambda: _own_stderr(forked=True))
_next_sitecustomize()
