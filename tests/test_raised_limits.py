"""A limit that cut pages off, raised, and the errors retried: the advice the breaker and the canary print runs as
printed, rows already done keep their text, and each row records the limits it was made under. A fake vLLM server
answers (its pages need 24 tokens); nothing reaches the Hub.

The run stopped with "raise --max-tokens ... then rerun with --retry-errors", and doing exactly that was refused
(exit 2, "holds results made another way ... max_tokens 16 -> 32"); only `--overwrite`, which no message named,
got further, and it threw the finished rows away.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from ocr_core.shapes import page_requests as requests_module
from tests.test_resume_publish import SAMPLES, load, run_main, served
from tests.testbed.env import REPO_ROOT
from tests.testbed.env import testbed_env as bed_env
from tests.testbed.fake_server import fake_server

SCRIPT = "ovis-ocr2-server.py"
PAGE_TOKENS = 24


def advised_command(err: str) -> str:
    """The one command the stop's message offers, as printed on its own indented line."""
    commands = [line.strip() for line in err.splitlines() if line.startswith("  uv run ")]
    assert len(set(commands)) == 1, err[-3000:]
    return commands[0]


def last_max_tokens(info: str) -> int:
    return json.loads(info)[-1]["sampling"]["max_tokens"]


@pytest.mark.parametrize("judge", ["canary", "breaker"])
def test_the_advice_after_pages_cut_off_at_max_tokens_runs_as_printed(tmp_path, capsys, judge):
    out = tmp_path / "out"
    with fake_server() as server:
        server.state.page_tokens = PAGE_TOKENS
        judged = [] if judge == "canary" else ["--no-canary"]
        code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, *judged)], capsys)
        assert code == 1 and "max_tokens" in summary["failure"], err[-3000:]
        command = advised_command(err)
        assert "--retry-errors" in command and "Rerun the same command" not in err
        done = subprocess.run(command, shell=True, cwd=REPO_ROOT, env=bed_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    finished = json.loads(done.stdout.strip().splitlines()[-1])
    assert finished["errors"] == 0 and finished["rows"] == 12
    assert all(last_max_tokens(info) > PAGE_TOKENS - 1 for info in load(out)["inference_info"])


def test_rows_done_keep_their_text_and_record_the_limits_they_were_made_under(tmp_path, capsys):
    out = tmp_path / "out"
    with fake_server() as server:
        code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, "--max-samples", "4")], capsys)
        assert code == 0, err[-3000:]
        first = load(out)["markdown"]
        server.state.page_tokens = PAGE_TOKENS
        cut = served(server, "--no-canary", "--max-error-rate", "1.0")
        code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(out), *cut], capsys)
        assert code == 0 and summary["errors"] == 8, err[-3000:]
        raised = [*cut, "--max-tokens", "32", "--retry-errors"]
        code, summary, err = run_main(SCRIPT, [str(SAMPLES), str(out), *raised], capsys)
    assert code == 0, err[-3000:]
    assert summary["done_this_run"] == 8 and summary["errors"] == 0
    rows = load(out)
    assert rows["markdown"][:4] == first
    assert [last_max_tokens(info) for info in rows["inference_info"]] == [16] * 4 + [32] * 8


@pytest.mark.parametrize("change", [["--temperature", "0.5"], ["--ignore-eos"]])
def test_a_change_of_the_answer_with_retry_errors_is_still_refused(tmp_path, capsys, change):
    out = tmp_path / "out"
    with fake_server() as server:
        code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *served(server, "--max-samples", "2")], capsys)
        assert code == 0, err[-3000:]
        changed = [str(SAMPLES), str(out), *served(server, "--max-samples", "2", *change, "--retry-errors")]
        code, summary, err = run_main(SCRIPT, changed, capsys)
    assert code == 2 and "sampling" in summary["failure"], err[-3000:]


def test_a_raised_request_timeout_resumes_and_each_row_records_it(tmp_path, capsys, monkeypatch):
    """Pages longer than --request-timeout stop the run with "raise --request-timeout"; the raised one resumes (it
    is a limit: no row's text depends on it) and the rows say which timeout they were made under."""
    monkeypatch.setattr(requests_module, "BACKOFF_BASE_S", 0.05)
    out = tmp_path / "out"
    with fake_server(delay_s=1.0) as server:
        short = served(server, "--request-timeout", "0.3", "--retry-budget", "1")
        code, _, err = run_main(SCRIPT, [str(SAMPLES), str(out), *short], capsys)
        assert code == 1 and "raise --request-timeout" in err, err[-3000:]
        raised = [str(SAMPLES), str(out), *served(server, "--request-timeout", "30", "--retry-errors")]
        code, summary, err = run_main(SCRIPT, raised, capsys)
    assert code == 0 and summary["errors"] == 0, err[-3000:]
    assert {json.loads(info)[-1]["limits"]["request_timeout"] for info in load(out)["inference_info"]} == {30.0}
