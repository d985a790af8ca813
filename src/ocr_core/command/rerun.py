"""The command a message or the card offers for redoing a run: an HF Jobs command only where a job could run it.

A job reads and writes the Hub alone, so a local INPUT, OUTPUT or model folder makes its command a dead end: the
offer is then this machine's own `uv run` line. A loopback `--server` names the machine that ran, never the job's,
and a job starts its own server anyway, so it is left out of a job command.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from ..facts import ModelFacts
from ..settings import Settings
from .job_commands import job_command, ran_command
from .provenance import reproducible

SERVER_FLAG = "--server"


def rerun_command(script: str, facts: ModelFacts, argv: Sequence[str], settings: Settings) -> str:
    """`argv` is the run's command line as given; `settings` what it says (INPUT, OUTPUT and the model)."""
    if reproducible(settings.input, settings.output, settings.model):
        return job_command(script, facts, job_arguments(argv))
    return f"uv run {ran_command(script, argv)}"


def job_arguments(argv: Sequence[str]) -> list[str]:
    """The arguments less a `--server` whose every address is a loopback one."""
    kept: list[str] = []
    words = iter(argv)
    for word in words:
        name, equals, value = word.partition("=")
        if name != SERVER_FLAG:
            kept.append(word)
            continue
        value = value if equals else next(words, "")
        if not all(urlsplit(url.strip()).hostname in LOCAL_HOSTS for url in value.split(",")):
            kept.extend([word] if equals else [word, value])
    return kept


LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"}
