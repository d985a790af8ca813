"""The machine plan: replicas per GPU from the model's size, the GPU and the cores; their flags and GPUs; overrides."""

from __future__ import annotations

import pytest

from ocr_core.errors import CommandError
from ocr_core.inputs.addresses import InputError
from ocr_core.inputs.selection import parse_shard, shard_span
from ocr_core.planning.engine_plan import EngineRequest, plan_engine
from ocr_core.planning.machine import visible_gpus
from ocr_core.planning.scale import GIB, Gpu, Machine, max_num_seqs, plan_scale

H200 = Gpu("0", "NVIDIA H200", 143771)
L4 = Gpu("0", "NVIDIA L4", 23034)


def replica_gpus(machine: Machine, params_b: float, **given: int) -> list[str | None]:
    """The GPU each replica of the engine plan sees, for a recipe of `params_b` with the command's counts."""
    request = EngineRequest("org/model", 4096, (), params_b=params_b, **given)
    return [launch.gpu for launch in plan_engine(request, machine, None).replicas()]


def machine(gpu: Gpu, gpus: int, cpus: int) -> Machine:
    return Machine(tuple(Gpu(str(index), gpu.name, gpu.memory_mib) for index in range(gpus)), cpus)


def test_a_small_model_gets_three_replicas_per_h200_with_a_third_of_its_memory_each():
    """The figures the plan stands on: 3 replicas of the 0.8B shape and 0.29 of the GPU each, the setting that gave
    13.14 pages/s against 6.96 for one server (H200, 2026-12-01); on 16 cores, beside the driver's core and three
    engine cores of 2, each replica's front end has 3 cores: 2 API servers of 1.5 cores."""
    plan = plan_scale(machine(H200, 1, 16), params_b=0.8)
    assert plan.replicas == 3
    assert plan.serve_args() == [
        "--api-server-count", "2", "--max-num-batched-tokens", "32768", "--gpu-memory-utilization", "0.29",
    ]  # fmt: skip
    assert replica_gpus(machine(H200, 1, 16), 0.8) == ["0", "0", "0"]
    assert "3 replica(s), 3 per GPU" in plan.describe()


def test_replicas_go_on_every_gpu_not_behind_data_parallelism():
    plan = plan_scale(machine(H200, 2, 32), params_b=0.8)
    assert replica_gpus(machine(H200, 2, 32), 0.8) == ["0", "0", "0", "1", "1", "1"]
    assert "--data-parallel-size" not in plan.serve_args()


def test_a_3b_model_keeps_one_replica_per_h200_with_four_api_servers():
    plan = plan_scale(machine(H200, 1, 16), params_b=3.75)
    assert plan.replicas == 1
    assert plan.serve_args() == ["--api-server-count", "4"]
    assert "4 API server(s) each" in plan.describe()


def test_an_l4_keeps_one_replica_and_one_api_server():
    for params_b in (0.8, 3.75):
        plan = plan_scale(machine(L4, 1, 8), params_b=params_b)
        assert (plan.replicas, plan.serve_args()) == (1, [])


def test_cores_and_memory_bound_the_replicas():
    """A replica needs its engine core (2) and one API server (1) beside the driver's core: 8 cores hold 2, 4
    cores 1, whose front end then has the core that is left."""
    assert plan_scale(machine(H200, 1, 8), params_b=0.8).replicas == 2
    assert plan_scale(machine(H200, 1, 4), params_b=0.8).replicas == 1
    assert plan_scale(machine(H200, 1, 4), params_b=0.8).front_end.api_servers == 1
    small = Machine((Gpu("0", "NVIDIA H100 80GB HBM3", 20480),), 16)
    assert plan_scale(small, params_b=0.8).replicas == 1
    assert "memory allows 1" in plan_scale(small, params_b=0.8).why


def test_no_gpu_or_no_figures_means_one_server():
    assert plan_scale(Machine((), 2), params_b=0.8).serve_args() == []
    assert plan_scale(Machine((), 2), params_b=0.8).replicas == 1
    unknown = Machine((Gpu("0", "NVIDIA GeForce RTX 4090", 24564),), 16)
    assert plan_scale(unknown, params_b=0.8).replicas == 1
    assert plan_scale(machine(H200, 1, 16), params_b=None).replicas == 1


def test_replicas_sharing_a_gpu_get_their_kv_cache_in_bytes_and_start_together():
    """Engines profiling one GPU at once misjudge its free memory; a KV cache given in bytes skips that, so under
    a vLLM that takes it (0.11 on) the three replicas start at once, each inside its 0.29 share, which also holds
    the activations of their 32768-token steps."""
    plan = plan_scale(machine(H200, 1, 16), params_b=0.8, vllm_version="0.30.0")
    args = plan.serve_args()
    kv_bytes = int(args[args.index("--kv-cache-memory-bytes") + 1])
    share_bytes = 140 * GIB * 0.29  # the GPU's 143771 MiB, counted in whole GiB
    assert share_bytes - kv_bytes == pytest.approx((1.6 + 6.0 + 4.0) * GIB, rel=1e-3)
    assert args[args.index("--max-num-batched-tokens") + 1] == "32768"
    assert plan.concurrent_start
    assert "GiB of KV cache each, started together" in plan.describe()


def test_an_older_vllm_or_an_unknown_one_starts_replicas_of_one_gpu_one_after_another():
    for version in ("0.10.2", "latest", None):
        plan = plan_scale(machine(H200, 1, 16), params_b=0.8, vllm_version=version)
        assert "--kv-cache-memory-bytes" not in plan.serve_args()
        assert not plan.concurrent_start


def test_replicas_on_their_own_gpus_start_together_without_a_kv_size():
    plan = plan_scale(machine(H200, 2, 32), params_b=3.75, vllm_version="0.10.2")
    assert (plan.replicas, plan.per_gpu) == (2, 1)
    assert plan.concurrent_start
    assert "--kv-cache-memory-bytes" not in plan.serve_args()
    assert not plan_scale(machine(H200, 8, 128), params_b=0.8, data_parallel=4).concurrent_start


def test_the_engine_batch_is_the_flag_else_vllms_default_for_the_gpu():
    assert max_num_seqs(["--max-num-seqs", "64", "--max-num-seqs=128"], H200) == 128
    assert max_num_seqs(["--api-server-count", "4"], H200) == 1024
    assert max_num_seqs([], Gpu("0", "NVIDIA A100-SXM4-80GB", 81920)) == 256
    assert max_num_seqs([], L4) == 256
    assert max_num_seqs([], None) == 256


def test_the_model_cards_memory_share_is_split_between_replicas():
    plan = plan_scale(machine(H200, 1, 16), params_b=0.8, memory_utilization=0.8)
    assert plan.serve_args()[-2:] == ["--gpu-memory-utilization", "0.26"]


def test_flags_override_the_plan():
    assert plan_scale(Machine((), 2), params_b=0.8, replicas=2).replicas == 2
    plan = plan_scale(machine(H200, 2, 32), params_b=3.75, replicas=4, api_servers=2)
    assert replica_gpus(machine(H200, 2, 32), 3.75, replicas=4, api_servers=2) == ["0", "0", "1", "1"]
    assert plan.serve_args() == ["--api-server-count", "2", "--gpu-memory-utilization", "0.44"]
    dp = plan_scale(machine(H200, 8, 128), params_b=0.8, api_servers=2, data_parallel=4)
    assert (dp.replicas, dp.serve_args()) == (1, ["--data-parallel-size", "4", "--api-server-count", "2"])
    with pytest.raises(CommandError, match="multiple of 2"):
        plan_scale(machine(H200, 2, 32), params_b=0.8, replicas=3)


@pytest.mark.parametrize("asked", [20, 100])
def test_more_replicas_than_the_gpu_holds_are_refused_with_the_largest_count_that_fits(asked):
    """Before: --replicas 20 on one H200 planned --gpu-memory-utilization 0.04 and --replicas 100 planned 0.00, in
    which no engine starts. Each replica of the 0.8B shape needs its 1.6 GiB of weights and 8 GiB beside them."""
    with pytest.raises(CommandError) as refused:
        plan_scale(machine(H200, 1, 16), params_b=0.8, replicas=asked)
    message = str(refused.value)
    assert f"--replicas {asked} does not fit" in message and "pass --replicas 12 or fewer" in message
    most = plan_scale(machine(H200, 1, 16), params_b=0.8, replicas=12)
    assert most.memory_share * 143771 / 1024 >= 1.6 + 8.0
    with pytest.raises(CommandError, match="pass --replicas 24 or fewer"):
        plan_scale(machine(H200, 2, 32), params_b=0.8, replicas=26)


def test_cuda_visible_devices_picks_and_names_the_gpus():
    listed = [Gpu(str(index), "NVIDIA H200", 143771) for index in range(4)]
    assert [gpu.device for gpu in visible_gpus(listed, "2,3")] == ["2", "3"]
    assert visible_gpus(listed, "") == ()
    assert [gpu.name for gpu in visible_gpus(listed, "GPU-5d1c")] == ["NVIDIA H200"]
    assert len(visible_gpus(listed, None)) == 4


@pytest.mark.parametrize("count", [0, 1, 7, 1000, 1001])
@pytest.mark.parametrize("shards", [1, 3, 8])
def test_shards_are_contiguous_balanced_ranges_in_input_order(count, shards):
    spans = [shard_span(count, (index, shards)) for index in range(shards)]
    assert [position for span in spans for position in span] == list(range(count))
    assert max(map(len, spans)) - min(map(len, spans)) <= 1
    assert shard_span(count, None) == range(count)


@pytest.mark.parametrize("text", ["2/2", "-1/3", "a/b", "3"])
def test_bad_shard_arguments_name_the_form(text):
    with pytest.raises(InputError, match="--shard"):
        parse_shard(text)


@pytest.mark.parametrize(
    ("name", "reported_mib"),
    [
        ("NVIDIA H200", (143771, 143765, 143700)),
        ("NVIDIA A100-SXM4-80GB", (81920, 81914)),
        ("NVIDIA L40S", (46068, 46060)),
        ("NVIDIA L4", (23034, 23028)),
    ],
)
def test_nodes_whose_gpus_report_memory_a_few_mib_apart_get_the_same_flags(name, reported_mib):
    """The engine cache's key holds the serve flags: two identical jobs on nodes whose cards report memory.total a
    few MiB apart must get the same --kv-cache-memory-bytes, or the second starts cold."""
    plans = [
        plan_scale(machine(Gpu("0", name, mib), 1, 16), params_b=0.8, replicas=2, vllm_version="0.30.0")
        for mib in reported_mib
    ]
    assert "--kv-cache-memory-bytes" in plans[0].serve_args()
    assert all(plan.serve_args() == plans[0].serve_args() for plan in plans[1:])


def test_the_kv_cache_in_bytes_stays_inside_the_replicas_share_of_the_memory_the_gpu_reports():
    for mib in (143771, 81920, 81700, 46068, 23034):
        plan = plan_scale(machine(Gpu("0", "NVIDIA H200", mib), 1, 16), params_b=0.8, replicas=2, vllm_version="0.30.0")
        args = plan.serve_args()
        kv_bytes = int(args[args.index("--kv-cache-memory-bytes") + 1])
        share = float(args[args.index("--gpu-memory-utilization") + 1])
        assert kv_bytes + (1.6 + 6.0) * GIB <= (mib * 1024**2 + GIB / 4) * share, "weights and the engine's own"


def kv_reserve(user_flags: tuple[str, ...]) -> tuple[float, int]:
    """What the plan leaves of each of three H200 replicas' share beside its KV cache (weights, the engine's own,
    the step's activations), in bytes, under `--extra-serve-args`; and the step each replica runs."""
    request = EngineRequest("org/model", 4096, (), user_flags, params_b=0.8)
    plan = plan_engine(request, machine(H200, 1, 16), "0.30.0")
    flags = list(plan.flags)
    share = float(flags[flags.index("--gpu-memory-utilization") + 1])
    kv_bytes = int(flags[flags.index("--kv-cache-memory-bytes") + 1])
    return 140 * GIB * share - kv_bytes, int(flags[flags.index("--max-num-batched-tokens") + 1])


@pytest.mark.parametrize("step", [32768, 65536, 131072])
def test_a_step_the_user_gives_keeps_the_memory_reserve_its_activations_need(step):
    """The plan's 32768-token step holds 4 GiB beside the KV cache for its profile run's activations. A step given
    with --extra-serve-args (as large, or larger) took that reserve away: the KV cache filled it, and each replica
    of a shared GPU reached past its share. The reserve grows with the step, as the activations do."""
    planned, planned_step = kv_reserve(())
    assert planned_step == 32768 and planned == pytest.approx((1.6 + 6.0 + 4.0) * GIB, rel=1e-3)
    reserve, ran = kv_reserve(("--max-num-batched-tokens", str(step)))
    assert ran == step
    assert reserve >= planned * 0.999 * (1 if step == 32768 else 1.1), f"{reserve / GIB:.1f} GiB left beside the KV"
    assert reserve == pytest.approx((1.6 + 6.0 + 4.0 * (step - 8192) / (32768 - 8192)) * GIB, rel=1e-3)


def test_a_step_at_vllms_default_needs_no_reserve_beyond_the_engines_own():
    reserve, ran = kv_reserve(("--max-num-batched-tokens", "8192"))
    assert ran == 8192 and reserve == pytest.approx((1.6 + 6.0) * GIB, rel=1e-3)
