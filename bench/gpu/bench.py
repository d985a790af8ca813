"""The GPU bench: runs every arm of an arms file (bench/gpu/arms/*.toml, read by arms.py) one after another under the
monitor, and writes one results file for the run.

    python bench/gpu/bench.py ARMS.toml --out DIR              # on the GPU machine, after wheels.py install
    python bench/gpu/bench.py ARMS.toml --out DIR --fake       # the same on a fake `vllm serve` (no GPU)
    python bench/gpu/bench.py ARMS.toml --dry-run              # check the file; print each arm's commands
    python bench/gpu/bench.py ARMS.toml --out DIR --detach     # the same run in a session of its own: it outlives
    python bench/gpu/bench.py --wait DIR --seconds 560         #   a device call; each later call waits, then copies

DIR receives NAME.json (every arm's figures: results.py), NAME.jsonl (each arm's whole merged result), job.log (a
line per step, with the compile caches' file counts around each) and NAME-logs.tar.gz; `--work` (default
/tmp/bench) keeps the model folders, the pages and the `vllm` shim across the calls of one warm machine. The
recipes run with this python, the installed wheels (`--site`) and then the checkout's src/ on PYTHONPATH, so a
core wheel installed into the site wins, and each summary's `core` says which ran. `--py-spy BINARY` profiles the
busiest engine core and API server of every arm once it serves.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import arms as arms_file
import commands
import fleet
import image
import monitor
import pinning
import profiling
import report
import results
import same_pages
from arms import ArmsError, ArmsFile, HandArm, RecipeArm, ReplicasArm, Wipe
from caches import census, wipe
from flops import page_flops

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[1:1] = [str(ROOT), str(ROOT / "src")]

from tools.dummy_models import build_model  # noqa: E402  (the checkout's root is on the path only from here on)

RESERVE_S = 25  # seconds of the budget kept for the merge and the logs after each arm


class Kit:
    """One run's places, environment, clock and log."""

    def __init__(self, args: argparse.Namespace, plan: ArmsFile) -> None:
        self.plan, self.fake = plan, args.fake
        self.out, self.work = args.out, args.work
        self.logs = self.work / "logs"
        self.started = time.monotonic()
        self.paths = commands.Paths(
            sys.executable, ROOT, self.work / "pages", self.work / "models", self.work / "outputs", self.logs
        )
        self.profile = monitor.Profile(args.py_spy, args.py_spy_at, args.py_spy_s) if args.py_spy else None
        self.env = child_env(args.site, self.work, args.fake_seconds if args.fake else None)

    def say(self, line: str) -> None:
        stamped = f"bench [{time.monotonic() - self.started:.0f} s] {line}"
        print(stamped, file=sys.stderr, flush=True)
        with open(self.out / "job.log", "a") as log:
            log.write(stamped + "\n")

    def left(self) -> int:
        return int(self.plan.bench.budget_s - (time.monotonic() - self.started) - RESERVE_S)


def child_env(site: Path, work: Path, fake_seconds: float | None) -> dict[str, str]:
    """What every recipe and server runs in: offline Hub, no telemetry, the wheels then the core, the `vllm` shim."""
    path = os.pathsep.join([str(site), str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "PATH": f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env |= {"VLLM_USE_FLASHINFER_SAMPLER": "0", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    if fake_seconds is not None:
        env["FAKE_VLLM_SECONDS"] = str(fake_seconds)
    return env


def install_vllm_shim(kit: Kit) -> None:
    """A `vllm` executable, since the recipes spawn plain `vllm serve`: the fake one with --fake. A Python script,
    as pip writes it, so that the recipe reads the installed release from its interpreter."""
    shim = kit.work / "bin" / "vllm"
    shim.parent.mkdir(parents=True, exist_ok=True)
    if kit.fake:
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_vllm.py"}" "$@"\n')
    else:
        main = "from vllm.entrypoints.cli.main import main\nif __name__ == '__main__':\n"
        shim.write_text(f"#!{sys.executable}\nimport sys\n{main}    sys.argv[0] = 'vllm'\n    sys.exit(main())\n")
    shim.chmod(0o755)


def prepare(kit: Kit) -> None:
    """The model folder of each shape the file names, and the pages, unless an earlier call made them."""
    for shape in sorted(kit.plan.shapes):
        model = kit.paths.model(shape)
        if not (model / "config.json").exists():
            build_model(shape, model)
    pages, count = kit.plan.bench.pages, kit.work / "pages.count"
    if not (kit.paths.pages / "state.json").exists() or not count.exists() or count.read_text() != str(pages):
        shutil.rmtree(kit.paths.pages, ignore_errors=True)
        subprocess.run(
            [
                sys.executable,
                str(HERE / "make_pages.py"),
                str(kit.paths.pages),
                "--pages",
                str(pages),
                "--workers",
                "12",
            ],
            env=kit.env,
            check=True,
            stdout=sys.stderr,
        )
        count.write_text(str(pages))
    kit.say(f"models {sorted(kit.plan.shapes)} and {pages} pages ready")


def gpu_idle(kit: Kit) -> None:
    """Waits (up to 60 s) until the GPU holds less than 2 GiB, so that an arm never starts beside the last one's
    engine."""
    if not shutil.which("nvidia-smi"):
        return
    for _ in range(60):
        used = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True
        ).stdout.split()
        if used and int(used[0]) < 2048:
            return
        time.sleep(1)
    kit.say(f"GPU still holds {used[0] if used else '?'} MiB after 60 s")


def watched(
    kit: Kit,
    name: str,
    command: list[str],
    timeout: int,
    env: dict,
    pids: list[int] | None = None,
    profile: monitor.Profile | None = None,
) -> monitor.Watch:
    """Runs one command under the monitor, its output in the logs; returns where its samples went. `profile` is
    the arm's py-spy (its own flags), else the run's."""
    stats, gpu = kit.logs / f"{name}-stats.json", kit.logs / f"{name}-gpu.csv"
    spec = monitor.Watch(stats, gpu, timeout, 30, tuple(pids or ()), profile=profile or kit.profile)
    with open(kit.logs / f"{name}-stdout.txt", "w") as out, open(kit.logs / f"{name}-stderr.txt", "w") as err:
        monitor.watch(command, spec, env, out, err, kit.say)
    return spec


def tflop(kit: Kit, shape: str, tokens: int) -> float:
    return page_flops(kit.paths.model(shape), 1540, 2000, 8, tokens)["total_tflop"]


def finish(
    kit: Kit, name: str, spec: monitor.Watch, shape: str, tokens: int, extra: dict, logs: list[Path] | None = None
) -> dict:
    row = monitor.merge(name, kit.logs / f"{name}-stdout.txt", spec, tflop(kit, shape, tokens), logs or [], extra)
    row |= {"pages_n": kit.plan.bench.pages, "max_model_len": kit.plan.bench.max_model_len}
    kit.say(f"{name}: {report.line(row)}")
    if not row["ok"]:
        kit.say("".join((kit.logs / f"{name}-stderr.txt").read_text(errors="replace").splitlines(True)[-20:]))
    return row


def timeout_for(kit: Kit, name: str) -> int | None:
    """The arm's timeout, or None (and a log line) when too little of the budget is left to start it."""
    left = kit.left()
    if left < kit.plan.bench.min_left_s:
        kit.say(f"{name}: skipped, {left} s of the budget left")
        return None
    return min(kit.plan.bench.arm_timeout_s, left)


def run_recipe(kit: Kit, arm: RecipeArm) -> list[dict]:
    timeout = timeout_for(kit, arm.name)
    if timeout is None:
        return []
    command = commands.recipe_command(kit.paths, kit.plan.bench, arm)
    tmp = kit.work / "tmp" / arm.name
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    kit.say(f"{arm.name}: start (timeout {timeout} s): {' '.join(command[1:2] + command[4:])}")
    spec = watched(kit, arm.name, command, timeout, commands.recipe_env(kit.env, tmp, arm))
    logs = []
    for log in sorted(tmp.glob("**/vllm-serve*.log")):  # a spawned server's log lands in its TMPDIR
        logs.append(kit.logs / f"{arm.name}-{log.name}")
        shutil.copyfile(log, logs[-1])
    tokens = commands.tokens_of(kit.plan.bench, arm.tokens)
    extra = {"recipe": arm.recipe, "shape": arm.shape, "defaults": arm.defaults, "setting": arm.name}
    extra |= {"serve_flags": commands.recipe_serve_flags(arm), "recipe_flags": list(arm.recipe_flags)}
    extra |= {"env": dict(arm.env)}
    return [finish(kit, arm.name, spec, arm.shape, tokens, extra | {"max_tokens": tokens}, logs)]


def run_hand(kit: Kit, arm: HandArm) -> list[dict]:
    timeout = timeout_for(kit, arm.name)
    if timeout is None:
        return []
    kit.say(f"{arm.name}: start (timeout {timeout} s)")
    spec = watched(kit, arm.name, commands.hand_command(kit.paths, kit.plan.bench, arm), timeout, kit.env)
    tokens = commands.tokens_of(kit.plan.bench, arm.tokens)
    extra = {"recipe": "hand_driver.py", "shape": arm.shape, "defaults": False, "serve_flags": list(arm.serve_flags)}
    return [finish(kit, arm.name, spec, arm.shape, tokens, extra | {"max_tokens": tokens})]


def run_replicas(kit: Kit, arm: ReplicasArm) -> list[dict]:
    if kit.left() < 150:
        kit.say(f"{arm.name}: skipped, {kit.left()} s of the budget left")
        return []
    planned = replica_launches(kit, arm)
    mps, launches = under_mps(arm, planned), planned.launches
    traces, imports = kit.paths.torch_traces(arm.name), kit.logs / f"{arm.name}-imports"
    env, rows = profiling.prepare(arm, kit.env, traces, imports), []
    spy = None
    if kit.profile and arm.spy_start_s:
        spy = profiling.StartSpy(kit.profile.binary, arm.spy_start_s, kit.logs / f"{arm.name}-start-pyspy.txt")
    logs = kit.logs / f"{arm.name}-serve"
    logs.mkdir(parents=True, exist_ok=True)
    profile = replace(kit.profile, flags=arm.py_spy_flags) if kit.profile else None
    with (
        fleet.mps_daemon(kit.work, env, kit.say) if mps else contextlib.nullcontext(),
        fleet.replicas(launches, arm.start == "one_by_one", logs, env, on_first=spy.start if spy else None) as started,
    ):
        kit.say(f"{arm.name}: ready {started.ready_s}; caches after: {census()}")
        for run in arm.runs:
            timeout = timeout_for(kit, f"{arm.name}/{run.name}")
            if timeout is None:
                continue
            name, tokens = f"{arm.name}-{run.name}", commands.tokens_of(kit.plan.bench, run.tokens)
            run_cmd = commands.run_command(kit.paths, kit.plan.bench, arm, run, started.servers(run.use))
            kit.say(f"{name}: {commands.pages_of(kit.plan.bench, run.pages)} pages of {tokens} tokens over {run.use}")
            window = None
            if arm.torch_profile and arm.torch_profile.run == run.name:
                window = profiling.Window(started.urls[0], arm.torch_profile.at_s, arm.torch_profile.seconds)
                window.start()
            with pinning.pinned(started.groups, kit.say) if run.pin else contextlib.nullcontext() as layout:
                spec = watched(kit, name, run_cmd, timeout, kit.env, started.groups, profile)
            how = "together" if arm.start == "together" else "one by one"
            extra = {
                "recipe": f"{arm.recipe} --server over {run.use} of {arm.replicas} replicas started {how}, "
                f"{tokens} output tokens",
                "shape": arm.shape,
                "defaults": False,
                "phase": arm.name,
                "replicas": arm.replicas,
                "mps": mps,
                "serve_flags": list(arm.serve_flags),
                "env": dict(arm.env),
                "serve_argv": list(launches[0].argv),
                "replicas_used": run.use,
                "max_tokens": tokens,
                "ready": {"ready_s": started.ready_s},
                "engine_starts": fleet.engine_starts(started.logs),
                "pinned": layout,
            }
            if window:
                extra["torch_profile"] = window.finish()
                kit.say(f"{name}: torch profiler window {extra['torch_profile']}")
            rows.append(finish(kit, name, spec, arm.shape, tokens, extra))
    profiled = [row for row in rows if "torch_profile" in row]
    if profiled:
        profiled[0]["torch_profile"]["traces"] = profiling.summarize_traces(traces, kit.logs, arm.name, sys.executable)
    if arm.importtime and rows:
        rows[0]["imports_per_process"] = profiling.summarize_imports(imports, sys.executable)
    start_spy = spy.finish(sys.executable) if spy else None
    if start_spy and rows:
        rows[0]["start_py_spy"] = start_spy
    return rows


def replica_launches(kit: Kit, arm: ReplicasArm) -> fleet.Planned:
    """The arm's replicas: as the recipe's own `--plan` starts them on this machine (`plan = true`), or each with
    the model card's, the bench's and the arm's flags alone."""
    if arm.plan:
        return fleet.planned_launches(commands.plan_command(kit.paths, kit.plan.bench, arm), kit.env)
    launch = fleet.Launch(tuple(commands.replica_command(kit.paths, kit.plan.bench, arm)), {})
    return fleet.Planned([launch] * arm.replicas, False)


def under_mps(arm: ReplicasArm, planned: fleet.Planned) -> bool:
    """The arm's `mps` where it says, else what the recipe's plan does (MPS where its replicas share a GPU)."""
    return planned.mps if arm.mps is None else arm.mps


def run_all(kit: Kit) -> list[dict]:
    rows: list[dict] = []
    for arm in kit.plan.arms:
        if isinstance(arm, Wipe):
            wipe()
            kit.say(f"wiped the local caches: {census()}")
            continue
        if isinstance(arm, RecipeArm) and arm.offline and kit.fake:
            kit.say(f"{arm.name}: skipped (the fake engine has no in-process vLLM)")
            continue
        gpu_idle(kit)
        kit.say(f"{arm.name}: caches before: {census()}")
        runner = {RecipeArm: run_recipe, HandArm: run_hand, ReplicasArm: run_replicas}[type(arm)]
        try:
            rows += runner(kit, arm)
        except (RuntimeError, subprocess.CalledProcessError) as exc:  # a replica that never served, a plan that failed
            kit.say(f"{arm.name}: failed: {exc}")
            rows.append({"arm": arm.name, "ok": False, "error": str(exc)})
        results.write(kit.out, kit.plan.bench.name, header(kit), rows)  # a lease that ends mid-file keeps these
    return rows


def header(kit: Kit) -> dict:
    return results.header(kit.plan.path, kit.plan.bench, kit.fake, kit.env)


def run(args: argparse.Namespace, plan: ArmsFile) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "DONE").unlink(missing_ok=True)
    kit = Kit(args, plan)
    if not kit.fake and not (args.site / "vllm").is_dir():
        kit.say(f"no vllm in {args.site}: run python bench/gpu/wheels.py install first (a cold machine lost it)")
        return 3
    for scratch in (kit.logs, kit.paths.outputs):  # an earlier call's, on a warm machine: never results
        shutil.rmtree(scratch, ignore_errors=True)
    kit.logs.mkdir(parents=True)
    kit.say(f"start {plan.path}; caches: {census()}")
    install_vllm_shim(kit)
    prepare(kit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds the arm: its servers end with it
    try:
        rows = run_all(kit)
    finally:
        with tarfile.open(args.out / f"{plan.bench.name}-logs.tar.gz", "w:gz") as logs:
            logs.add(kit.logs, arcname="logs")
    if plan.bench.reference:
        same_pages.compare(rows, kit.paths.outputs, plan.bench.reference)
    if kit.fake:
        image.check()  # what the run imported here would be missing on the device
    written = results.write(args.out, plan.bench.name, header(kit), rows)
    kit.say(f"done: {written}")
    print(report.table(rows))
    (args.out / "DONE").touch()
    return 0 if rows and all(row["ok"] for row in rows) else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arms", type=Path, nargs="?", help="the arms file (bench/gpu/arms/*.toml)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/bench-out")))
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench"), help="models, pages, shim, logs")
    parser.add_argument("--site", type=Path, default=Path("/tmp/site"), help="where wheels.py installed the wheels")
    parser.add_argument("--fake", action="store_true", help="a fake `vllm serve` (fake_vllm.py): no GPU")
    parser.add_argument("--fake-seconds", type=float, default=0.2, help="the fake engine's seconds per request")
    parser.add_argument("--dry-run", action="store_true", help="check the file and print the commands; run nothing")
    parser.add_argument("--pages", type=int, help="a smaller dataset for a quick check: caps every arm's pages")
    parser.add_argument("--max-tokens", type=int, help="output tokens of every arm that does not set its own")
    parser.add_argument("--py-spy", help="the py-spy binary: profile each arm's busiest processes once serving")
    parser.add_argument("--py-spy-at", type=float, default=60.0, help="seconds after the engines first run a request")
    parser.add_argument("--py-spy-s", type=int, default=20, help="seconds py-spy records")
    parser.add_argument("--detach", action="store_true", help="run in a session of its own and return at once")
    parser.add_argument("--wait", type=Path, metavar="DIR", help="wait for the detached run writing DIR")
    parser.add_argument("--seconds", type=int, default=560, help="how long --wait waits")
    args = parser.parse_args(argv)
    if not args.wait and not args.arms:
        parser.error("name an arms file (bench/gpu/arms/*.toml), or --wait DIR")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.wait:
        return report.wait(args.wait, args.seconds, Path(os.environ.get("OUT", args.wait)))
    try:
        plan = arms_file.load(args.arms)
    except (ArmsError, OSError, ValueError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    bench = replace(plan.bench, **{k: v for k, v in (("pages", args.pages), ("max_tokens", args.max_tokens)) if v})
    plan = replace(plan, bench=bench)
    if args.dry_run:
        print(report.dry_run(plan, commands.Paths(sys.executable, ROOT, *(args.work / p for p in report.PLACES))))
        return 0
    if args.detach:
        return report.detach(sys.argv[1:], args.out)
    return run(args, plan)


if __name__ == "__main__":
    sys.exit(main())
