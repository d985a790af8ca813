"""A `--jobs` job's command line is rendered from the parsed command, by the parser's own table of options.

It used to be the launcher's argv less the words a few filters took for the launcher's flags, the token and the key.
A filter reads words, not the command: a value whose text began like one of those flags (`--api-key=KEY` first in
`--extra-serve-args`, a value `--jobs=2 ...`) was taken for the flag and dropped, leaving a bare option that
swallowed the next one, so every job stopped at its command line; a loopback `--server` fleet, which names the
launcher's own machine, went to every job; and two spellings of one command sent the jobs two command lines.
"""

from __future__ import annotations

import pytest

from ocr_core.command.parser import build_parser
from tests.test_fanout import (
    INPUT,
    OUTPUT,
    SCRIPT,
    job_settings,
    launcher,
    quick_polls,  # noqa: F401 (the launcher's fixture: no waits, a release build's table, a token)
)
from tests.testbed.recipes import model_facts

DONE = {0: ["done"], 1: ["done"]}
SERVE_KEY = "sk-serve-key-" + "5e1d" * 5
LAUNCHER_FLAGS = ("--jobs", "--flavor", "--job-timeout", "--job-image", "--max-relaunches", "--max-parallel-jobs")


def sent_arguments(tmp_path, capsys, *flags) -> list[tuple[str, ...]]:
    """The arguments each job of a two-shard launcher got, less its `--shard`."""
    jobs, code, _, err, _ = launcher(tmp_path, DONE, *flags, capsys=capsys)
    assert code == 0, err
    return [launch.script_args[:-2] for launch in jobs.launches]


def test_two_spellings_of_one_command_send_the_jobs_one_command_line(tmp_path, capsys):
    typed = ("--max-tokens=512", "--seed", "7", "--no-canary", "--max-samples", "90", "--max-samples", "80")
    respelled = ("--no-canary", "--max-samples", "80", "--seed=7", "--max-tokens", "512")
    first = sent_arguments(tmp_path / "a", capsys, *typed)
    second = sent_arguments(tmp_path / "b", capsys, *respelled)
    assert first == second
    assert first[0] == (INPUT, OUTPUT, "--max-samples", "80", "--seed", "7", "--no-canary", "--max-tokens", "512")


def test_a_loopback_fleet_names_the_launchers_machine_and_never_reaches_a_job(tmp_path, capsys):
    local = sent_arguments(tmp_path / "a", capsys, "--server", "http://127.0.0.1:8000,http://localhost:8001")
    assert all("--server" not in arguments for arguments in local), local
    remote = sent_arguments(tmp_path / "b", capsys, "--server=http://10.0.0.7:8000")
    assert all(arguments[-2:] == ("--server", "http://10.0.0.7:8000") for arguments in remote), remote


@pytest.mark.parametrize(
    "value", [f"--api-key={SERVE_KEY} --max-num-seqs 64", f"--hf-token={SERVE_KEY} --enforce-eager"]
)
def test_serve_flags_that_begin_with_a_secret_flag_reach_the_job_whole(tmp_path, capsys, monkeypatch, value):
    flags = (f"--extra-serve-args={value}", "--max-tokens", "300")
    jobs, code, _, err, _ = launcher(tmp_path, DONE, *flags, capsys=capsys)
    assert code == 0, err
    for launch, secrets in zip(jobs.launches, jobs.secrets_sent):
        assert SERVE_KEY not in " ".join(launch.script_args), "the key reached the job's page in clear"
        settings = job_settings(launch, secrets, monkeypatch)
        assert settings.extra_serve_args == value and settings.max_tokens == 300


def test_a_value_that_reads_like_a_launcher_flag_is_a_value(tmp_path, capsys, monkeypatch):
    column = "--jobs=2 text"
    jobs, code, _, err, _ = launcher(tmp_path, DONE, f"--output-column={column}", capsys=capsys)
    assert code == 0, err
    for launch, secrets in zip(jobs.launches, jobs.secrets_sent):
        assert job_settings(launch, secrets, monkeypatch).output_column == column


def test_a_value_that_begins_with_a_dash_reaches_the_job_as_a_value(tmp_path, capsys, monkeypatch):
    """Kept as it worked before: a value `-x` on a word of its own would read as an unknown flag in the job."""
    jobs, code, _, err, _ = launcher(tmp_path, DONE, "--extra-serve-args=--enforce-eager", capsys=capsys)
    assert code == 0, err
    for launch, secrets in zip(jobs.launches, jobs.secrets_sent):
        assert job_settings(launch, secrets, monkeypatch).extra_serve_args == "--enforce-eager"


@pytest.mark.parametrize(
    "flags",
    [
        ("--columns", "id, page", "--upload-every", "60.5", "--temperature", "0.25", "--take-over-job", "j-1"),
        ("--take-over-job=j-1", "--take-over-job", "j-2", "--shuffle", "--max-error-rate", "1e-3", "--verbose"),
        ("--server", "http://u:pw-135@10.0.0.7:8000", "--max-inflight", "12", "--engine-cache", "hf://buckets/a/b"),
    ],
)
def test_every_job_parses_the_launchers_settings_but_its_shard(tmp_path, capsys, monkeypatch, flags):
    """Kept as a regression test: each job's settings are the launcher's own, its shard aside."""
    from ocr_core.command.checks import parse_command

    parser = build_parser(SCRIPT, model_facts("lighton_ocr3"), "saturate")
    wanted = parse_command(parser, [INPUT, OUTPUT, *flags])[0]
    jobs, code, _, err, _ = launcher(tmp_path, DONE, *flags, capsys=capsys)
    assert code == 0, err
    for index, (launch, secrets) in enumerate(zip(jobs.launches, jobs.secrets_sent)):
        got = job_settings(launch, secrets, monkeypatch)
        assert got.shard == (index, 2)
        assert got.__dict__ | {"shard": None} == wanted.__dict__


def test_no_launcher_flag_reaches_a_job_and_an_abbreviation_is_refused(tmp_path, capsys):
    flags = ("--flavor", "h200", "--job-timeout=6h", "--job-image", "img:1", "--max-relaunches", "1")
    for arguments in sent_arguments(tmp_path, capsys, *flags, "--max-parallel-jobs", "1"):
        assert not any(word.startswith(LAUNCHER_FLAGS) for word in arguments), arguments
    jobs, code, summary, err, _ = launcher(tmp_path / "b", DONE, "--max-sam", "5", capsys=capsys)
    assert code == 2 and jobs.launches == [] and "--max-sam" in summary["failure"], err
