"""The front end of each replica, sized from the job's CPUs, the GPU and the vLLM that runs (issue 41).

Scenarios over fake machines: HF's flavors (their vCPUs, GPUs and memory), each recipe's model and pin; a flag a
release does not parse is never passed, the plan never plans more cores than the job has, the user's own
--extra-serve-args win, and the job's CPUs are its cgroup quota, not the host's count.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from ocr_core.planning.cpus import cgroup_quota, job_cpus
from ocr_core.planning.engine_plan import EngineRequest, plan_engine
from ocr_core.planning.frontend import DRIVER_CORES, Engine, FrontEnd, plan_front_end
from ocr_core.planning.installed import served_versions
from ocr_core.planning.scale import Gpu, Machine, memory_utilization, plan_scale
from ocr_models import model_module

H200 = Gpu("0", "NVIDIA H200", 143771)
# HF Jobs flavors: (GPU, vCPUs).
FLAVORS = {
    "l4x1": (Gpu("0", "NVIDIA L4", 23034), 8),
    "l40sx1": (Gpu("0", "NVIDIA L40S", 46068), 8),
    "a100-large": (Gpu("0", "NVIDIA A100-SXM4-80GB", 81920), 12),
    "h200": (H200, 23),
}
MODELS = ("lighton_ocr3", "ovis_ocr2", "nanonets_ocr2", "hpd_parsing")
# What each release's own parser takes, read in the pinned tier's venvs (tests/pinned/test_flags.py checks the
# plan against them): 0.22.1 and later parse --renderer-num-workers; 0.17.1 and 0.10.2 do not.
PARSES_FRONT_END_FLAGS = {"0.10.2": False, "0.17.1": False, "0.22.1": True, "0.26.0": True, "0.30.0": True}
FRONT_END_FLAGS = ("--renderer-num-workers",)


def flavor_plan(flavor: str, module: str):
    gpu, cpus = FLAVORS[flavor]
    facts = model_module(module).FACTS
    machine = Machine((gpu,), cpus)
    return plan_scale(
        machine, facts.params_b, memory_utilization(facts.serve_args), vllm_version=facts.vllm_pin,
        model_flags=facts.serve_args,
    )  # fmt: skip


def planned_cores(plan) -> float:
    return DRIVER_CORES + plan.replicas * plan.front_end.cores()


@pytest.mark.parametrize("module", MODELS)
@pytest.mark.parametrize("flavor", list(FLAVORS))
def test_every_flavor_gets_a_plan_within_its_cpus(flavor, module):
    plan = flavor_plan(flavor, module)
    assert planned_cores(plan) <= FLAVORS[flavor][1], plan.describe()
    assert plan.replicas >= 1 and plan.front_end.api_servers >= 1


def test_the_plan_per_flavor_for_lighton():
    """The table SERVING.md shows: an L4 keeps one plain server; the fast cards get API servers from their cores;
    the H200's 23 vCPUs feed 3 replicas of 3 API servers. LightOn's vLLM (0.30) runs the image processor on one
    thread of its own per API server, so it gets no renderer threads."""
    table = {flavor: flavor_plan(flavor, "lighton_ocr3") for flavor in FLAVORS}
    assert table["l4x1"].serve_args() == []
    assert table["l40sx1"].serve_args() == ["--api-server-count", "3"]
    assert table["a100-large"].front_end == FrontEnd(4, 1, 32768)
    h200 = table["h200"]
    assert (h200.replicas, h200.front_end) == (3, FrontEnd(3, 1, 32768))
    assert "3 API server(s) each, 32768-token steps" in h200.describe()


@pytest.mark.parametrize("version", list(PARSES_FRONT_END_FLAGS))
def test_a_front_end_flag_goes_only_to_a_release_that_parses_it(version):
    given = []
    for cpus in (8, 16, 23, 64):
        plan = plan_scale(Machine((H200,), cpus), 0.8, vllm_version=version,
                          model_flags=["--mm-processor-cache-gb", "0"])  # fmt: skip
        passed = [flag for flag in FRONT_END_FLAGS if flag in plan.serve_args()]
        assert not passed or PARSES_FRONT_END_FLAGS[version], (version, cpus, plan.serve_args())
        given += passed
    assert bool(given) == (version in ("0.22.1", "0.26.0")), "renderer threads parallelise the processor on these"
    assert "--renderer-num-workers" not in plan_scale(Machine((H200,), 23), 0.8).serve_args()


def test_renderer_threads_only_where_they_parallelise_the_image_processor():
    """vLLM 0.22.1 refuses --renderer-num-workers above 1 while the processor cache is on (its default). From 0.30.0
    an API server runs the processor on a thread of its own: a second renderer thread added 16 % CPU a page on the
    CPU build and took no work off it, so 0.30 gets none, cache on or off."""
    cache_on = Engine("0.22.1", model_flags=["--no-enable-prefix-caching"], fast_gpu=True)
    assert plan_front_end(6.0, cache_on).renderer_workers == 1
    cache_off = Engine("0.22.1", model_flags=["--mm-processor-cache-gb=0"], fast_gpu=True)
    assert plan_front_end(6.0, cache_off).renderer_workers == 2
    assert (
        plan_front_end(6.0, Engine("0.26.0", model_flags=["--mm-processor-cache-gb=0"], fast_gpu=True)).renderer_workers
        == 2
    )
    for flags in (["--no-enable-prefix-caching"], ["--mm-processor-cache-gb=0"]):
        newer = Engine("0.30.0", model_flags=flags, fast_gpu=True)
        assert plan_front_end(6.0, newer).renderer_workers == 1


def test_the_plan_leaves_the_pixels_on_vllms_socket():
    """`--mm-tensor-ipc torch_shm` ran within the noise of vLLM's socket on an H200 (1.02x) and cost the API servers
    CPU: on 0.30's CPU build 0.222 core-seconds a page against 0.169; on an H100 the plan's replicas with the socket
    spent 0.167 and 0.304 against 0.287-0.423 for torch_shm in the runs beside them. It also needs /dev/shm room
    (a container's 64 MB fails requests) and a spawned engine core, so the plan never passes it."""
    for flavor in FLAVORS:
        for module in MODELS:
            plan = flavor_plan(flavor, module)
            assert "--mm-tensor-ipc" not in plan.serve_args(), (flavor, module, plan.serve_args())
            assert "shared memory" not in plan.describe()
    for version in PARSES_FRONT_END_FLAGS:
        for gpus in (1, 2):
            machine = Machine(tuple(Gpu(str(index), H200.name, H200.memory_mib) for index in range(gpus)), 23)
            plan = plan_scale(machine, 0.8, vllm_version=version, data_parallel=gpus if gpus > 1 else None)
            assert "--mm-tensor-ipc" not in plan.serve_args(), (version, gpus, plan.serve_args())


def test_larger_steps_only_for_a_small_model_on_a_large_gpu_without_its_own():
    """--max-num-batched-tokens 32768 paid for the 0.8B shape (5.7 to 7.1 pages/s), not the 3B (0.99x)."""
    small = Engine("0.30.0", fast_gpu=True, large_gpu=True, params_b=0.8)
    assert plan_front_end(3.0, small).batched_tokens == 32768
    assert plan_front_end(3.0, Engine("0.30.0", fast_gpu=True, large_gpu=True, params_b=3.75)).batched_tokens is None
    assert plan_front_end(3.0, Engine("0.30.0", fast_gpu=True, large_gpu=False, params_b=0.8)).batched_tokens is None
    own = Engine("0.30.0", model_flags=["--max-num-batched-tokens", "16384"], fast_gpu=True, large_gpu=True,
                 params_b=0.8)  # fmt: skip
    assert plan_front_end(3.0, own).batched_tokens is None


@pytest.mark.parametrize("cpus", [1, 2, 4, 8, 12, 16, 23, 32, 64, 128])
@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_the_plan_never_plans_more_cores_than_the_job_has(cpus, gpus):
    """Beyond the least a run needs (one replica, one API server), the planned cores stay within the job's."""
    machine = Machine(tuple(Gpu(str(index), H200.name, H200.memory_mib) for index in range(gpus)), cpus)
    for params_b in (0.8, 3.75):
        plan = plan_scale(machine, params_b, vllm_version="0.30.0")
        least = plan.replicas == gpus and plan.front_end == FrontEnd(1, 1, plan.front_end.batched_tokens)
        assert planned_cores(plan) <= cpus or least, (cpus, gpus, params_b, plan.describe())


def flavor_engine(flavor: str, module: str, user_flags: tuple[str, ...] = (), version: str | None = None):
    """The engine plan of a recipe on an HF flavor, under the user's --extra-serve-args words."""
    gpu, cpus = FLAVORS[flavor]
    facts = model_module(module).FACTS
    request = EngineRequest(
        model=facts.model, max_model_len=facts.max_model_len, model_flags=tuple(facts.serve_args),
        user_flags=user_flags, params_b=facts.params_b, vllm_pin=facts.vllm_pin,
    )  # fmt: skip
    return plan_engine(request, Machine((gpu,), cpus), version)


def test_the_users_extra_serve_args_replace_the_plans_own_and_the_record_says_so():
    plan = flavor_engine("h200", "lighton_ocr3", ("--renderer-num-workers", "6", "--enforce-eager"), version="0.26.0")
    args = list(plan.flags)
    assert args.count("--renderer-num-workers") == 1 and args[args.index("--renderer-num-workers") + 1] == "6"
    assert "--api-server-count" in args and args[-3:] == ["--renderer-num-workers", "6", "--enforce-eager"]
    assert plan.replaced == ("--renderer-num-workers",)
    assert "--extra-serve-args replaces --renderer-num-workers" in plan.describe()
    record = plan.record()
    assert record["renderer_workers"] == 6 and record["replaced_by_extra_serve_args"] == ["--renderer-num-workers"]


@pytest.mark.parametrize("spelling", [["--api_server_count", "1"], ["--api-server-count=1"], ["--api_server_count=1"]])
def test_the_users_api_server_count_in_any_spelling_vllm_takes_replaces_the_plans(spelling):
    """vLLM's parser reads `_` as `-` and `--flag=value` as `--flag value`: `--api_server_count 1` reached `vllm serve`
    beside the plan's `--api-server-count 3`, vLLM ran one API server, readiness waited the whole grace for the
    others at every start, and the summary said the plan's count and "replaced nothing"."""
    plan = flavor_engine("h200", "lighton_ocr3", tuple(spelling))
    names = [flag.partition("=")[0].replace("_", "-") for flag in plan.flags if flag.startswith("--")]
    assert names.count("--api-server-count") == 1, plan.flags
    assert plan.api_servers == 1 and all(launch.api_servers == 1 for launch in plan.replicas())
    assert plan.record()["api_servers"] == 1 and plan.replaced == ("--api-server-count",)


def test_a_processor_cache_the_user_turns_on_gets_no_renderer_threads_from_a_vllm_that_refuses_them():
    """Before 0.30 vLLM refuses `--renderer-num-workers` above 1 with the processor cache on ("Cannot use
    --renderer-num-workers > 1 with the multimodal processor cache enabled"): the plan added 2 threads after the
    user's `--mm-processor-cache-gb 4`, and `vllm serve` exited 1 at every start."""
    plan = flavor_engine("h200", "ovis_ocr2", ("--mm-processor-cache-gb", "4"), version="0.26.0")
    assert "--renderer-num-workers" not in plan.flags and plan.renderer_workers == 1
    assert plan.flags[-2:] == ("--mm-processor-cache-gb", "4")
    renderer = flavor_engine("h200", "ovis_ocr2", version="0.26.0")
    assert renderer.renderer_workers > 1, "the recipe's own flags (processor cache off) still get renderer threads"


def test_the_jobs_cpus_are_its_cgroup_quota_not_the_hosts_count(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("800000 100000\n")
    assert cgroup_quota(v2) == 8.0
    assert job_cpus(v2) == min(8, len(os.sched_getaffinity(0)))
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota(v2) is None
    assert job_cpus(v2) == len(os.sched_getaffinity(0))
    (v2 / "cpu.max").write_text("50000 100000\n")
    assert job_cpus(v2) == 1, "half a core is still one"
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("1150000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota(v1) == 11.5
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_quota(v1) is None
    assert cgroup_quota(tmp_path / "absent") is None


def test_the_plan_reads_the_release_of_the_vllm_on_path(tmp_path, monkeypatch):
    """A recipe pinned to 0.30.0 run where the `vllm` command is a 0.17.1 gets no front-end flag from its plan."""
    site = tmp_path / "site"
    dist = site / "vllm-0.17.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.17.1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "vllm"
    command.write_text(f"#!{sys.executable}\nraise SystemExit('not run by the probe')\n")
    command.chmod(command.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert served_versions().get("vllm") == "0.17.1"
    plan = plan_scale(Machine((H200,), 23), 0.8, vllm_version=served_versions().get("vllm"))
    assert not any(flag in plan.serve_args() for flag in FRONT_END_FLAGS)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert served_versions().get("vllm") is None


def test_a_vllm_command_without_an_interpreter_line_reads_as_unknown(tmp_path, monkeypatch):
    binary = Path(tmp_path / "vllm")
    binary.write_bytes(b"\x7fELF not a script")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert served_versions().get("vllm") is None
