"""What bench.py prints and how a run outlives a device call: each arm's line, the table at the end, the dry run's
list of commands, and the detach / wait pair (a call's 600 s is shorter than a long arms file).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import commands
import image
from arms import ArmsFile, HandArm, RecipeArm, ReplicasArm, Wipe
from ports import FIRST_REPLICA_PORT

# The kit's folders under --work, in commands.Paths' order after python and root.
PLACES = ("pages", "models", "outputs", "logs")
KEPT = ("*.json", "*.jsonl", "*.tar.gz", "job.log", "job.out")


def line(row: dict) -> str:
    """One arm's figures: the rates, the GPU, the front end."""
    summary = row.get("summary") or {}
    held = row.get("cpu_sustained") or {}
    page = row.get("cpu_per_page") or {}
    waits = {f"{t['role']}:{t['pid']}": t["main_thread"]["wait_share"] for t in row.get("sched_sustained") or []}
    return (
        f"ok={row.get('ok')} sustained={row.get('sustained_pages_per_s')} work={row.get('work_pages_per_s')} "
        f"billed={row.get('billed_pages_per_s')} same_text={(row.get('same_text_as_reference') or {}).get('share')} "
        f"core_s_per_page={page.get('core_s_per_page')} by_role={page.get('core_s_per_page_by_role')} "
        f"main_thread_wait_share={waits} "
        f"pages/s={row.get('pages_per_s')} gpu_util_sustained={row.get('gpu_util_sustained')} "
        f"mfu_sustained={row.get('mfu_sustained')} busy={row.get('gpu_util_mean_inference')} "
        f"peak_in_flight={summary.get('peak_in_flight')} errors={summary.get('errors', summary.get('failed'))} "
        f"elapsed_s={row.get('elapsed_s')} host_pss_gib={row.get('host_tree_pss_peak_gib')} "
        f"cores_sustained={held.get('cores_by_role')} queues_sustained={row.get('engine_queues_sustained')} "
        f"machine_cpu={row.get('machine_cpu_sustained')}"
    )


def table(rows: list[dict]) -> str:
    return "\n".join(f"{row['arm']:24s} {line(row)}" for row in rows) or "no arm ran"


def dry_run(plan: ArmsFile, paths: commands.Paths) -> str:
    """Each arm's commands as bench.py would run them (a planned replicas arm's: the recipe's `--plan` it reads them
    from)."""
    bench = plan.bench
    out = [f"{plan.path}: {bench}"]
    for arm in plan.arms:
        if isinstance(arm, Wipe):
            out.append("wipe: the machine's compile and kernel caches")
        elif isinstance(arm, RecipeArm):
            out.append(f"{arm.name}: {assignments(arm.env)}{shell(commands.recipe_command(paths, bench, arm))}")
        elif isinstance(arm, HandArm):
            out.append(f"{arm.name}: {shell(commands.hand_command(paths, bench, arm))}")
        elif isinstance(arm, ReplicasArm):
            mps = {None: " under CUDA MPS if the plan shares a GPU", True: " under CUDA MPS", False: ""}[arm.mps]
            if arm.plan:
                serve = f"the argv of each replica the recipe plans: {shell(commands.plan_command(paths, bench, arm))}"
            else:
                serve = shell(commands.replica_command(paths, bench, arm))
            out.append(f"{arm.name}: {arm.replicas} x ({assignments(arm.env)}{serve}), started {arm.start}{mps}")
            if arm.torch_profile:
                window = arm.torch_profile
                out.append(
                    f"  torch profiler on replica 1 in run {window.run}: {window.seconds} s from {window.at_s} s"
                )
            for run in arm.runs:
                servers = ",".join(f"http://127.0.0.1:{FIRST_REPLICA_PORT + i}" for i in range(run.use))
                out.append(f"  {arm.name}-{run.name}: {shell(commands.run_command(paths, bench, arm, run, servers))}")
    missing = sorted(
        {arm.recipe for arm in plan.arms if hasattr(arm, "recipe") and not (paths.root / arm.recipe).exists()}
    )
    if missing:
        raise SystemExit(f"{plan.path}: no recipe {missing} in {paths.root}")
    image.check()
    return "\n".join(out)


def assignments(env: tuple[tuple[str, str], ...]) -> str:
    """An arm's env as the shell would set it before a command."""
    return "".join(f"{name}={shlex.quote(value)} " for name, value in env)


def shell(words: list[str]) -> str:
    return shlex.join(words)


def detach(argv: list[str], out: Path) -> int:
    """The same command line without --detach, in a session of its own, its output in OUT/job.out; a shell around
    it writes its exit status to OUT/EXIT, so that `wait` tells a run that died from one still running."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("DONE", "EXIT"):
        (out / stale).unlink(missing_ok=True)
    rest = [word for word in argv if word != "--detach"]
    bench = [sys.executable, str(Path(__file__).with_name("bench.py")), *rest]
    with open(out / "job.out", "w") as log:
        child = subprocess.Popen(
            ["sh", "-c", f'"$@"; echo $? > {shlex.quote(str(out / "EXIT"))}', "sh", *bench],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (out / "job.pid").write_text(f"{child.pid}\n")
    print(f"bench: running as pid {child.pid}; poll with python bench/gpu/bench.py --wait {out}")
    return 0


def ended(folder: Path) -> str | None:
    """How the detached run writing `folder` ended without finishing, or None while it runs (or once it is done)."""
    if (folder / "DONE").exists():
        return None
    if (folder / "EXIT").exists():
        return f"exit status {(folder / 'EXIT').read_text().strip()}"
    pid = (folder / "job.pid").read_text().strip() if (folder / "job.pid").exists() else ""
    alive = pid.isdigit() and Path(f"/proc/{pid}").exists() and "Z" not in status_letter(pid)
    return None if alive or not pid else "killed (no exit status written)"


def status_letter(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return "X"


def tail(path: Path, lines: int) -> str:
    return "".join(path.read_text(errors="replace").splitlines(True)[-lines:]) if path.exists() else f"no {path}\n"


def wait(folder: Path, seconds: int, copy_to: Path) -> int:
    """Waits up to `seconds` for the detached run writing `folder` to end, then copies its files to `copy_to`; a run
    that died is reported within seconds, with its exit status and the end of its output."""
    deadline = time.monotonic() + seconds
    death = ended(folder)
    while not (folder / "DONE").exists() and death is None and time.monotonic() < deadline:
        time.sleep(1)
        death = ended(folder)
    copy_to.mkdir(parents=True, exist_ok=True)
    for pattern in KEPT:
        for path in folder.glob(pattern):
            if path.resolve().parent != copy_to.resolve():
                shutil.copy2(path, copy_to / path.name)
    if death:
        print(f"bench: the run died before it was done: {death}; the end of its output (job.out):")
        print(tail(folder / "job.out", 40))
        return 5
    print(tail(folder / "job.log", 40))
    done = (folder / "DONE").exists()
    print("bench: done" if done else f"bench: still running after {seconds} s; wait again in the next call")
    return 0 if done else 4
