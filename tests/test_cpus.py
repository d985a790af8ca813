"""A CPU quota set on the job's own cgroup, below the root of the hierarchy, limits the plan like one at the root.

A job's cgroup is often nested (a runner puts each job in a child of the container's cgroup, systemd a slice in a
slice); the quota that binds is the smallest on the path from the process's own cgroup (/proc/self/cgroup) up to the
root. A fake cgroup tree in a temporary folder stands in for /sys/fs/cgroup and /proc/self/cgroup.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ocr_core.planning.cpus import cgroup_quota, job_cpus

HOST_CORES = 64


@pytest.fixture(autouse=True)
def many_cores(monkeypatch):
    """The job's affinity names every core of a large host, as it does in most containers."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(HOST_CORES)), raising=False)


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def own_cgroup(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proc-self-cgroup"
    path.write_text(text)
    return path


def test_a_v2_quota_on_the_jobs_own_nested_cgroup_limits_the_plan(tmp_path):
    root = tree(tmp_path / "cgroup", {"cpu.max": "max 100000\n", "runner/job-7/cpu.max": "400000 100000\n"})
    self_cgroup = own_cgroup(tmp_path, "0::/runner/job-7\n")
    assert cgroup_quota(root, self_cgroup) == 4.0
    assert job_cpus(root, self_cgroup) == 4


def test_the_smallest_quota_from_the_own_cgroup_up_to_the_root_binds(tmp_path):
    root = tree(
        tmp_path / "cgroup",
        {"cpu.max": "max 100000\n", "slice/cpu.max": "250000 100000\n", "slice/job/cpu.max": "800000 100000\n"},
    )
    self_cgroup = own_cgroup(tmp_path, "0::/slice/job\n")
    assert cgroup_quota(root, self_cgroup) == 2.5
    assert job_cpus(root, self_cgroup) == 2


def test_a_v1_quota_on_the_cpu_controllers_nested_cgroup_limits_the_plan(tmp_path):
    root = tree(
        tmp_path / "cgroup",
        {
            "cpu/cpu.cfs_quota_us": "-1\n",
            "cpu/cpu.cfs_period_us": "100000\n",
            "cpu/kubepods/pod-1/cpu.cfs_quota_us": "300000\n",
            "cpu/kubepods/pod-1/cpu.cfs_period_us": "100000\n",
        },
    )
    self_cgroup = own_cgroup(tmp_path, "12:memory:/kubepods/pod-1\n4:cpu,cpuacct:/kubepods/pod-1\n1:name=systemd:/\n")
    assert cgroup_quota(root, self_cgroup) == 3.0
    assert job_cpus(root, self_cgroup) == 3


def test_an_own_cgroup_path_that_the_mount_does_not_show_falls_back_to_the_mounts_root(tmp_path):
    """Without a cgroup namespace a container's /proc/self/cgroup names the host's path, while its /sys/fs/cgroup
    is its own cgroup: the quota at the mount's root is the job's."""
    root = tree(tmp_path / "cgroup", {"cpu.max": "600000 100000\n"})
    assert cgroup_quota(root, own_cgroup(tmp_path, "0::/system.slice/docker-abc.scope\n")) == 6.0
    v1 = tree(tmp_path / "v1", {"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"})
    assert cgroup_quota(v1, own_cgroup(tmp_path, "4:cpu,cpuacct:/docker/abc\n")) == 2.0


@pytest.mark.parametrize("text", ["0::/\n", None])
def test_a_job_at_the_root_of_its_namespace_or_without_proc_reads_the_root_alone(tmp_path, text):
    root = tree(tmp_path / "cgroup", {"cpu.max": "max 100000\n", "other/cpu.max": "100000 100000\n"})
    self_cgroup = own_cgroup(tmp_path, text) if text is not None else tmp_path / "absent"
    assert cgroup_quota(root, self_cgroup) is None
    assert job_cpus(root, self_cgroup) == HOST_CORES
    tree(root, {"cpu.max": "300000 100000\n"})
    assert job_cpus(root, self_cgroup) == 3
