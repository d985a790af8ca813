"""Scaling a spawned server: the engine argv for 1, 2, 4 and 8 GPUs, and the API-server count rule."""

from __future__ import annotations

import pytest

from ocr_core.scale import plan_scale
from ocr_core.source import InputError, parse_shard, shard_span


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
