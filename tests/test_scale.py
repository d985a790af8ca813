"""Scaling a spawned server: the engine argv for 1, 2, 4 and 8 GPUs, and the API-server count rule."""

from __future__ import annotations

import pytest

from ocr_core.scale import plan_scale
from ocr_core.source import InputError, in_shard, parse_shard


@pytest.mark.parametrize(
    ("gpus", "cpus", "expected"),
    [
        (1, 16, ["--api-server-count", "4"]),
        (2, 32, ["--data-parallel-size", "2", "--api-server-count", "4"]),
        (4, 64, ["--data-parallel-size", "4", "--api-server-count", "4"]),
        (8, 128, ["--data-parallel-size", "8", "--api-server-count", "8"]),
    ],
)
def test_engine_argv_for_fast_gpus(gpus, cpus, expected):
    plan = plan_scale(gpus, "NVIDIA H200", cpus)
    assert plan.serve_args() == expected
    assert plan.data_parallel == gpus


def test_slow_or_small_machines_keep_one_api_server():
    assert plan_scale(1, "NVIDIA L4", 8).serve_args() == []
    assert plan_scale(1, "NVIDIA H100 80GB HBM3", 4).serve_args() == []
    assert plan_scale(0, "", 2).serve_args() == []


def test_flags_override_the_rule():
    plan = plan_scale(8, "NVIDIA H200", 128, api_servers=2, data_parallel=4)
    assert plan.serve_args() == ["--data-parallel-size", "4", "--api-server-count", "2"]


def test_shards_partition_any_id_set():
    ids = [f"train-{index}" for index in range(1000)]
    owners = [[shard for shard in range(4) if in_shard(row_id, (shard, 4))] for row_id in ids]
    assert all(len(found) == 1 for found in owners)
    sizes = [sum(found == [shard] for found in owners) for shard in range(4)]
    assert min(sizes) > 200


@pytest.mark.parametrize("text", ["2/2", "-1/3", "a/b", "3"])
def test_bad_shard_arguments_name_the_form(text):
    with pytest.raises(InputError, match="--shard"):
        parse_shard(text)
