"""The bench kit runs as shipped: every bench script at tiny sizes, the GPU bench (bench/gpu/bench.py) on arms files
against the fake `vllm serve` (--fake), so that a refactor of the core cannot leave them behind again (GPU scripts
once died on `No module named 'ocr_core'` under plain python, CPU benches on names that no longer existed, and no
test ran them). The CPU benches run in the background while the GPU kit runs: each is mostly imports and sleeps.

bench/saturation.py and bench/ceiling.py are left out: each needs a real vLLM engine (minutes of CPU).
bench/front_end_cpu.py starts one too, serving tiny pages: about a minute of start-up, then seconds.
bench/mm_warmup.py runs the test bed's vLLM's own multimodal warm-up in one process: its imports and the
processor's load, under half a minute.
"""

from __future__ import annotations

import http.server
import importlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed.env import REPO_ROOT, VENV_PYTHON

CPU_BENCHES = {
    "driver-cost": ["bench/driver_cost.py", "--repeats", "1", "--pages", "16", "--window", "4"],
    "pdf-render": ["bench/pdf_render.py", "--text-pages", "1", "--rounds", "1"],
    "shard-publish": ["bench/shard_publish.py", "--rows", "12", "--shards", "1", "--text-chars", "20"],
    "progress-store": ["bench/progress_store.py", "--rows", "64", "--cycle-rows", "32"],
    "front-end-cpu": ["bench/front_end_cpu.py", "--pages", "2", "--tokens", "2", "--scale", "0.1"],
    "mm-warmup-cpu": ["bench/mm_warmup.py", "--repeats", "1", "--vllm-venv", ".testbed/venv"],
}
EFFICIENCY_FIELDS = {
    "recipe",
    "shape",
    "pages",
    "defaults",
    "sustained_pages_per_s",
    "billed_pages_per_s",
    "pages_per_s",
    "gpu_util_sustained",
    "mfu_sustained",
    "startup",
    "engine_cache",
}


def plain_env(**extra: str) -> dict[str, str]:
    """The environment a bench is started in by hand: no PYTHONPATH, so the scripts must find the core themselves;
    and ports of this worker's own for the bench's servers."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return {**env, "BENCH_PORT_BASE": bench_port_base(), **extra}


def bench_port_base() -> str:
    """Each pytest-xdist worker's own range for the bench's servers (bench/gpu/ports.py). Before: two workers ran the
    kit at once on the same replica port, and one run was refused as a server left over from another job."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return str(9000 + 100 * int(worker))


@pytest.fixture(scope="module")
def cpu_benches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, subprocess.Popen]]]:
    results = tmp_path_factory.mktemp("bench-results")
    logs = tmp_path_factory.mktemp("bench-logs")
    started = {}
    for name, command in CPU_BENCHES.items():
        with open(logs / f"{name}.log", "w") as log:
            started[name] = subprocess.Popen(
                [str(VENV_PYTHON), *command],
                cwd=REPO_ROOT,
                env=plain_env(BENCH_RESULTS=str(results)),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    yield results, started
    for process in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def run_bench(arms: str, out: Path, work: Path, *flags: str, **env: str) -> subprocess.CompletedProcess:
    """bench.py on the fake engine, as the README shows it, with an arms file written here."""
    (work.parent / f"{out.name}.toml").write_text(arms)
    command = [str(VENV_PYTHON), "bench/gpu/bench.py", str(work.parent / f"{out.name}.toml"), "--out", str(out)]
    command += ["--work", str(work), "--fake", *flags]
    return subprocess.run(command, cwd=REPO_ROOT, env=plain_env(**env), capture_output=True, text=True, timeout=1500)


def dry_run(arms: Path | str, **env: str) -> subprocess.CompletedProcess:
    """bench.py --dry-run of an arms file: it checks the file and prints each arm's commands."""
    command = [str(VENV_PYTHON), "bench/gpu/bench.py", str(arms), "--dry-run"]
    return subprocess.run(command, cwd=REPO_ROOT, env=plain_env(**env), capture_output=True, text=True, timeout=60)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fake_py_spy(path: Path) -> Path:
    """A `py-spy record` stand-in: writes one folded stack where --output (or -o) says, and its arguments to
    spy-args beside it."""
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {path.parent / "spy-args"}\n'
        'while [ $# -gt 0 ]; do case "$1" in --output|-o) out=$2;; esac; shift; done\n'
        'echo "Thread 1;main (fake.py:1);serve (fake.py:2) 5" > "$out"\n'
    )
    path.chmod(0o755)
    return path


KIT_ARMS = """
[bench]
name = "kit"
pages = 24
max_tokens = 8
budget_s = 1500                 # a busy 2-core machine starts a recipe in a minute or more
arm_timeout_s = 600

[[arm]]
name = "server"
recipe = "nanonets-ocr2-server.py"

[[arm]]
kind = "hand"
name = "hand"
concurrency = 4

[[arm]]
kind = "replicas"
name = "p1"
replicas = 1
runs = [{name = "full", pages = 24, use = 1}, {name = "vp", pages = 24, use = 1, tokens = 1}]
"""
PROFILED_ARMS = """
[bench]
name = "profiled"
pages = 24
max_tokens = 8
budget_s = 1500
arm_timeout_s = 600

[[arm]]
name = "base"
recipe = "lighton-ocr3-saturate.py"

[[arm]]
kind = "wipe"

[[arm]]
name = "tok1"
recipe = "lighton-ocr3-saturate.py"
pages = 8
tokens = 1

[[arm]]
kind = "replicas"
name = "hand1"
replicas = 1
start = "one_by_one"
plan = false
shape = "qwen3_5"
serve_flags = ["--api-server-count", "1"]
runs = [{name = "all", pages = 24, use = 1}, {name = "one", pages = 8, use = 1}]
torch_profile = {run = "all", at_s = 1, seconds = 1}
py_spy_flags = ["--idle", "--gil"]
importtime = true
spy_start_s = 2
"""


@pytest.mark.heavy
def test_the_gpu_kit_runs_an_arms_file_on_a_fake_engine(tmp_path, cpu_benches):
    """bench.py as shipped, two arms files on one warm machine's work folder, the second detached and waited for as
    a device call does: every arm lands in its file's results with the fields bench/results/ keeps, the servers
    started by hand are watched, a wipe empties the compile caches, and each arm says which core ran."""
    work = tmp_path / "work"
    done = run_bench(KIT_ARMS, tmp_path / "kit", work)
    assert done.returncode == 0, done.stderr[-4000:]
    home, inductor = tmp_path / "home", tmp_path / "inductor"
    (home / ".cache" / "vllm").mkdir(parents=True)
    inductor.mkdir()
    spy = fake_py_spy(tmp_path / "py-spy")
    profiled = tmp_path / "profiled"
    caches = {"HOME": str(home), "TORCHINDUCTOR_CACHE_DIR": str(inductor)}
    py_spy = ("--py-spy", str(spy), "--py-spy-at", "0", "--py-spy-s", "1", "--fake-seconds", "4")
    detached = run_bench(PROFILED_ARMS, profiled, work, "--detach", *py_spy, **caches)
    assert detached.returncode == 0, detached.stderr
    waited = subprocess.run(
        [str(VENV_PYTHON), "bench/gpu/bench.py", "--wait", str(profiled), "--seconds", "1500"],
        cwd=REPO_ROOT,
        env=plain_env(OUT=str(tmp_path / "copied")),
        capture_output=True,
        text=True,
        timeout=1600,
    )
    assert waited.returncode == 0, (profiled / "job.out").read_text()[-4000:]
    assert (tmp_path / "copied" / "profiled.json").exists(), "--wait copies the results to $OUT"
    assert not (home / ".cache" / "vllm").exists() and not inductor.exists(), "wipe leaves a new job's caches"
    documents = [json.loads((folder / f"{folder.name}.json").read_text()) for folder in (tmp_path / "kit", profiled)]
    arms = {arm["arm"]: arm for document in documents for arm in document["arms"]}
    assert set(arms) == {"server", "hand", "p1-full", "p1-vp", "base", "tok1", "hand1-all", "hand1-one"}
    assert documents[0]["machine"] == "fake engine (no GPU)" and documents[0]["arms_file"].endswith("kit.toml")
    rows = {row["arm"]: row for row in map(json.loads, (profiled / "profiled.jsonl").open())}
    assert rows["base"]["max_tokens"] != 1 and rows["tok1"]["max_tokens"] == 1
    profile = arms["base"]["py_spy"]
    assert [p["file"].split("-")[0] for p in profile] == ["engine_core"], "the fake engine is the busiest core"
    assert profile[0]["innermost"] == [["serve (fake.py)", 1.0]]
    kit_rows = {row["arm"]: row for row in map(json.loads, (tmp_path / "kit" / "kit.jsonl").open())}
    assert "engine_core" in kit_rows["p1-full"]["processes"]["cpu_s_by_role"], "a phase's servers are watched"
    assert "engine_core" in rows["hand1-all"]["processes"]["cpu_s_by_role"], "servers started one by one too"
    window = rows["hand1-all"]["torch_profile"]
    assert window["start_profile"] == window["stop_profile"] == 200 and "torch_profile" not in rows["hand1-one"]
    assert window["traces"][0]["error"].startswith("no GPU kernels"), "trace_summary.py read the fake's trace"
    (imports,) = rows["hand1-all"]["imports_per_process"].values()
    assert "fake_vllm.py serve" in imports["cmdline"] and imports["modules"] > 0, "the server's own import file"
    assert rows["hand1-all"]["start_py_spy"], "startup_spy.py read the start's stacks"
    assert "--gil" in (spy.parent / "spy-args").read_text(), "the arm's py-spy flags reach py-spy"
    held = arms["hand"]["cpu_sustained"]
    assert held["seconds"] > 0 and held["cores_total"] is not None, "CPU cut to the sustained interval"
    if sum(held["cores_by_role"].values()):  # a loaded machine may sample no process twice in a short interval
        page = arms["hand"]["cpu_per_page"]
        assert "client" in page["core_s_per_page_by_role"], "the hand driver is the client"
        assert set(page["cpu_ceiling_projection"]) == {"l4x1", "l40sx1", "a100-large", "h200"}
    assert arms["p1-vp"]["recipe"].endswith("1 output tokens") and arms["p1-full"]["recipe"].endswith("8 output tokens")
    for name, arm in arms.items():
        assert set(arm) >= EFFICIENCY_FIELDS, name
        assert arm["ok"] and arm["pages"] in (8, 24), name
        assert 0 < arm["billed_pages_per_s"] < arm["pages_per_s"], f"{name}: billed counts the start-up"
    assert arms["server"]["recipe"] == "nanonets-ocr2-server.py" and arms["server"]["defaults"] is True
    assert arms["base"]["recipe"] == "lighton-ocr3-saturate.py" and arms["base"]["defaults"] is True
    assert arms["hand1-all"]["shape"] == "qwen3_5" and arms["hand1-all"]["defaults"] is False
    assert arms["hand"]["sustained_pages_per_s"] > 0, "4 in flight over 24 pages reach a sustained interval"
    assert arms["server"]["sustained_pages_per_s"] is None, "a window of 32 holds all 24 pages: no steady state"
    core = arms["server"]["core"]
    assert core["location"] == str(REPO_ROOT / "src" / "ocr_core") and core["version"].endswith("not installed)")


RERUN_ARMS = """
[bench]
name = "rerun"
pages = 8
max_tokens = {tokens}
budget_s = 600
arm_timeout_s = 300

[[arm]]
kind = "replicas"
name = "r1"
replicas = 1
runs = [{{name = "a", pages = 8, use = 1}}]
"""


@pytest.mark.heavy
def test_a_second_arms_file_in_the_same_work_folder_starts_from_empty_outputs(tmp_path):
    """A device call that runs another arms file (or the same one with other settings) on the warm machine's work
    folder: the recipes' outputs there are the bench's scratch, so an arm's run starts from an empty OUTPUT instead
    of refusing to mix its text with an earlier run's (it did: "holds results made another way", the arm lost)."""
    work = tmp_path / "work"
    for tokens in (8, 4):
        out = tmp_path / f"rerun-{tokens}"
        done = run_bench(RERUN_ARMS.format(tokens=tokens), out, work)
        assert done.returncode == 0, done.stderr[-4000:]
        (arm,) = json.loads((out / "rerun.json").read_text())["arms"]
        assert arm["ok"] and arm["pages"] == 8, (tokens, done.stderr[-3000:])


@pytest.mark.parametrize("arms", sorted((REPO_ROOT / "bench" / "gpu" / "arms").glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_arms_file_reads_and_names_recipes_that_exist(arms):
    done = dry_run(str(arms))
    assert done.returncode == 0, done.stderr
    assert "--load-format dummy" in done.stdout


def gpu_module(name: str):
    """A module of bench/gpu, which imports its siblings by their plain names."""
    sys.path.insert(0, str(REPO_ROOT / "bench" / "gpu"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "gpu"))


def test_the_profile_arms_file_profiles_replica_one_with_encoder_graphs_and_two_replicas():
    """arms/profile.toml as the dry run reads it: the profiled arm's replicas get --profiler-config, the encoder
    graph arms their budgets, and a two-replica arm is there."""
    done = dry_run("bench/gpu/arms/profile.toml")
    assert done.returncode == 0, done.stderr
    arms = {line.split(":")[0]: line for line in done.stdout.splitlines() if not line.startswith(" ")}
    assert "--profiler-config" in arms["base"] and "--profiler-config" not in arms["enc"]
    assert '"encoder_cudagraph_token_budgets":[2976,5952,8928,11904]' in arms["enc"]
    assert arms["r2"].startswith("r2: 2 x") and arms["r2enc"].startswith("r2enc: 2 x")
    assert "torch profiler on replica 1 in run prof" in done.stdout


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ('torch_profile = {run = "prof", at = 3}', "unknown key(s) ['at']"),
        ('torch_profile = {run = "nope"}', "torch_profile's run 'nope' is not one of the runs ['a']"),
        ('py_spy_flags = ["--idle", "--native"]', "py_spy_flags are some of ['--idle', '--gil']"),
    ],
)
def test_a_replicas_arm_refuses_a_misspelled_profiling_key(tmp_path, key, message):
    arms = tmp_path / "typo.toml"
    arms.write_text(
        f'[[arm]]\nkind = "replicas"\nname = "p"\nreplicas = 1\nruns = [{{name = "a", pages = 8, use = 1}}]\n{key}\n'
    )
    with pytest.raises(gpu_module("arms").ArmsError, match=re.escape(message)):
        gpu_module("arms").load(arms)


def test_the_torch_profiler_window_starts_and_stops_profiling_on_the_fake_engine(tmp_path):
    """profiling.Window's two POSTs as the fake engine answers them: 200 each, and neither counted as a request."""
    port = free_port()
    server = subprocess.Popen(
        [str(VENV_PYTHON), "bench/gpu/fake_vllm.py", "serve", "m", "--port", str(port)], cwd=REPO_ROOT
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert url in gpu_module("fleet").wait_ready([url], [server.pid], 60), "the fake engine never served"
        window = gpu_module("profiling").Window(url, 0, 0.1)
        window.start()
        record = window.finish()
        assert record["start_profile"] == 200 and record["stop_profile"] == 200, record
        assert record["start_unix"] <= record["stop_unix"]
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        assert "vllm:request_success_total 0" in metrics, "a profiler call is not a completion"
    finally:
        server.kill()
        server.wait()


def test_an_arms_file_with_an_unknown_key_is_refused_with_the_keys_it_takes(tmp_path):
    """A typo must not silently measure the defaults."""
    arms = tmp_path / "typo.toml"
    arms.write_text('[[arm]]\nname = "base"\nrecipe = "lighton-ocr3-saturate.py"\nserve_flag = ["--x"]\n')
    done = dry_run(str(arms))
    assert done.returncode == 2
    assert "unknown key(s) ['serve_flag']" in done.stderr and "serve_flags" in done.stderr


@pytest.mark.heavy
def test_the_cpu_benches_run_at_tiny_sizes(cpu_benches):
    results, started = cpu_benches
    for name, process in started.items():
        assert process.wait(timeout=600) == 0, f"bench {name} failed (its log is in the bench-logs temp folder)"
        (written,) = results.glob(f"{name}-*.json")
        assert json.loads(written.read_text())["benchmark"] == name


def test_wheel_parts_packed_here_install_there(tmp_path, monkeypatch):
    """wheels.py's pack (stored wheels, xz tar, equal parts with SHA256 and PARTS in part 1) and its install (join,
    check, unpack, pip install) meet: a wheel packed into three parts installs, and a missing part is named."""
    sys.path.insert(0, str(REPO_ROOT / "bench" / "gpu"))
    try:
        wheels = importlib.import_module("wheels")
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "gpu"))
    wheel = tmp_path / "whl" / "kitprobe-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    info = "kitprobe-1.0.dist-info"
    files = {
        "kitprobe.py": b"VALUE = 7\n#" + os.urandom(1_500_000).hex().encode() + b"\n",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: kitprobe\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in files.items():
            out.writestr(name, data)
        out.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n")
    monkeypatch.setattr(wheels, "PART_UNIT", 2**20 // 2)
    parts = wheels.pack([wheel], tmp_path / "gpu", lean=False, part_mb=1)
    assert len(parts) == 3 and (tmp_path / "gpu" / "p1" / "PARTS").read_text().strip() == "3"
    site = tmp_path / "site"
    folders = [str(part.parent) for part in parts]
    install = [str(VENV_PYTHON), "bench/gpu/wheels.py", "install", "--site", str(site)]
    done = subprocess.run([*install, *folders], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "VALUE = 7" in (site / "kitprobe.py").read_text()
    missing = subprocess.run([*install, *folders[:2]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert missing.returncode != 0 and "missing parts ['p3']" in missing.stderr


def test_a_replica_port_that_already_answers_is_refused_before_anything_starts(tmp_path):
    """A server left on the bench's port (another run on the machine, a replica that outlived its arm) answered the
    new arm's readiness check at once, and the arm measured that server instead of its own ("ready" in 0.0 s)."""
    fleet = gpu_module("fleet")

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    squatter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    port = squatter.server_address[1]
    launch = fleet.Launch(("sleep", "30"), {})
    try:
        started = fleet.replicas([launch], False, tmp_path, {}, ready_s=5, first_port=port)
        with pytest.raises(RuntimeError, match=f"port {port} already answers"), started:
            pass
    finally:
        squatter.shutdown()
    assert not list(tmp_path.glob("serve-*.log")), "nothing was started"


def test_the_bench_servers_ports_move_with_bench_port_base(tmp_path):
    """Two benches on one machine (the suite's workers) must not take each other's servers for their own: the
    recipe's server, the hand-driven one and every replica move with BENCH_PORT_BASE."""
    arms = tmp_path / "ports.toml"
    arms.write_text(
        '[bench]\nname = "ports"\npages = 8\n\n[[arm]]\nname = "recipe"\nrecipe = "lighton-ocr3-saturate.py"\n'
        'shape = "qwen3_5"\n\n[[arm]]\nkind = "hand"\nname = "hand"\n\n'
        '[[arm]]\nkind = "replicas"\nname = "r"\nreplicas = 2\nplan = false\n'
        'runs = [{ name = "a", pages = 8, use = 2 }]\n'
    )
    done = dry_run(arms, BENCH_PORT_BASE="9700")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--server http://127.0.0.1:9710 " in done.stdout
    assert "--server http://127.0.0.1:9703 " in done.stdout
    assert "--server http://127.0.0.1:9720,http://127.0.0.1:9721 " in done.stdout
    assert ":80" not in done.stdout.replace("http://127.0.0.1:8000", "")
