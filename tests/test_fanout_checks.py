"""`--jobs N`'s checks before any job is paid for, and the hand commands its dry run prints (issue 50, items 3-5).

A dry run's command must start the job it stands for, credentials and all, when a user runs it by hand; a core
wheel that is not one (a failed download saved under the wheel's name) is refused by the launcher and by the job;
an INPUT or OUTPUT that names no Hub dataset is refused by the launcher as a plain run refuses it.
"""

from __future__ import annotations

import json
import shlex
import zipfile
from pathlib import Path

import pytest

from ocr_core.fanout import launcher as launch_command
from ocr_core.redaction import MASK, redact
from tests.test_fanout import (
    API_KEY,
    INPUT,
    OUTPUT,
    SAMPLES,
    SCRIPT,
    SECRET_FLAGS,
    SERVE_TOKEN,
    SERVER_PASSWORD,
    core_wheel,
    job_settings,
    launcher,
    printed_commands,
    quick_polls,  # noqa: F401 (the launcher's fixture: no waits, a release build's table, a token)
    run_launcher,
)
from tests.test_resume_publish import run_main, served
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub
from tests.testbed.jobs_double import ScriptedJobs

NO_HUB_ID = "your name/scans ocr!"
WHEEL_NAME = "ocr_vllm_core-0.2.0-py3-none-any.whl"


def exported(err: str) -> dict[str, str]:
    """The `export NAME=VALUE` lines the dry run told the user to run, as the shell would set them."""
    found = {}
    for line in err.splitlines():
        words = shlex.split(line.strip()) if line.strip().startswith("export ") else []
        for word in words[1:]:
            name, _, value = word.partition("=")
            found[name] = value
    return found


def filled(template: str, typed: list[str]) -> str:
    """What the note asks of the user: in each entry's last word, the *** put back as they typed it."""
    entries = json.loads(template)
    for entry in entries:
        entry[2] = next(word for word in typed if redact(word) == entry[1])
    return json.dumps(entries)


def test_a_dry_runs_hand_command_starts_a_job_holding_every_credential_and_prints_none(tmp_path, capsys, monkeypatch):
    """The printed command held `-s OCR_SEALED_ARGUMENTS`, a secret the user was never told of: hf stopped with
    "not set locally", and with any value the job ran against the server without its password. The dry run says
    which variables to export, and how; hf's own CLI, given the printed command under them, starts a job whose
    settings hold the password, the serve flags' token and the API key. Failed before: no export was said."""
    from huggingface_hub import HfApi, JobInfo
    from huggingface_hub.cli.hf import app

    monkeypatch.setattr(launch_command, "released_scripts", lambda: None)  # a local script: hf fetches no URL
    flags = [*SECRET_FLAGS, "--api-key", API_KEY]
    wheel = ("--core-wheel", str(core_wheel()))
    _, code, _, err, out = launcher(tmp_path, {0: [], 1: []}, "--dry-run", *flags, *wheel, capsys=capsys)
    assert code == 0, err
    assert all(secret not in out + err for secret in (SERVER_PASSWORD, SERVE_TOKEN, API_KEY))
    told = exported(err)
    assert set(told) == {"VLLM_API_KEY", "OCR_SEALED_ARGUMENTS"}, err
    assert "HF_TOKEN" in err and "hf auth login" in err
    monkeypatch.setenv("VLLM_API_KEY", API_KEY)
    monkeypatch.setenv("OCR_SEALED_ARGUMENTS", filled(told["OCR_SEALED_ARGUMENTS"], flags))
    calls: dict = {}

    def run_uv_job(self, **job):
        calls["job"] = job
        owner = {"id": "1", "name": "someone", "type": "user"}
        status = {"stage": "RUNNING", "message": None}
        return JobInfo(id="j1", createdAt="2026-12-01T10:00:00.000Z", status=status, owner=owner, labels={})

    monkeypatch.setattr(HfApi, "whoami", lambda self, **_: {"name": "someone"})
    monkeypatch.setattr(HfApi, "create_bucket", lambda self, **_: type("Bucket", (), {"url": "bucket-url"}))
    monkeypatch.setattr(HfApi, "batch_bucket_files", lambda self, **_: None)
    monkeypatch.setattr(HfApi, "run_uv_job", run_uv_job)
    commands = printed_commands(out)
    assert len(commands) == 2
    for index, words in enumerate(commands):
        app(words[1:], standalone_mode=False, windows_expand_args=False)
        job = calls.pop("job")
        at = job["script_args"].index("--core-wheel")  # the job's shipped wheel, at its mount: not a file here
        sent = type("Sent", (), {"script_args": job["script_args"][:at] + job["script_args"][at + 2 :]})
        monkeypatch.delenv("VLLM_API_KEY")
        settings = job_settings(sent, job["secrets"], monkeypatch)
        assert settings.server == SECRET_FLAGS[1] and settings.extra_serve_args == SECRET_FLAGS[3]
        assert settings.api_key == API_KEY and settings.shard == (index, 2)
        monkeypatch.setenv("VLLM_API_KEY", API_KEY)


def test_a_job_given_the_sealed_words_still_masked_stops_at_once_and_says_which(tmp_path, capsys, monkeypatch):
    """A hand-started job whose OCR_SEALED_ARGUMENTS still holds *** (the template copied unfilled) ran against the
    server with `***` for its password. It is a command error (exit 2, the summary line), before any page.
    Failed before: the run went on with the masked word."""
    with fake_server() as server:
        url = server.url.replace("://", "://ocr:pw-of-the-server@")
        argv = [str(SAMPLES), str(tmp_path / "out"), *served(server), "--server", redact(url)]
        template = json.dumps([[argv.index(redact(url)), redact(url), redact(url)]])
        monkeypatch.setenv("OCR_SEALED_ARGUMENTS", template)
        code, summary, err = run_main(SCRIPT, argv, capsys)
    assert (code, summary.get("exit_code")) == (2, 2), err
    assert "OCR_SEALED_ARGUMENTS" in summary["failure"] and MASK in summary["failure"]
    assert not (tmp_path / "out").exists()


def not_a_wheel(folder: Path, kind: str) -> Path:
    """A file under the core wheel's name that is not that wheel: a failed download (an error page), a zip of
    something else, a wheel whose metadata says another version than its name."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / WHEEL_NAME
    if kind == "error page":
        path.write_text("<html><body>502 Bad Gateway</body></html>\n")
        return path
    with zipfile.ZipFile(core_wheel()) as source, zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if kind == "no core" and item.filename.startswith("ocr_core/"):
                continue
            if kind == "other version" and item.filename.endswith(".dist-info/METADATA"):
                data = data.replace(b"\nVersion: 0.2.0\n", b"\nVersion: 0.1.9\n")
            target.writestr(item, data)
    return path


KINDS = {
    "error page": "is not a zip archive",
    "no core": "holds no ocr_core",
    "other version": "its metadata says version 0.1.9",
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["launch", "dry run"])
def test_a_file_under_the_core_wheels_name_that_is_not_that_wheel_is_refused_before_any_launch(
    tmp_path, capsys, kind, dry_run
):
    """Checked by its name only, it went to every job, each died at its core check with a BadZipFile traceback
    and the launcher relaunched the shard into the same death. Failed before: exit 0, jobs launched."""
    wheel = not_a_wheel(tmp_path / "dist", kind)
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, OUTPUT, {0: ["done"], 1: ["done"]})
    code, summary, err, out = run_launcher(
        jobs, hub, [INPUT, OUTPUT, "--jobs", "2", "--core-wheel", str(wheel), *dry_run], capsys
    )
    assert code == 2 and summary["exit_code"] == 2 and jobs.launches == [] and printed_commands(out) == []
    assert KINDS[kind] in err and "uv build --wheel" in err, err


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_job_shipped_a_file_that_is_not_the_core_wheel_fails_with_its_summary_line(tmp_path, capsys, kind):
    """In the job, the same file raised BadZipFile out of the run (a traceback, exit 1, no summary line); now a
    command error, exit 2, with the summary line the launcher reads, so it is not relaunched into the same death.
    Failed before: BadZipFile was raised."""
    wheel = not_a_wheel(tmp_path / "data", kind)
    code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(tmp_path / "out"), "--core-wheel", str(wheel)], capsys)
    assert (code, summary.get("exit_code")) == (2, 2) and KINDS[kind] in summary["failure"], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("role", ["INPUT", "OUTPUT"])
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["launch", "dry run"])
def test_a_launcher_refuses_an_input_or_output_that_is_no_hub_id_as_a_plain_run_does(tmp_path, capsys, role, dry_run):
    """`make submit ... ARGS=--dry-run` printed a job command for OUTPUT 'your name/scans ocr!' and exit 0, while
    a plain run refuses it at once (exit 2). The launcher says what the plain run says (huggingface_hub's own
    check, the run's own words). Failed before: exit 0 with a job command."""
    names = {"INPUT": NO_HUB_ID, "OUTPUT": OUTPUT} if role == "INPUT" else {"INPUT": INPUT, "OUTPUT": NO_HUB_ID}
    plain_output = str(tmp_path / "plain-out") if role == "INPUT" else NO_HUB_ID
    plain_input = NO_HUB_ID if role == "INPUT" else str(SAMPLES)
    with fake_server() as server:
        plain, plain_summary, plain_err = run_main(SCRIPT, [plain_input, plain_output, *served(server)], capsys)
    assert plain == 2 and plain_summary["failure"].startswith(f"{role} {NO_HUB_ID!r}"), plain_err
    hub = FolderHub(tmp_path / "hub")
    jobs = ScriptedJobs(hub, names["OUTPUT"], {0: ["done"], 1: ["done"]})
    argv = [names["INPUT"], names["OUTPUT"], "--jobs", "2", *dry_run]
    code, summary, err, out = run_launcher(jobs, hub, argv, capsys)
    assert code == 2 and summary["exit_code"] == 2 and jobs.launches == [] and printed_commands(out) == []
    assert f"error: {plain_summary['failure']}" in err, err
