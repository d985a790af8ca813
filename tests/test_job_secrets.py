"""A job's arguments keep every flag the user gave it; only a secret is taken out, and it travels sealed.

The launcher takes the token and key flags off the jobs' arguments and masks any other secret (sealed_arguments.py).
A secret flag written with `=` inside `--extra-serve-args` (`"--max-num-seqs 64 --api-key=KEY"`, which argparse
takes as the value it is) was read as a secret flag of the recipe's own: the whole value went, the job got a bare
`--extra-serve-args` that swallowed the next flag, and every job stopped at its command line. A key with a secret
word of its own (`sk-serve-key-...`) did the same in the `--api-key KEY` form.
"""

from __future__ import annotations

import pytest

from ocr_core.planning.job_commands import job_command, ran_command
from ocr_core.redaction import register_secret
from tests.test_fanout import (
    job_settings,
    launcher,
    quick_polls,  # noqa: F401 (the launcher's fixture: no waits, a release build's table, a token)
)
from tests.testbed.recipes import model_facts

SERVE_KEY = "sk-serve-key-" + "7f3a" * 5
VALUES = (
    f"--api-key {SERVE_KEY} --max-num-seqs 64",
    f"--max-num-seqs 64 --api-key={SERVE_KEY}",
    f"--max-num-seqs=64 --hf_token={SERVE_KEY}",
)


@pytest.mark.parametrize("value", VALUES)
def test_a_key_inside_the_serve_flags_travels_sealed_and_the_job_keeps_the_other_flags(
    tmp_path, capsys, monkeypatch, value
):
    flags = ("--extra-serve-args", value, "--max-tokens", "300")
    jobs, code, _, err, _ = launcher(tmp_path, {0: ["done"], 1: ["done"]}, *flags, capsys=capsys)
    assert code == 0, err
    assert SERVE_KEY not in err
    for launch, secrets in zip(jobs.launches, jobs.secrets_sent):
        sent = list(launch.script_args)
        assert SERVE_KEY not in " ".join(sent), "the key reached the job's page in clear"
        assert "--extra-serve-args" in sent and "64" in sent[sent.index("--extra-serve-args") + 1], sent
        assert any(SERVE_KEY in value for value in secrets.values()), "the key was not sent sealed"
        settings = job_settings(launch, secrets, monkeypatch)
        assert settings.extra_serve_args == value and settings.max_tokens == 300


@pytest.mark.parametrize("value", VALUES)
def test_the_printed_job_command_keeps_the_serve_flags_and_masks_the_key(value):
    register_secret(SERVE_KEY)  # as the entry registers the --extra-serve-args secrets it parsed
    argv = ["IN", "OUT", "--extra-serve-args", value, "--max-tokens", "300"]
    facts = model_facts("lighton_ocr3")
    for shown in (job_command("x.py", facts, argv), ran_command("x.py", argv)):
        assert "--max-num-seqs" in shown and "--max-tokens 300" in shown, shown
        assert "--extra-serve-args" in shown and "64" in shown.split("--extra-serve-args", 1)[1], shown
        assert SERVE_KEY not in shown
