"""The thin layer between the launcher and HF Jobs: four calls, so tests hand the launcher a double.

`JobRecord` is what the launcher needs of a job (huggingface_hub's JobInfo carries much more); `HfJobs` is the real
client, a few lines of `huggingface_hub` (2.4: `run_uv_job`, or `run_job` for an image without uv, `list_jobs`,
`inspect_job`, `fetch_job_logs`; never `cancel_job`: a launcher that stops leaves its jobs running).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from ..planning.cache_volume import BUCKET_SCHEME

RUNNING_STAGES = frozenset({"SCHEDULING", "RUNNING"})
FAILED_STAGES = frozenset({"ERROR", "CANCELED", "DELETED"})
DONE_STAGE = "COMPLETED"


@dataclass(frozen=True)
class JobRecord:
    """One job as the launcher sees it: its id, labels, stage (and the message that came with it), when it was
    created and finished, the seconds it ran (what HF Jobs bill) and its flavor."""

    id: str
    labels: Mapping[str, str]
    stage: str
    message: str | None
    created_at: datetime
    finished_at: datetime | None
    running_s: float
    flavor: str | None
    url: str | None = None

    @property
    def running(self) -> bool:
        return self.stage in RUNNING_STAGES

    @property
    def failed(self) -> bool:
        return self.stage in FAILED_STAGES


@dataclass(frozen=True)
class JobLaunch:
    """Everything one `run_uv_job` call sends (secrets by name; their values are read only when sending). The
    files of this machine that `script` and `script_args` name travel with the job (HF Jobs mount them at /data);
    `volumes` are `hf://buckets/NAMESPACE/NAME[/PATH]:/MOUNT` specs, as `hf jobs uv run -v` takes them. `command`,
    for an image without uv, is what the job runs in it instead (`run_job`): the recipe's own job command, which
    installs uv and runs the script from its URL; no file travels with it."""

    script: str
    script_args: tuple[str, ...]
    image: str
    flavor: str
    timeout: str
    secrets: tuple[str, ...]
    labels: Mapping[str, str]
    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()


class JobsClient(Protocol):
    """`runs_here`: whether the jobs run on this machine (a test's double), so they can read its paths."""

    runs_here: bool

    def launch(self, launch: JobLaunch, secrets: Mapping[str, str]) -> JobRecord: ...

    def jobs_labelled(self, labels: Mapping[str, str]) -> list[JobRecord]: ...

    def inspect(self, job_id: str) -> JobRecord: ...

    def log_tail(self, job_id: str, lines: int) -> list[str]: ...


class HfJobs:
    """JobsClient over `huggingface_hub.HfApi`."""

    runs_here = False

    def __init__(self, token: str | None) -> None:
        from huggingface_hub import HfApi

        self.api = HfApi(token=token)

    def launch(self, launch: JobLaunch, secrets: Mapping[str, str]) -> JobRecord:
        sent = {
            "image": launch.image,
            "env": dict(launch.env),
            "secrets": dict(secrets),
            "flavor": launch.flavor,
            "timeout": launch.timeout,
            "labels": {**launch.labels, "name": launch.name},
        }
        if launch.volumes:
            sent["volumes"] = [bucket_volume(spec) for spec in launch.volumes]
        if launch.command:
            return record_of(self.api.run_job(command=list(launch.command), **sent))
        return record_of(self.api.run_uv_job(launch.script, script_args=list(launch.script_args), **sent))

    def jobs_labelled(self, labels: Mapping[str, str]) -> list[JobRecord]:
        found = [record_of(info) for info in self.api.list_jobs(labels=dict(labels))]
        return [job for job in found if all(job.labels.get(key) == value for key, value in labels.items())]

    def inspect(self, job_id: str) -> JobRecord:
        return record_of(self.api.inspect_job(job_id=job_id))

    def log_tail(self, job_id: str, lines: int) -> list[str]:
        return list(self.api.fetch_job_logs(job_id=job_id, tail=lines))


def bucket_volume(spec: str) -> Any:
    """huggingface_hub's Volume for an `hf://buckets/NAMESPACE/NAME[/PATH]:/MOUNT` spec (read-write)."""
    from huggingface_hub import Volume

    source, _, mount = spec.removeprefix(BUCKET_SCHEME).rpartition(":")
    namespace, name, *path = source.split("/")
    return Volume(type="bucket", source=f"{namespace}/{name}", mount_path=mount, path="/".join(path) or None)


def record_of(info: Any) -> JobRecord:
    """A JobInfo as the launcher's record; a job that never ran has run (and billed) 0 seconds, and one the API
    gives no creation time counts as created now."""
    durations = getattr(info, "durations", None)
    running = getattr(durations, "running_secs", None) or 0
    return JobRecord(
        id=info.id,
        labels=dict(info.labels or {}),
        stage=str(getattr(info.status.stage, "value", info.status.stage)),
        message=info.status.message,
        created_at=info.created_at or datetime.now(timezone.utc),
        finished_at=info.finished_at,
        running_s=float(running),
        flavor=str(getattr(info.flavor, "value", info.flavor)) if info.flavor else None,
        url=getattr(info, "url", None),
    )


def newest_first(jobs: Sequence[JobRecord]) -> list[JobRecord]:
    return sorted(jobs, key=lambda job: job.created_at, reverse=True)
