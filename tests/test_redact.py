"""Secrets never reach a message, a log line, the summary, a job command or the card, however they were given."""

from __future__ import annotations

import io
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

import ocr_core.redaction as redaction
from ocr_core import run_saturate
from ocr_core.command.advice import missing_vllm_message
from ocr_core.command.checks import parse_arguments
from ocr_core.command.parser import build_parser
from ocr_core.command.sealed_arguments import register_command_secrets
from ocr_core.console import say
from ocr_core.planning.job_commands import job_command, without_secrets
from ocr_core.redaction import redact, register_secret
from ocr_core.serving.handle import api_headers
from ocr_core.serving.spawn import SpawnedServer
from ocr_core.summary_line import Summary
from tests.testbed.recipes import model_facts

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "dataset"
SCRIPT = "lighton-ocr3-saturate.py"
FACTS = model_facts("lighton_ocr3")
HF_TOKEN = "hf_TestTokenValue1234"
API_KEY = "sk-test-api-key-5678"
SERVE_TOKEN = "hf_ServeArgsToken9999"
URL_PASSWORD = "url-pass-4321"


@pytest.fixture(autouse=True)
def fresh_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no secret registered and no token in the environment."""
    monkeypatch.setattr(redaction, "SECRET_VALUES", set())
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("token_args", [[f"--hf-token={HF_TOKEN}"], ["--hf-token", HF_TOKEN]], ids=["equals", "full"])
@pytest.mark.parametrize("token_first", [False, True], ids=["token-last", "token-first"])
def test_missing_vllm_message_never_shows_the_token(tmp_path, monkeypatch, capsys, token_args, token_first):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    places = [str(SAMPLES), str(tmp_path / "out"), "--server", f"http://127.0.0.1:{free_port()}"]
    argv = [*token_args, *places] if token_first else [*places, *token_args]
    assert run_saturate(FACTS, SCRIPT, argv=argv) == 2
    captured = capsys.readouterr()
    assert "hf jobs" not in captured.err, "a job cannot read this run's local folders (issue 32)"
    assert f"Install vLLM at the version of the recipe's image, {FACTS.image}" in captured.err
    assert HF_TOKEN not in captured.out + captured.err


@pytest.mark.parametrize(
    "secret_args",
    [["--hf", HF_TOKEN], [f"--hf-t={HF_TOKEN}"], ["--api-k", API_KEY], [f"--api-ke={API_KEY}"]],
    ids=["hf", "hf-equals", "api", "api-equals"],
)
def test_an_abbreviated_secret_flag_is_refused_without_showing_its_value(tmp_path, capsys, secret_args):
    """Abbreviations are refused (issue 32); the refusal quotes the unknown words, so their secret must not show."""
    argv = [str(SAMPLES), str(tmp_path / "out"), *secret_args]
    assert run_saturate(FACTS, SCRIPT, argv=argv) == 2
    captured = capsys.readouterr()
    assert "did you mean --" in captured.err
    assert HF_TOKEN not in captured.out + captured.err and API_KEY not in captured.out + captured.err


class FakeVllm(BaseHTTPRequestHandler):
    """Just enough of vLLM's OpenAI server for a run; remembers the Authorization headers it was sent."""

    authorizations: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        self.authorizations.append(self.headers.get("Authorization"))
        answers = {"/health": {}, "/v1/models": {"data": [{"id": FACTS.model}]}, "/version": {"version": "0"}}
        self.answer(200, answers[self.path]) if self.path in answers else self.answer(404, {})

    def do_POST(self) -> None:
        self.authorizations.append(self.headers.get("Authorization"))
        self.rfile.read(int(self.headers["Content-Length"]))
        choice = {"message": {"content": "A short page of text."}, "finish_reason": "stop"}
        self.answer(200, {"choices": [choice], "usage": {"prompt_tokens": 10, "completion_tokens": 6}})

    def answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_vllm() -> Iterator[tuple[str, list[str | None]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    FakeVllm.authorizations = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", FakeVllm.authorizations
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("with_userinfo", [False, True], ids=["api-key", "url-userinfo"])
def test_a_run_keeps_every_secret_out_of_its_output_and_card(tmp_path, capsys, fake_vllm, with_userinfo):
    address, authorizations = fake_vllm
    server = f"http://someone:{URL_PASSWORD}@{address}" if with_userinfo else f"http://{address}"
    out = tmp_path / "out"
    argv = [
        str(SAMPLES), str(out), "--server", server, "--max-samples", "2", "--verbose", "--hf-token", HF_TOKEN,
        "--api-key", API_KEY, f"--extra-serve-args=--hf-token {SERVE_TOKEN} --max-num-batched-tokens 8192",
    ]  # fmt: skip
    assert run_saturate(FACTS, SCRIPT, argv=argv) == 0
    captured = capsys.readouterr()
    card = (out / "README.md").read_text()
    assert "--max-num-batched-tokens 8192" in card
    for secret in (HF_TOKEN, API_KEY, SERVE_TOKEN, URL_PASSWORD):
        assert secret not in captured.out + captured.err + card
    if not with_userinfo:
        assert set(authorizations) == {f"Bearer {API_KEY}"}


def test_api_key_defaults_to_vllm_api_key(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", API_KEY)
    args = parse_arguments(build_parser(SCRIPT, FACTS, "saturate"), ["a/b", "./c"])
    assert args.api_key == API_KEY


@pytest.mark.parametrize(
    "url",
    [
        "https://evilhuggingface.co/v1",
        "https://huggingface.co.evil.example",
        "https://someone-ocr.hf.space",
        "https://someone.hf.space.example",
        "http://endpoint.hf.jobs",
        "http://huggingface.co",
        "https://example.com",
    ],
)
def test_the_hf_token_never_goes_to_other_hosts(url, monkeypatch):
    assert api_headers(url, HF_TOKEN) == {}
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    assert api_headers(url, None) == {}


@pytest.mark.parametrize(
    "url",
    ["https://huggingface.co", "https://router.huggingface.co/v1", "https://hf.co", "https://x.hf.co",
     "https://abc123.hf.jobs:8443", "https://HuggingFace.co."],
)  # fmt: skip
def test_the_hf_token_goes_to_the_hub_and_hf_jobs_endpoints(url):
    assert api_headers(url, HF_TOKEN) == {"Authorization": f"Bearer {HF_TOKEN}"}


@pytest.mark.parametrize("url", ["http://10.0.0.7:8000", "https://someone-ocr.hf.space", "https://huggingface.co"])
def test_the_api_key_goes_to_the_named_server_first(url):
    assert api_headers(url, HF_TOKEN, API_KEY) == {"Authorization": f"Bearer {API_KEY}"}


def parsed(argv: list[str], facts=FACTS):
    args = parse_arguments(build_parser(SCRIPT, facts, "saturate"), argv)
    register_command_secrets(args)
    return args


def test_job_command_and_card_command_drop_or_mask_every_secret():
    argv = [
        "a/b", "c/d", "--hf-token", HF_TOKEN, "--api-key", API_KEY, "--server", f"https://u:{URL_PASSWORD}@host.example",
        f"--extra-serve-args=--api-key={SERVE_TOKEN} --tokenizer-mode auto", "--shuffle",
    ]  # fmt: skip
    parsed(argv)
    command = job_command(SCRIPT, FACTS, argv)
    for secret in (HF_TOKEN, API_KEY, SERVE_TOKEN, URL_PASSWORD):
        assert secret not in command
    assert command.endswith(
        "a/b c/d --server 'https://***@host.example' '--extra-serve-args=--api-key=*** --tokenizer-mode auto' --shuffle"
    )


def test_missing_vllm_message_masks_a_token_given_first():
    argv = ["--hf-token", HF_TOKEN, "a/b", "c/d"]
    message = missing_vllm_message("http://127.0.0.1:8000", False, SCRIPT, FACTS, argv, parsed(argv))
    assert HF_TOKEN not in message and "hf jobs uv run --flavor l4x1" in message


def test_without_secrets_knows_the_abbreviations():
    arguments = ["--hf", "x", "--hf-t=y", "--api-k", "z", "--api-server-count", "2", "--", "a/b"]
    assert without_secrets(arguments) == ["--api-server-count", "2", "--", "a/b"]


def test_secret_looking_serve_flags_are_registered_and_the_rest_is_left_alone():
    """Under a vLLM with no flag table (HPD-Parsing's fork) any flag passes, so a secret is known by its name."""
    parsed(
        ["a/b", "./c", "--extra-serve-args",
         f"--max-num-batched-tokens 8192 --tokenizer-mode auto --hf_token={SERVE_TOKEN} --api-key {API_KEY} "
         "--ssl-keyfile /etc/key.pem --secret-word s3cr3t-w0rd --enforce-eager"],
        model_facts("hpd_parsing"),
    )  # fmt: skip
    assert redact(f"{SERVE_TOKEN} {API_KEY} s3cr3t-w0rd") == "*** *** ***"
    assert redact("8192 auto /etc/key.pem --enforce-eager") == "8192 auto /etc/key.pem --enforce-eager"


def test_url_userinfo_is_masked_even_unregistered():
    assert (
        redact("GET https://user:pw@host.example/v1 and http://tok@h/x")
        == "GET https://***@host.example/v1 and http://***@h/x"
    )
    assert redact("mail someone@example.com, see https://host/a@b") == "mail someone@example.com, see https://host/a@b"


def test_say_and_the_summary_mask_registered_values_in_every_spelling(capsys):
    secret = 'pa"ss\\word'
    register_secret(secret)
    say(f"the key is {secret}")
    stream = io.StringIO()
    Summary("x.py", "org/model", "server", "./out", failure=f"refused {secret}", exit_code=1).print_to(stream)
    assert capsys.readouterr().err == "the key is ***\n"
    assert json.loads(stream.getvalue())["failure"] == "refused ***"


def test_the_server_log_header_masks_secret_arguments(tmp_path):
    register_secret(API_KEY)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "vllm").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "vllm").chmod(0o755)
    log_path = tmp_path / "serve.log"
    spawned = SpawnedServer(
        [str(fake_bin / "vllm"), "serve", "m", "--api-key", API_KEY], "http://127.0.0.1:1", {"PATH": str(fake_bin)},
        log_path,
    )  # fmt: skip
    spawned.start()
    spawned.stop()
    header = log_path.read_text().strip()
    assert header == f"==== {fake_bin / 'vllm'} serve m --api-key ***"


def test_a_mistyped_token_flag_is_masked_in_argparse_s_own_error(capsys):
    token = "hf_" + "A1b2C3d4" * 4
    parser = build_parser(SCRIPT, FACTS, "saturate")
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(["in", "./out", "--hf_token", token])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and token not in err and "***" in err


@pytest.mark.parametrize("flag", ["--apikey", "--api_key", "--api-kye", "--API-KEY", "--hf_tokn", "--hftoken"])
@pytest.mark.parametrize("equals", [False, True], ids=["apart", "equals"])
def test_a_secret_under_a_misspelt_flag_is_masked_on_stderr_and_in_the_summary_line(tmp_path, capsys, flag, equals):
    """A flag argparse does not know is quoted back in its error and the summary line's `failure`: a value typed
    under a misspelling of a secret flag is as secret as the flag's, so it is masked by what the flag means (its
    words, or the secret flag it is spelt closest to), not by prefixes of the real names alone (issue 43)."""
    secret = "sk-misspelt-secret-2468"
    words = [f"{flag}={secret}"] if equals else [flag, secret]
    assert run_saturate(FACTS, SCRIPT, argv=[str(SAMPLES), str(tmp_path / "out"), *words]) == 2
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert "unrecognized arguments" in summary["failure"] and "***" in summary["failure"]
    assert secret not in captured.out + captured.err
