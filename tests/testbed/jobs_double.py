"""Two HF Jobs client doubles, injected into a `--jobs N` launcher as the Hub double is into a run.

`ScriptedJobs` plays each launch's fate as the test wrote it (done, an error with the recipe's summary line, a
timeout, a cancel), one step per listing; a started job writes the manifest a real job writes (the recipe's own
fingerprint of its command line), and a finished one publishes its shard's facts file and a data file to the Hub
double as a real shard would; with `progress_rows`, a running job also leaves a progress part of that many rows at
each listing, named and written as a real job's (progress.ResultLog under its shard's tag), going on from its
shard's earlier parts as a relaunch resumes. It records how many of its jobs run, the new one included, at every
launch, and every shard a job publishes. `LocalJobs` runs each launch's command as a local process (the recipe,
with the Hub double and the job's id in JOB_ID, as HF Jobs set it), so a test sees the real shards publish one
dataset; with `install`, each job also installs its script as a job does, from the files shipped with it and
nothing of this machine's set-up.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.fanout.jobs import RUNNING_STAGES, JobLaunch, JobRecord
from ocr_core.fanout.plan import SHARD_LABEL
from ocr_core.store.layout import slice_facts_name
from ocr_core.store.manifest import write_manifest
from ocr_core.store.progress import ResultLog, RowResult, new_run_id, read_results
from ocr_models import recipe
from tests.testbed.env import REPO_ROOT, UV, VENV_PYTHON, script_python
from tests.testbed.hub_double import FolderHub
from tools.recipes import load_script

from .handles import fingerprint_of

EPOCH = datetime(2026, 12, 1, tzinfo=timezone.utc)
# Where HF Jobs mount the files a job's command line names (huggingface_hub.constants.HF_JOBS_ARTIFACTS_MOUNT_PATH)
JOB_MOUNT = "/data"
# What a job's machine has not: the test session's pointers to this checkout's wheels
SESSION_UV_VARIABLES = ("UV_NO_SOURCES", "UV_FIND_LINKS")
SECONDS_PER_STEP = 600.0
# The input's revision a scripted job resolves (a real one asks the Hub)
INPUT_REVISION = "sha-of-the-input"


def summary_line(code: int, failure: str | None) -> str:
    return json.dumps({"script": "x.py", "failure": failure, "exit_code": code})


# what a scripted job ends as: its stage, its status message and its last log lines
FATES = {
    "done": ("COMPLETED", None, [summary_line(0, None)]),
    "canary": ("ERROR", None, ["error: the canary ...", summary_line(1, "the first 8 answers are all '!!!!'")]),
    "bad flag": ("ERROR", None, [summary_line(2, "--max-tokens 9000 must be below --max-model-len 4096")]),
    "oom": ("ERROR", None, ["CUDA out of memory", summary_line(1, "the server died: out of memory")]),
    "timeout": ("ERROR", "Job timeout", ["stopped by SIGTERM", summary_line(143, "interrupted")]),
    "cancel": ("CANCELED", None, []),
}


@dataclass
class ScriptedJob:
    record: JobRecord
    fate: str
    launch: JobLaunch | None


@dataclass
class ScriptedJobs:
    """`fates[shard]` lists what each successive launch of that shard ends as; a launch runs for one listing
    (RUNNING, billed 600 s a listing), then ends. `hub` and `repo` receive a finished shard's facts file."""

    hub: FolderHub
    repo: str
    fates: dict[int, list[str]]
    flavor: str = "l4x1"
    rows_per_shard: int = 100
    errors_per_shard: int = 1
    runs_here: bool = False
    progress_rows: int = 0
    jobs: dict[str, ScriptedJob] = field(default_factory=dict)
    launches: list[JobLaunch] = field(default_factory=list)
    secrets_sent: list[dict[str, str]] = field(default_factory=list)
    listings: int = 0
    on_listing: Callable[[ScriptedJobs], None] | None = None
    running_at_launch: list[int] = field(default_factory=list)
    published: list[str] = field(default_factory=list)

    def add(self, labels: Mapping[str, str], stage: str, fate: str = "done") -> JobRecord:
        """A job that exists before the launcher starts (another launcher's)."""
        job_id = f"job-{len(self.jobs)}"
        record = JobRecord(job_id, dict(labels), stage, None, self.clock(), None, 0.0, self.flavor)
        self.jobs[job_id] = ScriptedJob(record, fate, None)
        if stage in ("COMPLETED", "ERROR", "CANCELED"):
            self.finish(job_id)
        return record

    def clock(self) -> datetime:
        return EPOCH + timedelta(seconds=SECONDS_PER_STEP * (len(self.jobs) + self.listings))

    def launch(self, launch: JobLaunch, secrets: Mapping[str, str]) -> JobRecord:
        assert set(secrets) == set(launch.secrets) and all(secrets.values()), "a job was launched without its secrets"
        shard = int(launch.labels[SHARD_LABEL].partition("-of-")[0])
        tried = sum(1 for job in self.launches if job.labels == launch.labels)
        self.launches.append(launch)
        self.secrets_sent.append(dict(secrets))
        fate = self.fates[shard][tried]
        running = sum(job.record.stage in RUNNING_STAGES for job in self.jobs.values())
        self.running_at_launch.append(running + 1)
        job_id = f"job-{len(self.jobs)}"
        record = JobRecord(job_id, dict(launch.labels), "SCHEDULING", None, self.clock(), None, 0.0, self.flavor)
        self.jobs[job_id] = ScriptedJob(record, fate, launch)
        return record

    def jobs_labelled(self, labels: Mapping[str, str]) -> list[JobRecord]:
        self.listings += 1
        if self.on_listing is not None:
            self.on_listing(self)
        for job_id, job in list(self.jobs.items()):
            if job.record.stage == "SCHEDULING":
                self.jobs[job_id].record = replace_record(job.record, stage="RUNNING", running_s=SECONDS_PER_STEP)
                self.start(job.launch)
            elif job.record.stage == "RUNNING" and job.fate != "running":
                self.finish(job_id)
        for job in self.jobs.values():
            if job.record.stage == "RUNNING" and self.progress_rows:
                self.write_part(job.record)
        found = [job.record for job in self.jobs.values()]
        return [job for job in found if all(job.labels.get(key) == value for key, value in labels.items())]

    def finish(self, job_id: str) -> None:
        job = self.jobs[job_id]
        stage, message, _ = FATES[job.fate]
        ran = job.record.running_s + SECONDS_PER_STEP
        job.record = replace_record(job.record, stage=stage, message=message, running_s=ran, finished_at=self.clock())
        if stage == "COMPLETED":
            self.publish(job.record.labels[SHARD_LABEL])

    def start(self, launch: JobLaunch | None) -> None:
        """The manifest a job writes before its first page (a job another launcher started has none here)."""
        if launch is not None:
            shards = int(launch.labels[SHARD_LABEL].partition("-of-")[2])
            write_manifest(self.progress_dir(), job_manifest(launch, self.rows_per_shard * shards))

    def publish(self, label: str) -> None:
        """What a finished shard commits (slices.py): its data file and its facts file, with this double's row and
        error counts."""
        self.published.append(label)
        index, _, total = label.partition("-of-")
        shard = (int(index), int(total))
        facts = {"shard": list(shard), "rows": self.rows_per_shard, "errors": self.errors_per_shard, "truncated": 0}
        path = self.progress_dir() / slice_facts_name(shard)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(facts))
        data = self.hub.repo(self.repo) / "data" / f"train-{label}-00000.parquet"
        data.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"row": list(range(self.rows_per_shard))}), data)

    def write_part(self, record: JobRecord) -> None:
        """The next `progress_rows` pages of the job's shard, every tenth an error."""
        label = record.labels[SHARD_LABEL]
        folder = self.progress_dir()
        log = ResultLog(folder, f"shard-{label}-{new_run_id()}-{record.id}")
        start = sum(row_id.startswith(f"{label}-") for row_id in read_results(folder, ["row_id"])["row_id"].to_pylist())
        for row in range(start, start + self.progress_rows):
            error = "no answer" if row % 10 == 9 else None
            log.add(RowResult(row, f"{label}-{row}", text=None if error else "text", error=error))
        log.flush()

    def progress_dir(self) -> Path:
        return self.hub.repo(self.repo) / ".ocr-progress" / "default" / "train"

    def inspect(self, job_id: str) -> JobRecord:
        return self.jobs[job_id].record

    def log_tail(self, job_id: str, lines: int) -> list[str]:
        return FATES[self.jobs[job_id].fate][2][-lines:]


def replace_record(record: JobRecord, **changes) -> JobRecord:
    return JobRecord(**{**vars(record), **changes})


def job_manifest(launch: JobLaunch, input_rows: int) -> dict:
    """The manifest a job of `launch` writes: the recipe's own fingerprint of the job's command line, with the
    input's revision and rows as the job settles them."""
    name = Path(launch.script).name
    facts = load_script(name).FACTS
    settings = parse_arguments(build_parser(name, facts, recipe(name).shape), list(launch.script_args))
    return fingerprint_of(settings, facts, name, INPUT_REVISION, input_rows)


@dataclass
class LocalJob:
    record: JobRecord
    process: subprocess.Popen
    log: Path


@dataclass
class LocalJobs:
    """Each launch runs `tests.testbed.hub_run` (the shipped script's entry with the Hub double at `hub_folder`)
    in its own process and work folder, as a job runs on its own machine. `stop_first` names shards whose first
    job is stopped by `stop_signal` once it is running: SIGTERM, as HF Jobs stop a job at its timeout, or SIGKILL,
    as a job dies of out of memory or a lost machine.

    By default a job runs on the script's environment the session synced. With `install`, it starts as
    `hf jobs uv run` starts one: each file of this machine its command names is copied to the job's own mount
    folder (HF Jobs upload them and mount them at /data) and the words rewritten to it; the script's environment is
    built from its header by uv with the launch's variables and none of the session's (offline, from uv's cache: no
    wheel URL can be fetched, as none may be in a test), and a job whose install fails ends as ERROR with uv's
    words in its log."""

    hub_folder: Path
    work: Path
    env: Mapping[str, str]
    stop_first: frozenset[int] = frozenset()
    stop_signal: signal.Signals = signal.SIGTERM
    install: bool = False
    runs_here: bool = True
    jobs: dict[str, LocalJob] = field(default_factory=dict)

    def launch(self, launch: JobLaunch, secrets: Mapping[str, str]) -> JobRecord:
        job_id = f"local-{len(self.jobs)}"
        log = self.work / f"{job_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {**self.env, **secrets, "OCR_WORK_DIR": str(self.work / job_id), "JOB_ID": job_id}
        script, args = Path(launch.script).name, list(launch.script_args)
        python = script_python(script)
        if self.install:
            mount = self.work / job_id / "data"
            script, *args = shipped([launch.script, *launch.script_args], mount)
            env = job_env(env, launch.env, mount)
            python = installed_python(Path(script), env, log)
        command = [str(python), "-m", "tests.testbed.hub_run", str(self.hub_folder), script, *args]
        if python is None:  # its install failed: the job ends as ERROR, with uv's words in its log
            command = ["false"]
        with open(log, "a") as handle:
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
        now = datetime.now(timezone.utc)
        record = JobRecord(job_id, dict(launch.labels), "RUNNING", None, now, None, 0.0, launch.flavor)
        shard = int(launch.labels[SHARD_LABEL].partition("-of-")[0])
        if shard in self.stop_first and not any(job.record.labels == launch.labels for job in self.jobs.values()):
            self.stop_when_started(process, log, self.stop_signal)
        self.jobs[job_id] = LocalJob(record, process, log)
        return record

    @staticmethod
    def stop_when_started(process: subprocess.Popen, log: Path, signum: signal.Signals) -> None:
        """The signal once the run says what it will do (its rows counted, its lease on the Hub), so it stops in the
        middle of its shard."""
        while process.poll() is None and "to do" not in log.read_text():
            time.sleep(0.2)
        if process.poll() is None:
            process.send_signal(signum)

    def jobs_labelled(self, labels: Mapping[str, str]) -> list[JobRecord]:
        return [self.inspect(job_id) for job_id in self.jobs if self.labels_match(job_id, labels)]

    def labels_match(self, job_id: str, labels: Mapping[str, str]) -> bool:
        return all(self.jobs[job_id].record.labels.get(key) == value for key, value in labels.items())

    def inspect(self, job_id: str) -> JobRecord:
        job = self.jobs[job_id]
        code = job.process.poll()
        now = datetime.now(timezone.utc)
        ran = (now - job.record.created_at).total_seconds()
        if code is None:
            return replace_record(job.record, running_s=ran)
        if job.record.finished_at is None:
            job.record = replace_record(
                job.record, stage="COMPLETED" if code == 0 else "ERROR", finished_at=now, running_s=ran
            )
        return job.record

    def log_tail(self, job_id: str, lines: int) -> list[str]:
        return self.jobs[job_id].log.read_text().splitlines()[-lines:]


def job_env(base: Mapping[str, str], launch_env: Mapping[str, str], mount: Path) -> dict[str, str]:
    """A job's variables: this machine's less the session's pointers to its wheels, with the launch's (their
    /data read as the job's mount folder); offline, so uv can fetch no wheel URL, on the test bed's interpreter."""
    env = {key: value for key, value in base.items() if key not in SESSION_UV_VARIABLES}
    env |= {key: value.replace(JOB_MOUNT, str(mount)) for key, value in launch_env.items()}
    return env | {"UV_OFFLINE": "1", "UV_PYTHON": str(VENV_PYTHON)}


def mounted(words: list[str], mount: str) -> list[str]:
    """The words of a job's command as huggingface_hub 2.4's run_uv_job rewrites them: each that is the path of a
    file of this machine (which it uploads) becomes that file's name under the job's `mount`."""
    return [f"{mount}/{Path(word).name}" if Path(word).is_file() else word for word in words]


def shipped(words: list[str], mount: Path) -> list[str]:
    """The files `words` name copied into `mount`, and the words rewritten to the copies, as a job sees them."""
    mount.mkdir(parents=True, exist_ok=True)
    for word in words:
        if Path(word).is_file():
            shutil.copy2(word, mount / Path(word).name)
    return mounted(words, str(mount))


def installed_python(script: Path, env: Mapping[str, str], log: Path) -> Path | None:
    """The interpreter of the environment uv builds for `script` under `env`, as a job's `uv run` would; None
    when uv cannot build it (what uv said goes to the job's log)."""
    with open(log, "a") as handle:
        synced = subprocess.run([str(UV), "sync", "--script", str(script)], env=dict(env), stdout=handle,
                                stderr=subprocess.STDOUT, cwd=script.parent)  # fmt: skip
    if synced.returncode != 0:
        return None
    found = subprocess.run([str(UV), "python", "find", "--script", str(script)], env=dict(env), capture_output=True,
                           text=True, check=True)  # fmt: skip
    return Path(found.stdout.strip())
