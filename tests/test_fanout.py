"""`--jobs N`: one command launches a recipe's shards as HF Jobs, re-attaches, heals and sums up (issue 34).

The Jobs client is a double (tests/testbed/jobs_double.py) injected as the Hub double is; nothing reaches the
network. The scripted double decides each job's fate; the end-to-end test runs each job as a local process of the
real recipe against the CPU engine and the Hub double.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import datasets
import pytest

from ocr_core.command.parser import build_parser
from ocr_core.fanout import drive
from ocr_core.fanout import launcher as launch_command
from ocr_core.fanout.heal import Step
from ocr_core.fanout.jobs import JobLaunch
from ocr_core.fanout.pages import LivePages, PageCount, planned_pages
from ocr_core.fanout.plan import RUN_LABEL, SHARD_LABEL
from ocr_core.fanout.watch import ShardView, Snapshot, projected_finish, total_line
from ocr_core.store.compaction import merge
from ocr_core.store.lease import Lease
from ocr_core.store.manifest import write_manifest
from ocr_core.store.output import Destination
from ocr_core.store.progress import ResultLog, RowResult, new_run_id
from tests.test_resume_publish import run_main, served
from tests.testbed.env import REPO_ROOT, script_python
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub
from tests.testbed.jobs_double import (
    JOB_MOUNT,
    LocalJobs,
    ScriptedJobs,
    installed_python,
    job_env,
    job_manifest,
    mounted,
    shipped,
)
from tests.testbed.recipes import model_facts, run_entry
from tests.testbed.wheels import WHEELS_DIR
from tools.release import release_table

SCRIPT = "lighton-ocr3-saturate.py"
RELEASED_URL = f"https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main/{SCRIPT}"
INPUT, OUTPUT = "someone/scans", "someone/scans-ocr"
SAMPLES = REPO_ROOT / "samples" / "dataset"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    """Also: the launcher runs on a release build of the core, whose table holds the checkout's scripts' hashes."""
    monkeypatch.setattr(drive, "POLL_S", 0.0)
    monkeypatch.setattr(launch_command, "released_scripts", release_table)
    monkeypatch.setenv("HF_TOKEN", "token-for-the-jobs")


@pytest.fixture
def ctrl_c():
    """Ctrl-C raises KeyboardInterrupt in this test whatever the suite inherited: a shell starts a background job
    (`make test &`, nohup) with SIGINT ignored, and Python keeps an inherited SIG_IGN, so the tests that raise SIGINT
    in the launcher's watch loop waited forever on a busy run of 2026-12-02."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_the_ctrl_c_tests_hold_when_the_suite_inherits_sigint_ignored():
    """The suite run as a background job (SIGINT ignored from the start) still detaches on the scripted Ctrl-C."""
    ignored = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         f"{__file__}::test_ctrl_c_detaches_and_leaves_the_jobs_running"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert ignored.returncode == 0, ignored.stdout[-2000:]


def launcher(tmp_path, fates, *flags, capsys, **double):
    """Runs the launcher with a scripted Jobs double; returns the double, the exit code, the summary, stderr."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, fates, **double)
    return jobs, *run_launcher(jobs, hub, [INPUT, OUTPUT, "--jobs", str(len(fates)), *flags], capsys)


def core_wheel() -> Path:
    """The core's wheel the session built from src/ (tests/conftest.py), as `make submit` builds one."""
    return next(WHEELS_DIR.glob("ocr_vllm_core-*.whl"))


def printed_commands(out: str) -> list[list[str]]:
    """The words of each `hf jobs uv run` command a dry run printed (wrapped lines joined)."""
    lines = out.replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.startswith("hf jobs uv run")]


def run_launcher(jobs, hub, argv, capsys):
    capsys.readouterr()
    code = run_entry(SCRIPT, argv, hub, jobs)
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]), err, out


def test_a_dry_run_prints_the_n_launches_and_sends_nothing(tmp_path, capsys):
    jobs, code, summary, err, out = launcher(tmp_path, {0: [], 1: [], 2: [], 3: []}, "--dry-run", capsys=capsys)
    assert code == 0 and summary["dry_run"] and summary["exit_code"] == 0
    assert jobs.launches == [] and jobs.listings == 0
    commands = [line for line in out.replace("\\\n", " ").splitlines() if line.startswith("hf jobs uv run")]
    assert len(commands) == 4
    for index, command in enumerate(commands):
        assert f"--shard {index}/4" in command and "--jobs" not in command and "--dry-run" not in command
        assert RELEASED_URL in command and "--flavor l4x1" in command and "--image vllm/vllm-openai:v0.30.0" in command
        assert f"{SHARD_LABEL}={index:05d}-of-00004" in command
    assert f"the jobs run the released script, {RELEASED_URL}" in err
    assert "token-for-the-jobs" not in out + err


def test_every_shard_mounts_the_engine_cache_bucket_read_write_where_its_run_looks(tmp_path, capsys):
    """Issue 42: --engine-cache hf://buckets/... gives each job the mount, with the location left as given (a run
    reads a bucket location at the mount), in the printed commands as in what is sent."""
    bucket = "hf://buckets/alice/caches/ocr"
    flags = ("--engine-cache", bucket)
    _, code, _, _, out = launcher(tmp_path, {0: [], 1: []}, "--dry-run", *flags, capsys=capsys)
    commands = printed_commands(out)
    assert code == 0 and len(commands) == 2
    for words in commands:
        assert words[words.index("-v") + 1] == f"{bucket}:/engine-cache"
        assert words[words.index("--engine-cache") + 1] == bucket
    jobs, code, _, _, _ = launcher(tmp_path / "sent", {0: [], 1: []}, *flags, capsys=capsys)
    assert {launch.volumes for launch in jobs.launches} == {(f"{bucket}:/engine-cache",)}
    _, code, _, err, out = launcher(
        tmp_path / "folder", {0: []}, "--dry-run", "--engine-cache", "/cache", capsys=capsys
    )
    assert code == 0 and "-v" not in printed_commands(out)[0]
    assert "folder of this machine, which the jobs do not see" in err


def test_on_a_source_tree_core_the_jobs_get_this_copys_bytes_and_the_core_wheel_shipped_with_them(
    tmp_path, capsys, monkeypatch
):
    """A core that is not a release build can certify no script: sending the released URL would run other bytes
    than the ones here, so the jobs get these, and the first line says they were not checked. Nor is the core the
    header pins this code (before a release it does not even exist), so each job gets the wheel given, as a word of
    its own that hf uploads, and the variables that make its uv install it."""
    monkeypatch.setattr(launch_command, "released_scripts", lambda: None)
    wheel = core_wheel()
    _, code, _, err, out = launcher(tmp_path, {0: [], 1: []}, "--dry-run", f"--core-wheel={wheel}", capsys=capsys)
    assert code == 0, err
    commands = printed_commands(out)
    assert len(commands) == 2
    for index, words in enumerate(commands):
        assert RELEASED_URL not in words and str(REPO_ROOT / SCRIPT) in words
        assert words[-4:] == ["--core-wheel", str(wheel), "--shard", f"{index}/2"]
        shipped_env = [words[at + 1] for at, word in enumerate(words) if word == "-e"]
        assert shipped_env == ["UV_NO_SOURCES=1", f"UV_FIND_LINKS={JOB_MOUNT}"]
    assert "not checked against the released script: the core here is not a release build" in err
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()[:12]
    assert f"they install the core wheel {wheel} (0.2.0, sha256 {sha}), shipped with each job" in err


def test_a_launcher_on_a_source_tree_core_without_a_core_wheel_launches_nothing_and_names_make_submit(
    tmp_path, capsys, monkeypatch
):
    """Its jobs would install the header's pinned wheel, which is not this code and, before a release, not there:
    every job would fail at its install, each after its start-up is paid."""
    monkeypatch.setattr(launch_command, "released_scripts", lambda: None)
    for flags in ((), ("--dry-run",)):
        jobs, code, summary, err, _ = launcher(tmp_path, {0: ["done"], 1: ["done"]}, *flags, capsys=capsys)
        assert code == 2 and summary["exit_code"] == 2 and jobs.launches == [] and jobs.listings == 0
        assert "the core here is a source tree build" in err and "make submit SCRIPT=" in err, err


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("ocr_vllm_core-9.9.9-py3-none-any.whl", "but lighton-ocr3-saturate.py pins ocr-vllm-core==0.2.0"),
        ("ocr_vllm_core-0.2.0.tar.gz", "not a wheel of ocr-vllm-core"),
        ("missing/ocr_vllm_core-0.2.0-py3-none-any.whl", "not a wheel of ocr-vllm-core"),
    ],
)
def test_a_core_wheel_the_jobs_could_not_install_is_refused_before_any_launch(tmp_path, capsys, name, says):
    wheel = tmp_path / name
    if wheel.parent.is_dir():
        relabelled_wheel(wheel)
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"]})
    capsys.readouterr()
    assert run_entry(SCRIPT, [INPUT, OUTPUT, "--jobs", "1", "--core-wheel", str(wheel)], hub, jobs) == 2
    err = capsys.readouterr().err
    assert says in err and jobs.launches == [], err


def relabelled_wheel(path: Path) -> None:
    """The core's wheel saved as `path`, its metadata saying the version `path`'s name carries: a real wheel of
    another version, which the launcher's zip check lets through to the pin's."""
    import zipfile

    version = path.name.split("-")[1]
    with zipfile.ZipFile(core_wheel()) as source, zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename.endswith(".dist-info/METADATA"):
                data = data.replace(b"\nVersion: 0.2.0\n", f"\nVersion: {version}\n".encode())
            target.writestr(item, data)


def test_a_job_whose_core_is_not_the_shipped_wheel_stops_before_its_first_page(tmp_path, capsys, monkeypatch):
    """In the job the flag names the shipped file: a core of another version (an image's, a cached environment's)
    is said at once, exit 2, rather than OCRing the shard with code nobody shipped."""
    from ocr_core.command import core_wheel as shipping

    monkeypatch.setattr(shipping, "core_version", lambda: "0.1.9")
    capsys.readouterr()
    code = run_entry(SCRIPT, [str(SAMPLES), str(tmp_path / "out"), "--core-wheel", str(core_wheel())])
    err = capsys.readouterr().err
    assert code == 2 and "holds ocr-vllm-core 0.2.0, but this run's core is 0.1.9" in err, err
    assert not (tmp_path / "out").exists()


def test_hf_jobs_uv_run_ships_the_script_and_the_core_wheel_as_the_job_double_does(tmp_path, capsys, monkeypatch):
    """The dry run's command, given to hf's own CLI (huggingface_hub 2.4) over a recording HfApi: hf uploads the
    two files and runs the job on their mounted paths with the shipping variables, which is what the job double
    (LocalJobs with install) imitates; if hf stopped shipping files so, this fails before a user's job does."""
    from huggingface_hub import HfApi, JobInfo
    from huggingface_hub.cli.hf import app

    monkeypatch.setattr(launch_command, "released_scripts", lambda: None)
    wheel = core_wheel()
    _, code, _, err, out = launcher(tmp_path, {0: []}, "--dry-run", "--core-wheel", str(wheel), capsys=capsys)
    assert code == 0, err
    words = printed_commands(out)[0]
    calls: dict = {}

    def run_job(self, **job):
        calls["job"] = job
        owner = {"id": "1", "name": "someone", "type": "user"}
        status = {"stage": "RUNNING", "message": None}
        return JobInfo(id="j1", createdAt="2026-12-01T10:00:00.000Z", status=status, owner=owner, labels={})

    monkeypatch.setattr(HfApi, "whoami", lambda self, **_: {"name": "someone"})
    monkeypatch.setattr(HfApi, "create_bucket", lambda self, **_: type("Bucket", (), {"url": "bucket-url"}))
    monkeypatch.setattr(HfApi, "batch_bucket_files", lambda self, **upload: calls.setdefault("upload", upload))
    monkeypatch.setattr(HfApi, "run_job", run_job)
    assert words[:3] == ["hf", "jobs", "uv"]
    app(words[1:], standalone_mode=False, windows_expand_args=False)
    uploaded = {str(local) for local, _ in calls["upload"]["add"]}
    assert uploaded == {str(REPO_ROOT / SCRIPT), str(wheel)}
    job = calls["job"]
    script_at = words.index(str(REPO_ROOT / SCRIPT))
    assert job["command"] == ["uv", "run", *mounted(words[script_at:], JOB_MOUNT)]
    assert job["env"] == {"UV_NO_SOURCES": "1", "UV_FIND_LINKS": JOB_MOUNT}
    assert [volume.mount_path for volume in job["volumes"]] == [JOB_MOUNT]
    assert job["secrets"] == {"HF_TOKEN": "token-for-the-jobs"}, "the token goes to the job as a secret"
    assert "token-for-the-jobs" not in json.dumps({**job, "secrets": None}, default=str)


def test_each_job_runs_its_shard_with_the_same_flags_and_labels_naming_the_run(tmp_path, capsys):
    flags = ["--max-tokens", "512", "--flavor", "h200", "--job-timeout=6h", "--hf-token", "token-for-the-jobs"]
    jobs, code, summary, _, _ = launcher(tmp_path, {0: ["done"], 1: ["done"], 2: ["done"]}, *flags, capsys=capsys)
    assert code == 0
    runs = {launch.labels[RUN_LABEL] for launch in jobs.launches}
    assert len(runs) == 1 and summary["run"] in runs
    assert [launch.labels[SHARD_LABEL] for launch in jobs.launches] == [f"{i:05d}-of-00003" for i in range(3)]
    for index, launch in enumerate(jobs.launches):
        assert launch.script_args == (INPUT, OUTPUT, "--max-tokens", "512", "--shard", f"{index}/3")
        assert (launch.flavor, launch.timeout, launch.image) == ("h200", "6h", "vllm/vllm-openai:v0.30.0")
        assert launch.secrets == ("HF_TOKEN",) and launch.script == RELEASED_URL

    other, *_ = launcher(tmp_path / "b", {0: ["done"], 1: ["done"], 2: ["done"]}, "--max-tokens", "256", capsys=capsys)
    elsewhere = ScriptedJobs(FolderHub(tmp_path / "c"), "someone/other", {0: ["done"], 1: ["done"], 2: ["done"]})
    run_launcher(elsewhere, elsewhere.hub, [INPUT, "someone/other", "--jobs", "3", "--max-tokens", "512"], capsys)
    assert other.launches[0].labels[RUN_LABEL] not in runs, "other text under the same run label"
    assert elsewhere.launches[0].labels[RUN_LABEL] not in runs, "another output under the same run label"


def test_the_same_command_again_reattaches_and_never_launches_a_running_or_done_shard(tmp_path, capsys, ctrl_c):
    hub = FolderHub(tmp_path / "hub")
    first = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["running"], 2: ["done"]})
    first.on_listing = lambda double: double.listings == 3 and signal.raise_signal(signal.SIGINT)
    code, summary, _, _ = run_launcher(first, hub, [INPUT, OUTPUT, "--jobs", "3"], capsys)
    assert code == 130 and summary["detached"]

    again = ScriptedJobs(hub, OUTPUT, {0: [], 1: [], 2: ["done"]})
    for job in first.jobs.values():
        if job.launch.labels[SHARD_LABEL] != "00002-of-00003":
            again.add(job.launch.labels, "COMPLETED" if job.fate == "done" else "RUNNING", "done")
    code, summary, _, _ = run_launcher(again, hub, [INPUT, OUTPUT, "--jobs", "3"], capsys)
    assert [launch.labels[SHARD_LABEL] for launch in again.launches] == ["00002-of-00003"]
    assert code == 0 and [shard["state"] for shard in summary["shards"]] == ["done"] * 3


def test_a_failed_timed_out_or_cancelled_shard_is_relaunched_up_to_max_relaunches(tmp_path, capsys):
    fates = {0: ["timeout", "cancel", "done"], 1: ["oom", "done"], 2: ["done"]}
    _, code, summary, err, _ = launcher(tmp_path, fates, capsys=capsys)
    assert code == 0
    assert [shard["relaunches"] for shard in summary["shards"]] == [2, 1, 0]
    assert "relaunched after job" in err and "Job timeout" in err

    spent, code, summary, err, _ = launcher(tmp_path / "b", {0: ["timeout"] * 4, 1: ["done"]}, capsys=capsys)
    assert len([launch for launch in spent.launches if launch.labels[SHARD_LABEL] == "00000-of-00002"]) == 3
    assert code == 1 and summary["shards"][0]["state"] == "given up" and "--max-relaunches 2 spent" in err

    none, code, summary, _, _ = launcher(tmp_path / "c", {0: ["oom", "done"]}, "--max-relaunches", "0", capsys=capsys)
    assert len(none.launches) == 1 and code == 1


def test_a_shard_that_fails_the_same_way_twice_is_not_relaunched_and_its_last_log_lines_are_shown(tmp_path, capsys):
    fates = {0: ["canary", "canary", "done"], 1: ["done"]}
    jobs, code, summary, err, _ = launcher(tmp_path, fates, capsys=capsys)
    assert [launch.labels[SHARD_LABEL] for launch in jobs.launches].count("00000-of-00002") == 2
    assert code == 1 and summary["shards"][0]["state"] == "given up"
    assert "failed the same way twice in a row (exit 1: the first 8 answers are all '!!!!')" in err
    assert "    error: the canary ..." in err, "the shard's last log lines are not shown"
    assert summary["shards"][1]["state"] == "done" and summary["load_with"] is None


def test_a_relaunch_may_take_over_the_lease_of_the_job_it_replaces_and_no_other(tmp_path, capsys):
    """A job killed hard (out of memory, a lost machine) leaves its lease live for max(900 s, 3 x --upload-every);
    its relaunch, refused by it, failed twice and the shard was given up (issue 43, item 2). The launcher knows
    which job ended, so the relaunch names it; the first launch names none."""
    jobs, code, _, err, _ = launcher(tmp_path, {0: ["oom", "timeout", "done"], 1: ["done"]}, capsys=capsys)
    assert code == 0, err
    args = {job_id: job.launch.script_args for job_id, job in jobs.jobs.items()}
    assert not any("--take-over-job" in words for words in (args["job-0"], args["job-1"]))
    assert args["job-2"][-4:] == ("--shard", "0/2", "--take-over-job", "job-0")
    assert args["job-3"][-6:] == ("--shard", "0/2", "--take-over-job", "job-2", "--take-over-job", "job-0")


def test_a_recipe_takes_over_only_the_lease_of_the_ended_job_it_is_told(tmp_path, capsys, monkeypatch):
    """The recipe's side of the relaunch: a live lease of job-0 on its slice refuses a run told of job-1, and gives
    way to one told of job-0, whose first commit removes it."""
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    hub = FolderHub(tmp_path / "hub")
    progress = hub.repo(OUTPUT) / PROGRESS
    progress.mkdir(parents=True)
    now = time.time()
    dead = Lease("shard-00000-of-00002-dead", "0-of-2", "a-lost-machine", 7, now - 60, now + 840, job="job-0")
    (progress / dead.file_name).write_text(dead.to_json())
    with fake_server() as server:
        argv = [str(SAMPLES), OUTPUT, *served(server, "--shard", "0/2")]
        code, _, err = run_main(SCRIPT, [*argv, "--take-over-job", "job-1"], capsys, hub=hub)
        assert code == 1 and "another run is writing" in err and "a-lost-machine" in err
        code, summary, err = run_main(SCRIPT, [*argv, "--take-over-job", "job-0"], capsys, hub=hub)
    assert code == 0 and summary["rows"] == 6, err
    assert not (progress / dead.file_name).exists()


def test_a_job_killed_hard_is_relaunched_over_its_own_lease_and_every_row_is_published(tmp_path, capsys, monkeypatch):
    """Through the launcher, with real recipe processes against a fake server: shard 0's first job is killed by
    SIGKILL once its lease is on the Hub, and its relaunch finishes the shard."""
    monkeypatch.setattr(drive, "POLL_S", 0.5)
    hub_folder = tmp_path / "hub"
    jobs = LocalJobs(hub_folder, tmp_path / "jobs", bed_env(), stop_first=frozenset({0}), stop_signal=signal.SIGKILL)
    with fake_server(delay_s=0.2) as server:
        argv = [str(SAMPLES), OUTPUT, "--jobs", "2", *served(server, "--max-inflight", "1")]
        code, summary, err, _ = run_launcher(jobs, FolderHub(hub_folder), argv, capsys)
    logs = "".join(job.log.read_text()[-1500:] for job in jobs.jobs.values())
    assert code == 0, err[-2000:] + logs
    assert [shard["relaunches"] for shard in summary["shards"]] == [1, 0] and summary["pages"] == 12
    assert jobs.jobs["local-0"].process.returncode == -signal.SIGKILL
    output = datasets.load_dataset(str(hub_folder / OUTPUT), split="train", cache_dir=str(tmp_path / "cache"))
    assert output["page_id"] == datasets.load_dataset(str(SAMPLES), split="train")["page_id"]


def test_the_summary_gives_each_shard_the_totals_the_cost_and_the_load_line(tmp_path, capsys):
    fates = {0: ["done"], 1: ["oom", "done"]}
    jobs, code, summary, err, _ = launcher(tmp_path, fates, capsys=capsys)
    assert code == 0
    billed = sum(job.record.running_s for job in jobs.jobs.values())
    assert summary["shards"] == [
        {"shard": 0, "job_id": "job-0", "state": "done", "pages": 100, "errors": 1, "relaunches": 0,
         "duration_s": jobs.jobs["job-0"].record.running_s},
        {"shard": 1, "job_id": "job-2", "state": "done", "pages": 100, "errors": 1, "relaunches": 1,
         "duration_s": jobs.jobs["job-2"].record.running_s},
    ]  # fmt: skip
    assert (summary["pages"], summary["errors"], summary["relaunches"]) == (200, 2, 1)
    assert summary["billed_s"] == billed and summary["cost_usd"] == round(billed * 0.80 / 3600, 4)
    first = min(job.record.created_at for job in jobs.jobs.values())
    last = max(job.record.finished_at for job in jobs.jobs.values())
    assert summary["wall_s"] == (last - first).total_seconds()
    assert summary["load_with"] == f"datasets.load_dataset({OUTPUT!r}, split='train')"
    assert f"2 of 2 shard(s) in: 200 page(s), 2 with an error, 1 relaunch(es), ${summary['cost_usd']:.2f}" in err
    assert summary["load_with"] in err
    in_line = "1 of 2 shard(s) in; 100 of 200 pages (1 with an error)"
    assert in_line in err, "the watch does not count a finished shard's pages"
    assert any(line.split()[2:4] == ["completed", "100/100"] for line in err.splitlines() if "shard 0/2:" in line)


def test_ctrl_c_detaches_and_leaves_the_jobs_running(tmp_path, capsys, ctrl_c):
    stop = lambda double: double.listings == 3 and signal.raise_signal(signal.SIGINT)  # noqa: E731
    jobs, code, summary, err, _ = launcher(tmp_path, {0: ["running"], 1: ["running"]}, capsys=capsys, on_listing=stop)
    assert code == 130 and summary["detached"] and summary["exit_code"] == 130
    assert [job.record.stage for job in jobs.jobs.values()] == ["RUNNING", "RUNNING"]
    assert "2 job(s) keep running; run the same command to re-attach" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([INPUT, "./scans-ocr", "--jobs", "2"], "is a folder on this machine"),
        ([str(SAMPLES), OUTPUT, "--jobs", "2"], "is not a Hub dataset id"),
    ],
)
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["launch", "dry run"])
def test_jobs_that_cannot_reach_the_input_or_output_are_refused_before_any_launch(
    tmp_path, capsys, argv, says, dry_run
):
    """A dry run refuses what the launch refuses (issue 44): it printed N job commands and exit 0 for a command
    that, without --dry-run, is exit 2."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    code, summary, err, out = run_launcher(jobs, hub, [*argv, *dry_run], capsys)
    assert code == 2 and summary["exit_code"] == 2 and says in err and jobs.launches == []
    assert printed_commands(out) == [], "a job command was printed for a command that is refused"


def test_a_launcher_that_cannot_reach_the_hub_is_refused_at_once_without_retries(tmp_path, capsys, monkeypatch):
    """Issue 44: offline, the launcher's first Hub call (the output's listing) was retried inside huggingface_hub and
    again by the launcher for six minutes, then ended as exit 1 saying the jobs it started keep running, having
    started none. The real Hub and Jobs clients here, pointed at a closed port on this machine: a connection that
    cannot be made at all is exit 2 with the reason, and nothing waits for a retry."""
    import huggingface_hub.constants

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    code, summary, err, _ = run_launcher(None, None, [INPUT, OUTPUT, "--jobs", "2"], capsys)
    assert code == 2 and summary["exit_code"] == 2, err[-2000:]
    assert f"cannot reach the Hub at {endpoint}" in err and "the launcher stopped" not in err
    assert waits == [], "the launcher waited to retry a connection that could not be made"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--flavor", "h200"], "--flavor only work with --jobs N"),
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--jobs", "2", "--shard", "0/2"], "leave --shard out"),
    ],
)
def test_launcher_flags_in_the_wrong_place_are_command_errors(tmp_path, capsys, argv, says):
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {})
    capsys.readouterr()
    assert run_entry(SCRIPT, [INPUT, OUTPUT, *argv], hub, jobs) == 2
    assert says in capsys.readouterr().err and jobs.launches == []


def test_end_to_end_the_jobs_run_as_local_processes_and_the_output_loads_every_row_once_in_order(
    vllm_server, tmp_path, capsys, monkeypatch
):
    """Three shards, each job the real recipe in its own process against the CPU engine and the Hub double;
    shard 1's first job is stopped by SIGTERM once it has counted its rows (as HF Jobs stop a job at its timeout)
    and is relaunched."""
    monkeypatch.setattr(drive, "POLL_S", 1.0)
    hub_folder = tmp_path / "hub"
    jobs = LocalJobs(hub_folder, tmp_path / "jobs", bed_env(), stop_first=frozenset({1}))
    argv = [str(SAMPLES), OUTPUT, "--jobs", "3", "--server", vllm_server.url, "--model", vllm_server.model]
    argv += ["--max-model-len", "1024", "--max-tokens", "16", "--temperature", "0", "--ignore-eos"]
    started = time.monotonic()
    code, summary, err, _ = run_launcher(jobs, FolderHub(hub_folder), argv, capsys)
    took = time.monotonic() - started
    assert code == 0, err[-3000:]
    assert [shard["state"] for shard in summary["shards"]] == ["done"] * 3
    assert [shard["relaunches"] for shard in summary["shards"]] == [0, 1, 0]
    assert [shard["pages"] for shard in summary["shards"]] == [4, 4, 4] and summary["errors"] == 0
    output = datasets.load_dataset(str(hub_folder / OUTPUT), split="train", cache_dir=str(tmp_path / "cache"))
    expected = datasets.load_dataset(str(SAMPLES), split="train")["page_id"]
    assert output["page_id"] == expected, "the shards' rows are not every input row once, in input order"
    assert all(output["markdown"])
    print(f"end to end: 3 shards, {summary['pages']} pages, {summary['relaunches']} relaunch(es), {took:.0f} s")


def test_a_clones_script_submitted_before_a_release_installs_the_shipped_core_in_its_job(
    vllm_server, tmp_path, capsys, monkeypatch
):
    """`make submit`'s path (issue 32): a source-tree core, and a job that starts as HF Jobs start one: the files
    its command names shipped to its mount, its script's environment built by uv from the unedited header with the
    launch's variables and nothing of this session's. Without the shipped wheel that install fails (the header's
    pinned URL, unpublished before a release, is all uv has); with it the job installs the wheel, runs the recipe
    and publishes every row."""
    bare = tmp_path / "bare"
    script = Path(shipped([str(REPO_ROOT / SCRIPT)], bare)[0])
    log = tmp_path / "bare.log"
    assert installed_python(script, job_env(bed_env(), {}, bare), log) is None, "the header's pin installed alone"
    assert "ocr_vllm_core-0.2.0-py3-none-any.whl" in log.read_text()

    monkeypatch.setattr(drive, "POLL_S", 1.0)
    monkeypatch.setattr(launch_command, "released_scripts", lambda: None)
    hub_folder = tmp_path / "hub"
    jobs = LocalJobs(hub_folder, tmp_path / "jobs", bed_env(), install=True)
    argv = [str(SAMPLES), OUTPUT, "--jobs", "1", "--core-wheel", str(core_wheel()), "--server", vllm_server.url]
    argv += ["--model", vllm_server.model, "--max-model-len", "1024", "--max-tokens", "16", "--temperature", "0"]
    code, summary, err, _ = run_launcher(jobs, FolderHub(hub_folder), [*argv, "--ignore-eos"], capsys)
    job_log = jobs.jobs["local-0"].log.read_text()
    assert code == 0 and len(jobs.jobs) == 1 and summary["errors"] == 0, err[-2000:] + job_log[-3000:]
    ran = json.loads([line for line in job_log.splitlines() if line.startswith("{")][-1])
    location = Path(ran["core"]["location"])
    assert not location.is_relative_to(REPO_ROOT / "src"), "the job's core came from src/"
    assert not location.is_relative_to(script_python(SCRIPT).parent.parent), "the job ran the session's environment"
    assert (ran["core"]["version"], ran["core"]["build"]) == ("0.2.0", "source tree")
    assert ran["script_release"] == "unchecked"
    output = datasets.load_dataset(str(hub_folder / OUTPUT), split="train", cache_dir=str(tmp_path / "cache"))
    expected = datasets.load_dataset(str(SAMPLES), split="train")["page_id"]
    assert output["page_id"] == expected and summary["pages"] == len(expected) and all(output["markdown"])


def test_without_a_token_for_the_jobs_nothing_is_launched_and_the_fix_is_said(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    jobs, code, summary, err, _ = launcher(tmp_path, {0: ["done"], 1: ["done"]}, capsys=capsys)
    assert code == 2 and summary["exit_code"] == 2 and jobs.launches == []
    assert "the jobs need the secret HF_TOKEN" in err and "hf auth login" in err


def test_a_jobs_api_that_fails_midway_stops_the_launcher_and_leaves_its_jobs_running(tmp_path, capsys):
    def unreachable(double):
        if double.listings == 2:
            raise ConnectionError("the Jobs API is unreachable")

    jobs, code, summary, err, _ = launcher(
        tmp_path, {0: ["running"], 1: ["running"]}, capsys=capsys, on_listing=unreachable
    )
    assert code == 1 and summary["exit_code"] == 1 and len(jobs.launches) == 2
    assert "the Jobs API is unreachable" in err and "run the same command to re-attach" in err


def test_an_output_cut_into_another_number_of_shards_is_refused_before_any_launch(tmp_path, capsys):
    hub = FolderHub(tmp_path / "hub")
    manifest = hub.repo(OUTPUT) / PROGRESS / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"input": INPUT, "shards": 4}))
    write_part(hub, (0, 4), [(0, None)])
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    code, summary, err, _ = run_launcher(jobs, hub, [INPUT, OUTPUT, "--jobs", "2"], capsys)
    assert code == 2 and summary["exit_code"] == 2 and jobs.launches == []
    assert "holds results cut into 4 shard(s); run the same command with --jobs 4" in err


def test_a_manifest_with_no_result_behind_it_refuses_no_jobs(tmp_path, capsys):
    """A run refused before its first page (a --max-tokens its server could not hold) leaves a manifest and no
    result; the corrected command without --jobs takes its place (claim.replace_unused_settings), so the same
    command with --jobs N, whose N shards the manifest does not count, does too (issue 43, item 7)."""
    hub = FolderHub(tmp_path / "hub")
    refused = ScriptedJobs(hub, OUTPUT, {})
    write_manifest(refused.progress_dir(), job_manifest(JobLaunch(SCRIPT, (INPUT, OUTPUT), *[""] * 4, {}, ""), 200))
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    code, summary, err, _ = run_launcher(jobs, hub, [INPUT, OUTPUT, "--jobs", "2"], capsys)
    assert code == 0 and len(jobs.launches) == 2 and summary["pages"] == 200, err
    assert "holds results cut into" not in err


def test_a_rerun_with_retry_errors_relaunches_the_shards_whose_slices_hold_error_rows(tmp_path, capsys):
    """The README's advice for error rows, the same command with --retry-errors, found every shard's job
    COMPLETED under the same run label and launched nothing (issue 43, item 1). Asked for work, it makes it: each
    shard whose published slice holds an error row is launched again with the flag; once none does, nothing is."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done", "done"], 1: ["done", "done"]})
    argv = [INPUT, OUTPUT, "--jobs", "2"]
    assert run_launcher(jobs, hub, argv, capsys)[0] == 0 and len(jobs.launches) == 2
    jobs.errors_per_shard = 0
    code, summary, err, _ = run_launcher(jobs, hub, [*argv, "--retry-errors"], capsys)
    assert code == 0 and len(jobs.launches) == 4, err
    assert all(launch.script_args[-3:] == ("--retry-errors", "--shard", f"{index}/2")
               for index, launch in enumerate(jobs.launches[2:]))  # fmt: skip
    assert "launched (--retry-errors: its published slice holds 1 error row(s))" in err
    assert summary["errors"] == 0 and summary["pages"] == 200
    code, _, err, _ = run_launcher(jobs, hub, [*argv, "--retry-errors"], capsys)
    assert code == 0 and len(jobs.launches) == 4, "a shard without an error row was launched again"


def test_a_rerun_never_counts_another_runs_rows_as_its_own(tmp_path, capsys):
    """Run A, run B --overwrite with other sampling, then A --overwrite again found A's COMPLETED jobs and said
    every shard was in, over B's text (issue 43, item 1). A's rerun now clears B's results itself, before any job
    starts (N jobs each clearing them would refuse each other), and launches its shards again. Without --overwrite
    the other run's results refuse the command before any launch, as they would refuse each job."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done", "done"], 1: ["done", "done"]})
    run_a = [INPUT, OUTPUT, "--jobs", "2"]
    run_b = [*run_a, "--temperature", "0.5"]
    assert run_launcher(jobs, hub, run_a, capsys)[0] == 0
    sampling = json.loads((jobs.progress_dir() / "manifest.json").read_text())["sampling"]
    code, _, err, _ = run_launcher(jobs, hub, run_b, capsys)
    assert code == 2 and len(jobs.launches) == 2 and "holds results made another way" in err
    assert "sampling" in err and "--overwrite" in err
    jobs.rows_per_shard = 30
    code, summary, err, _ = run_launcher(jobs, hub, [*run_b, "--overwrite"], capsys)
    assert code == 0 and len(jobs.launches) == 4 and summary["pages"] == 60, err
    jobs.rows_per_shard = 100
    code, summary, err, _ = run_launcher(jobs, hub, [*run_a, "--overwrite"], capsys)
    assert code == 0 and len(jobs.launches) == 6 and summary["pages"] == 200, err
    assert "--overwrite: removing the results made another way (sampling differ)" in err
    manifest = json.loads((jobs.progress_dir() / "manifest.json").read_text())
    assert manifest["sampling"] == sampling and sampling["temperature"] != 0.5


def test_an_overwrite_refused_for_a_missing_token_removes_nothing(tmp_path, capsys, monkeypatch):
    """The launcher clears results made another way only once it can launch: a command error comes first."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    run_a = [INPUT, OUTPUT, "--jobs", "2"]
    assert run_launcher(jobs, hub, run_a, capsys)[0] == 0
    published = hub.list_files(OUTPUT)
    monkeypatch.delenv("HF_TOKEN")
    code, _, err, _ = run_launcher(jobs, hub, [*run_a, "--temperature", "0.5", "--overwrite"], capsys)
    assert code == 2 and "the jobs need the secret HF_TOKEN" in err and len(jobs.launches) == 2
    assert hub.list_files(OUTPUT) == published


def test_a_rerun_over_a_deleted_output_launches_every_shard_again(tmp_path, capsys):
    """The output repo deleted, the same command said "every shard is in" over 0 rows (issue 43, item 1): a shard
    is in only when its published slice is on the output."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done", "done"], 1: ["done", "done"]})
    argv = [INPUT, OUTPUT, "--jobs", "2"]
    assert run_launcher(jobs, hub, argv, capsys)[0] == 0
    shutil.rmtree(hub.repo(OUTPUT))
    code, summary, err, _ = run_launcher(jobs, hub, argv, capsys)
    assert code == 0 and len(jobs.launches) == 4 and summary["pages"] == 200, err
    assert "launched (its published slice is not on the output)" in err


def test_a_shard_whose_job_completed_without_publishing_is_not_counted_in(tmp_path, capsys):
    """Never exit 0 while a shard's rows are missing: a job this launcher watched end COMPLETED whose slice is not
    on the output (deleted meanwhile) leaves the run failed, exit 1, with the shard named."""
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    jobs.publish = lambda label: None
    code, summary, err, _ = run_launcher(jobs, hub, [INPUT, OUTPUT, "--jobs", "2"], capsys)
    assert code == 1 and summary["exit_code"] == 1 and summary["load_with"] is None, err
    assert [shard["state"] for shard in summary["shards"]] == ["not published"] * 2
    assert "not published: shard(s) 0/2, 1/2" in err


def test_jobs_with_create_pr_are_refused_before_any_launch_with_the_one_job_that_opens_one(tmp_path, capsys):
    """Each of N jobs opened a pull request of its own, then the summary counted 0 pages off the main branch and
    pointed at it, exit 0 (issue 43, item 8). N pull requests are not one dataset; one job opens one."""
    for flags in ((), ("--dry-run",)):
        fates = {0: ["done"], 1: ["done"]}
        jobs, code, summary, err, _ = launcher(tmp_path, fates, "--create-pr", *flags, capsys=capsys)
        assert code == 2 and summary["exit_code"] == 2 and jobs.launches == [] and jobs.listings == 0, err
        assert "--jobs 2 with --create-pr would open 2 pull requests" in err
        one_job = err.replace("\\\n", " ").split("hf jobs uv run", 1)[1]
        assert f"{INPUT} {OUTPUT} --create-pr" in one_job and "--jobs" not in one_job


def test_without_an_injected_hub_the_summary_reads_a_hub_output_through_a_hub_client(tmp_path, capsys, monkeypatch):
    """The real path: no Hub double is passed, so the launcher makes its own client for the output's slices (a
    Destination without one would read a local folder of that name and count no pages)."""
    from ocr_core.fanout import launcher as command

    hub = FolderHub(tmp_path / "hub")
    monkeypatch.setattr(command, "HfHub", lambda token: hub)
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    code, summary, _, _ = run_launcher(jobs, None, [INPUT, OUTPUT, "--jobs", "2"], capsys)
    assert code == 0 and summary["pages"] == 200


def test_the_real_jobs_client_sends_what_huggingface_hub_takes_and_reads_what_it_returns():
    """HfJobs over a recording stand-in for HfApi: the keyword arguments of huggingface_hub 2.4's calls, and its
    JobInfo (built from the API's own JSON) read back as the launcher's record."""
    from huggingface_hub import JobInfo

    from ocr_core.fanout.jobs import HfJobs, JobLaunch

    def job_json(job_id: str, run: str, stage: str) -> dict:
        return {
            "id": job_id, "createdAt": "2026-12-01T10:00:00.000Z", "finishedAt": "2026-12-01T10:30:00.000Z",
            "flavor": "h200", "labels": {RUN_LABEL: run, SHARD_LABEL: "00000-of-00002"},
            "durations": {"runningSecs": 1700}, "status": {"stage": stage, "message": None},
            "owner": {"id": "1", "name": "someone", "type": "user"},
        }  # fmt: skip

    info = JobInfo(**job_json("abc", "r", "COMPLETED"))
    calls = []

    class Api:
        def run_uv_job(self, script, **kwargs):
            calls.append((script, kwargs))
            return info

        def list_jobs(self, labels):
            calls.append(("list", labels))
            return [info, JobInfo(**job_json("other", "another", "RUNNING"))]

    client = HfJobs.__new__(HfJobs)
    client.api = Api()
    launch = JobLaunch("s.py", ("a", "b"), "img", "h200", "6h", ("HF_TOKEN",), {RUN_LABEL: "r"}, "ocr-r-0-of-2")
    record = client.launch(launch, {"HF_TOKEN": "secret"})
    assert calls[0] == (
        "s.py",
        {"script_args": ["a", "b"], "image": "img", "flavor": "h200", "timeout": "6h",
         "env": {}, "secrets": {"HF_TOKEN": "secret"}, "labels": {RUN_LABEL: "r", "name": "ocr-r-0-of-2"}},
    )  # fmt: skip
    assert (record.id, record.stage, record.running_s, record.flavor) == ("abc", "COMPLETED", 1700.0, "h200")
    assert (record.finished_at - record.created_at).total_seconds() == 1800
    assert [job.id for job in client.jobs_labelled({RUN_LABEL: "r"})] == ["abc"]


@dataclass
class CountingHub(FolderHub):
    """The Hub double, noting every file the launcher reads or downloads."""

    reads: list[str] = field(default_factory=list)
    downloads: list[str] = field(default_factory=list)

    def read_columns(self, repo_id, path_in_repo, columns):
        self.reads.append(path_in_repo)
        return super().read_columns(repo_id, path_in_repo, columns)

    def download(self, repo_id, path_in_repo, local_dir):
        self.downloads.append(path_in_repo)
        return super().download(repo_id, path_in_repo, local_dir)


PROGRESS = ".ocr-progress/default/train"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def write_part(hub: FolderHub, shard: tuple[int, int], rows: list[tuple[int, str | None]], strikes=None) -> str:
    """One part as a job of `shard` writes it (its tag, a run id of its own); `rows` are (row, error)."""
    tag = f"shard-{shard[0]:05d}-of-{shard[1]:05d}-"
    log = ResultLog(hub.repo(OUTPUT) / PROGRESS, tag + new_run_id())
    for row, error in rows:
        log.add(RowResult(row, f"train-{row}", text=None if error else "text", error=error, strikes=strikes))
    log.flush()
    return f"{PROGRESS}/part-{log.run_id}-00000.parquet"


def live_pages(hub: FolderHub, shards: int, max_samples: int | None = None) -> LivePages:
    return LivePages(Destination(OUTPUT, "train", None, hub), shards, max_samples)


def test_a_running_shards_pages_are_counted_from_its_progress_parts_each_read_once(tmp_path):
    """Done and error pages per shard from the parts on the output repo; a page retried, or a failed-attempts
    record, counts once or not at all (the newest record wins, as on resume); a second poll reads nothing again,
    a merge only its one new file; no file is ever downloaded whole."""
    hub = CountingHub(tmp_path / "hub")
    write_part(hub, (0, 2), [(0, None), (1, "timed out"), (2, None)])
    write_part(hub, (1, 2), [(50, None)])
    write_part(hub, (0, 3), [(7, None)])  # another N's shard: not this run's
    pages = live_pages(hub, 2)
    assert pages.count(hub.list_files(OUTPUT)) == {0: PageCount(2, 1), 1: PageCount(1, 0)}
    assert sorted(hub.reads) == sorted(name for name in hub.list_files(OUTPUT) if "of-00002" in name)

    write_part(hub, (0, 2), [(1, None), (3, None)])
    write_part(hub, (0, 2), [(4, "no answer")], strikes=1)
    reads = len(hub.reads)
    assert pages.count(hub.list_files(OUTPUT)) == {0: PageCount(4, 0), 1: PageCount(1, 0)}
    assert len(hub.reads) == reads + 2, "a part read at an earlier poll was read again"

    folder, tag = hub.repo(OUTPUT) / PROGRESS, "shard-00000-of-00002-"
    merged = merge(folder, sorted(path.name for path in folder.glob(f"part-{tag}*")), tag)
    assert len(merged) == 3
    reads = len(hub.reads)
    assert pages.count(hub.list_files(OUTPUT)) == {0: PageCount(4, 0), 1: PageCount(1, 0)}
    assert len(hub.reads) == reads + 1 and hub.reads[-1].startswith(f"{PROGRESS}/merged-shard-00000-of-00002-")
    assert len(hub.reads) == len(set(hub.reads)) and hub.downloads == []


def test_a_relaunched_shard_keeps_the_pages_its_earlier_job_wrote(tmp_path):
    hub = CountingHub(tmp_path / "hub")
    write_part(hub, (1, 2), [(row, None) for row in range(50, 60)])
    pages = live_pages(hub, 2)
    assert pages.count(hub.list_files(OUTPUT))[1] == PageCount(10, 0)
    write_part(hub, (1, 2), [(row, None) for row in range(60, 65)])
    assert pages.count(hub.list_files(OUTPUT))[1] == PageCount(15, 0)


def test_each_shards_planned_pages_come_from_the_manifest_the_first_job_writes(tmp_path):
    assert planned_pages({"input_rows": 10}, None, 3) == {0: 3, 1: 3, 2: 4}
    assert planned_pages({"input_rows": 10}, 4, 2) == {0: 2, 1: 2}
    assert planned_pages({"input": INPUT}, None, 2) is None and planned_pages(None, None, 2) is None
    hub = CountingHub(tmp_path / "hub")
    pages = live_pages(hub, 2)
    assert pages.plan(hub.list_files(OUTPUT)) is None
    (hub.repo(OUTPUT) / PROGRESS).mkdir(parents=True)
    (hub.repo(OUTPUT) / PROGRESS / "manifest.json").write_text(json.dumps({"input_rows": 201, "shards": 2}))
    assert pages.plan(hub.list_files(OUTPUT)) == {0: 100, 1: 101}
    assert pages.plan(hub.list_files(OUTPUT)) == {0: 100, 1: 101} and len(hub.downloads) == 1


def view(shard, step=Step.WAIT, pages=(0, 0), planned=None, ran_s=600.0, state="running"):
    return ShardView(shard, step, state, f"job-{shard}", ran_s, PageCount(*pages), planned)


def test_before_any_shard_is_in_the_finish_is_projected_from_the_running_shards_rates():
    history = ((NOW - timedelta(minutes=10), {0: 100, 1: 40}), (NOW, {0: 400, 1: 340}))
    snapshot = Snapshot((view(0, pages=(390, 10), planned=1000), view(1, pages=(340, 0), planned=1000)), 1.5, history)
    finish, basis = projected_finish(snapshot, NOW)
    assert finish == NOW + timedelta(seconds=660 / 0.5) and basis == "the running shards' rates"
    assert total_line(snapshot, NOW) == (
        "  0 of 2 shard(s) in; 740 of 2000 pages (10 with an error); 1.00 pages/s over the last 10 min; "
        "$1.50 billed so far; projected finish about 12:22 UTC (from the running shards' rates)"
    )


def test_no_finish_is_projected_from_nothing_and_the_money_is_always_on_the_total_line():
    """One shard's job not started yet, no shard in: no figure to project from. A shard whose plan is unknown
    goes by the finished shards' mean time."""
    history = ((NOW - timedelta(minutes=10), {0: 0, 1: 0}), (NOW, {0: 300, 1: 0}))
    waiting = Snapshot((view(0, pages=(300, 0), planned=1000), view(1, ran_s=0.0, state="scheduling")), 0.4, history)
    assert projected_finish(waiting, NOW) is None
    assert total_line(waiting, NOW).endswith("0.50 pages/s over the last 10 min; $0.40 billed so far")
    shards = (view(0, Step.DONE, (99, 1), ran_s=3600.0, state="completed"), view(1, pages=(20, 0), ran_s=600.0))
    unplanned = Snapshot(shards, None, ())
    assert projected_finish(unplanned, NOW) == (NOW + timedelta(minutes=50), "the finished shards' mean time")
    assert total_line(unplanned, NOW).startswith("  1 of 2 shard(s) in; 120 pages (1 with an error); cost unknown;")


def test_the_watch_shows_a_running_shards_pages_before_it_publishes_and_a_relaunch_keeps_them(tmp_path, capsys, ctrl_c):
    """Through the launcher: each running job leaves a part of 10 pages (1 an error) at every listing; shard 1's
    first job times out after one, and its relaunch goes on from it. Every part is read once and none downloaded."""
    hub = CountingHub(tmp_path / "hub")
    (hub.repo(OUTPUT) / PROGRESS).mkdir(parents=True)
    (hub.repo(OUTPUT) / PROGRESS / "manifest.json").write_text(json.dumps({"input_rows": 200, "shards": 2}))
    stop = lambda double: double.listings == 5 and signal.raise_signal(signal.SIGINT)  # noqa: E731
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["running"], 1: ["timeout", "running"]}, progress_rows=10, on_listing=stop)
    code, summary, err, _ = run_launcher(jobs, hub, [INPUT, OUTPUT, "--jobs", "2"], capsys)
    assert code == 130 and summary["detached"]
    totals = [line for line in err.splitlines() if "shard(s) in;" in line]
    assert totals[0].startswith("  0 of 2 shard(s) in; 20 of 200 pages (2 with an error);")
    assert totals[-1].startswith("  0 of 2 shard(s) in; 50 of 200 pages (5 with an error);")
    assert all("billed so far" in line for line in totals)
    shard_lines = [line.split() for line in err.splitlines() if line.startswith("  shard 1/2:")]
    assert shard_lines[-1][2:4] == ["running", "20/100"] and shard_lines[-1][-1] == "job-2"
    parts = [name for name in hub.list_files(OUTPUT) if name.endswith(".parquet")]
    assert len(parts) == 5 and sorted(hub.reads) == sorted(parts)
    assert not any(name.endswith(".parquet") for name in hub.downloads)


SERVER_PASSWORD = "pw-of-the-server-1357"
SERVE_TOKEN = "hf_" + "S3rveArgs" * 3
API_KEY = "sk-key-of-the-server-8642"
SECRET_FLAGS = (
    "--server", f"http://ocr:{SERVER_PASSWORD}@10.0.0.7:8000",
    "--extra-serve-args", f"--hf-overrides {{}} --hf-token {SERVE_TOKEN}",
)  # fmt: skip


def job_settings(launch, secrets: dict[str, str], monkeypatch):
    """The settings a job parses from what it was sent: its arguments, with its secrets in its environment."""
    from ocr_core.command.checks import parse_command
    from ocr_core.command.sealed_arguments import unsealed

    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    parser = build_parser(SCRIPT, model_facts("lighton_ocr3"), "saturate")
    return parse_command(parser, unsealed(list(launch.script_args), parser.error))[0]


def test_a_dry_run_prints_no_secret_of_the_servers_url_or_the_serve_flags(tmp_path, capsys):
    """A password in --server's URL and a token inside --extra-serve-args were printed in clear (issue 43)."""
    _, code, _, err, out = launcher(tmp_path, {0: [], 1: []}, "--dry-run", *SECRET_FLAGS, capsys=capsys)
    assert code == 0, err
    assert len(printed_commands(out)) == 2
    assert SERVER_PASSWORD not in out + err and SERVE_TOKEN not in out + err


def test_secrets_in_the_jobs_arguments_travel_as_a_job_secret_and_the_job_reads_them_back(
    tmp_path, capsys, monkeypatch
):
    """The job page shows a job's arguments: a password in --server's URL or a token in --extra-serve-args went
    there in clear. They go masked, and the words they belong in go as a job secret the job puts back (issue 43)."""
    jobs, code, _, err, _ = launcher(tmp_path, {0: ["done"], 1: ["done"]}, *SECRET_FLAGS, capsys=capsys)
    assert code == 0, err
    for launch, secrets in zip(jobs.launches, jobs.secrets_sent):
        sent = " ".join(launch.script_args)
        assert SERVER_PASSWORD not in sent and SERVE_TOKEN not in sent and "***" in sent
        settings = job_settings(launch, secrets, monkeypatch)
        assert settings.server == SECRET_FLAGS[1] and settings.extra_serve_args == SECRET_FLAGS[3]


def test_the_api_key_reaches_every_job_as_a_secret_and_never_as_an_argument(tmp_path, capsys, monkeypatch):
    """--api-key was taken off the jobs' arguments and only HF_TOKEN sent, so every request got 401 and every
    shard was given up, while the same command without --jobs worked (issue 43)."""
    flags = ("--server", "http://10.0.0.7:8000", "--api-key", API_KEY)
    jobs, code, _, err, _ = launcher(tmp_path, {0: ["done"], 1: ["done"]}, *flags, capsys=capsys)
    assert code == 0, err
    for launch, secrets in zip(jobs.launches, jobs.secrets_sent):
        assert API_KEY not in " ".join(launch.script_args) and API_KEY in secrets.values()
        monkeypatch.delenv("VLLM_API_KEY", raising=False)
        assert job_settings(launch, secrets, monkeypatch).api_key == API_KEY


def test_the_watch_reads_progress_files_published_after_its_first_read_through_the_real_hub_client(
    tmp_path, monkeypatch
):
    """huggingface_hub's HfFileSystem is cached per token and fills a folder's listing at its first read: every
    progress file published after that was "not found" without a request, and the count froze at the first
    poll's while the shard's pages grew (issue 43). The real client, against a loopback Hub stand-in."""
    from huggingface_hub import constants

    from ocr_core.store.hub import HfHub
    from tests.testbed.hub_http import serving_hub

    folder = FolderHub(tmp_path / "hub")
    counts = []
    with serving_hub(folder.root) as (endpoint, requests):
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        template = f"{endpoint}/{{repo_id}}/resolve/{{revision}}/{{filename}}"
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        destination = Destination(OUTPUT, "train", None, HfHub("hf_" + "L0opback" * 4))
        pages = LivePages(destination, 1, None)
        for poll in range(3):
            write_part(folder, (0, 1), [(row, None) for row in range(poll * 10, poll * 10 + 10)])
            counts.append(pages.count(destination.listing()))
            assert pages.unread == {}, pages.unread
    assert [count[0].pages for count in counts] == [10, 20, 30]
    assert any("/resolve/" in request for request in requests), "the stand-in served no file: the test read nothing"


HPD = "hpd-parsing-saturate.py"
HPD_URL = f"https://huggingface.co/datasets/uv-scripts/ocr-vllm/raw/main/{HPD}"
HPD_IMAGE = model_facts("hpd_parsing").image


def hpd_launcher(tmp_path, capsys, *flags):
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    capsys.readouterr()
    code = run_entry(HPD, [INPUT, OUTPUT, "--jobs", "2", *flags], hub, jobs)
    out, err = capsys.readouterr()
    return jobs, code, err, out


def test_a_recipe_whose_image_has_no_uv_is_launched_with_its_own_job_command(tmp_path, capsys):
    """HPD's vendor image has no uv: `hf jobs uv run` there cannot start, and --jobs 2 paid for 6 failed GPU
    jobs, then exited 1. Its jobs run the recipe's own job command: uv installed first, then the released script
    with the shard's arguments (issue 43)."""
    _, code, err, out = hpd_launcher(tmp_path, capsys, "--dry-run")
    assert code == 0, err
    lines = out.replace("\\\n", " ").splitlines()
    commands = [shlex.split(line) for line in lines if line.startswith("hf jobs ")]
    assert len(commands) == 2
    for index, words in enumerate(commands):
        assert words[:3] == ["hf", "jobs", "run"] and "--image" not in words
        run = f"pip install -q uv && uv run {HPD_URL} {INPUT} {OUTPUT} --shard {index}/2"
        assert words[-5:] == [HPD_IMAGE, "--", "bash", "-lc", run]

    jobs, code, err, _ = hpd_launcher(tmp_path / "run", capsys)
    assert code == 0, err
    for index, launch in enumerate(jobs.launches):
        assert launch.image == HPD_IMAGE
        assert launch.command == (
            "bash",
            "-lc",
            f"pip install -q uv && uv run {HPD_URL} {INPUT} {OUTPUT} --shard {index}/2",
        )


def test_a_recipe_whose_image_has_no_uv_cannot_ship_a_copy_and_says_the_command_that_works(
    tmp_path, capsys, monkeypatch
):
    """Only `hf jobs uv run` ships this machine's files with a job: a copy's own bytes or a core wheel cannot
    reach an image without uv, so the launcher refuses before any launch and names the released script's
    command, which installs the release's core."""
    monkeypatch.setattr(launch_command, "released_scripts", lambda: None)
    for flags in ((f"--core-wheel={core_wheel()}",), ()):
        jobs, code, err, out = hpd_launcher(tmp_path, capsys, *flags)
        assert code == 2 and jobs.launches == [] and jobs.listings == 0
        assert json.loads(out.strip().splitlines()[-1])["exit_code"] == 2
        assert f"uv run {HPD_URL} {INPUT} {OUTPUT} --jobs 2" in err and "make submit" not in err, err


def test_the_real_jobs_client_runs_a_launch_with_its_own_command_on_its_image():
    """A launch that carries a command (an image without uv) goes through run_job, never run_uv_job."""
    from huggingface_hub import JobInfo

    from ocr_core.fanout.jobs import HfJobs, JobLaunch

    calls = []
    info = JobInfo(
        id="abc", createdAt="2026-12-01T10:00:00.000Z", flavor="l4x1", labels={}, status={"stage": "RUNNING"},
        owner={"id": "1", "name": "someone", "type": "user"},
    )  # fmt: skip

    class Api:
        def run_job(self, **kwargs):
            calls.append(kwargs)
            return info

    client = HfJobs.__new__(HfJobs)
    client.api = Api()
    command = ("bash", "-lc", "pip install -q uv && uv run URL a b")
    launch = JobLaunch("URL", ("a", "b"), "vendor", "l4x1", "4h", ("HF_TOKEN",), {RUN_LABEL: "r"}, "n", {}, command)
    assert client.launch(launch, {"HF_TOKEN": "secret"}).id == "abc"
    assert calls == [
        {"image": "vendor", "command": list(command), "env": {}, "secrets": {"HF_TOKEN": "secret"},
         "flavor": "l4x1", "timeout": "4h", "labels": {RUN_LABEL: "r", "name": "n"}},
    ]  # fmt: skip


@pytest.mark.parametrize("prefix", ["2026-12-01T10:00:00.123Z ", "[stdout] ", "job-7 | "])
def test_a_summary_line_behind_a_log_prefix_is_read_as_the_jobs_failure(prefix):
    """A log that prefixes each line (a timestamp, a stream name) hid the recipe's summary line: the launcher knew
    no failure, so a shard that failed the same way twice was relaunched until --max-relaunches (issue 43)."""
    from ocr_core.fanout.heal import Attempt, decide, failure_of
    from ocr_core.fanout.jobs import JobRecord
    from tests.testbed.jobs_double import summary_line

    line = prefix + summary_line(2, "--max-tokens 9000 must be below --max-model-len 4096")
    failure = failure_of(["starting", line])
    assert failure == "exit 2: --max-tokens 9000 must be below --max-model-len 4096"
    jobs = [JobRecord(f"j{at}", {}, "ERROR", None, NOW - timedelta(minutes=at), NOW, 60.0, "l4x1") for at in (1, 2)]
    step = decide([Attempt(job, failure, (line,)) for job in jobs], 5, {"j1", "j2"}, {})
    assert step.step is Step.GIVE_UP and "failed the same way twice" in step.reason


def rebuilt_wheel(wheel: Path, folder: Path, name: str, text: bytes) -> Path:
    """A wheel of the same version as `wheel` whose file `name` holds other bytes, its RECORD saying so, as a
    build of other code under the same version number is."""
    import base64
    import zipfile

    digest = base64.urlsafe_b64encode(hashlib.sha256(text).digest()).rstrip(b"=").decode()
    rebuilt = folder / wheel.name
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(rebuilt, "w") as target:
        for item in source.infolist():
            data = text if item.filename == name else source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                rows = source.read(item).decode().splitlines()
                data = "\n".join(f"{name},sha256={digest},{len(text)}" if row.startswith(f"{name},") else row
                                 for row in rows).encode() + b"\n"  # fmt: skip
            target.writestr(item, data)
    return rebuilt


def test_a_job_whose_core_is_another_build_of_the_shipped_wheels_version_stops_before_its_first_page(tmp_path, capsys):
    """The job's check compared the version only: a job whose uv installed another build of that version (a
    cached wheel of other code) OCRed its shard with code nobody shipped. The shipped wheel's own file hashes are
    checked against the core the job imported (issue 43)."""
    from tests.test_resume_publish import served
    from tests.testbed.fake_server import fake_server

    wheel = core_wheel()
    edited = (REPO_ROOT / "src" / "ocr_core" / "console.py").read_bytes() + b"# another build\n"
    other = rebuilt_wheel(wheel, tmp_path / "other-build", "ocr_core/console.py", edited)
    with fake_server() as server:
        for shipped, out in ((other, tmp_path / "out"), (wheel, tmp_path / "out-shipped")):
            capsys.readouterr()
            code = run_entry(SCRIPT, [str(SAMPLES), str(out), "--core-wheel", str(shipped), *served(server)])
            err = capsys.readouterr().err
            if shipped == other:
                assert code == 2 and "ocr_core/console.py" in err and "not the bytes" in err, err
                assert not out.exists()
            else:
                assert code == 0, err


def test_hf_jobs_run_starts_the_printed_command_of_an_image_without_uv_as_the_launcher_does(
    tmp_path, capsys, monkeypatch
):
    """The dry run's `hf jobs run` command for HPD, given to hf's own CLI over a recording HfApi: the job the
    CLI asks for is the one the launcher sends, its image, its command and its token as a secret."""
    from huggingface_hub import HfApi, JobInfo
    from huggingface_hub.cli.hf import app

    _, code, err, out = hpd_launcher(tmp_path, capsys, "--dry-run")
    assert code == 0, err
    words = shlex.split(out.replace("\\\n", " ").splitlines()[0])
    calls: dict = {}

    def run_job(self, **job):
        calls["job"] = job
        owner = {"id": "1", "name": "someone", "type": "user"}
        return JobInfo(id="j1", createdAt="2026-12-01T10:00:00.000Z", status={"stage": "RUNNING"}, owner=owner)

    monkeypatch.setattr(HfApi, "run_job", run_job)
    app(words[1:], standalone_mode=False, windows_expand_args=False)
    job = calls["job"]
    assert job["image"] == HPD_IMAGE and job["command"] == words[-3:] and words[-3:-1] == ["bash", "-lc"]
    assert job["secrets"] == {"HF_TOKEN": "token-for-the-jobs"} and job["flavor"] == "l4x1"
    assert job["labels"][SHARD_LABEL] == "00000-of-00002"
