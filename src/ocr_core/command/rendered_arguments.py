"""The command line each `--jobs` job runs, rendered from the parsed command by the recipe parser's own table.

For every option of the parser (its `_actions`: option strings, nargs, const, dest) whose parsed value is not its
default, the job gets the option's long spelling and the value, as argparse reads it back: a value that argparse
would read as a flag of its own (`--api-key=KEY --max-num-seqs 64`) is joined to its option with `=`. Two spellings
of one command (`--flag=value`, a repeated flag, another order) send the jobs one command line, and no value is
ever mistaken for a flag.

The fan-out owns some options, by rule: its own flags and `--core-wheel` are left out (the launcher adds the wheel
and each job's `--shard` itself), as are the token and the key, which reach a job as job secrets; a `--server` whose
every address is on the launcher's machine is left out where the jobs run elsewhere: each starts its own. Any
other secret in a value (a password in `--server`'s URL, a token in `--extra-serve-args`) is sealed by
sealed_arguments.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from ..planning.job_commands import names_secret_flag
from ..planning.server_policy import ServerPolicy
from ..settings import Settings
from .argument_types import columns_argument
from .jobs_request import DESTS

# Options a job never gets from the launcher's command: the launcher's own, the wheel and shard it adds, --plan.
FANOUT_OWNED = frozenset({*DESTS, "core_wheel", "shard", "plan", "finalize", "help"})
# The words an option's typed value is written back as, by its type: `--columns id,page` is parsed to a tuple.
WRITTEN_BACK: dict[Callable[[str], Any], Callable[[Any], str]] = {columns_argument: ",".join}
SETTING_NAMES = frozenset(item.name for item in fields(Settings))


def job_arguments(parser: argparse.ArgumentParser, settings: Settings, launchers_server: bool) -> list[str]:
    """INPUT, OUTPUT and every option of `settings` that is not its default, in the parser's order;
    `launchers_server`: --server names the launcher's machine, where the jobs do not run (local_to_launcher)."""
    words = [settings.input, settings.output]
    for action in parser._actions:
        if not action.option_strings or action.dest in FANOUT_OWNED or secret(action):
            continue
        if action.dest == "server" and launchers_server:
            continue
        words += option_words(parser, action, setting(settings, action.dest))
    return words


def local_to_launcher(servers: ServerPolicy | None, jobs_run_here: bool) -> bool:
    """Whether the run's --server addresses all name the launcher's machine, which a job elsewhere does not share:
    such a job starts its own server instead (a loopback fleet it was sent would answer nowhere)."""
    return servers is not None and servers.local and not jobs_run_here


def secret(action: argparse.Action) -> bool:
    """The token and the key (and any option named as a secret) reach a job as job secrets, never as words."""
    return any(names_secret_flag(option) for option in action.option_strings)


def setting(settings: Settings, dest: str) -> Any:
    """An option's parsed value: a field of the settings, or one of the model's own options."""
    return getattr(settings, dest) if dest in SETTING_NAMES else settings.model_options[dest]


def option_words(parser: argparse.ArgumentParser, action: argparse.Action, value: Any) -> list[str]:
    """The words that give `action` its `value` in a job; none where the job's parser gives it anyway."""
    if value is None or value == action.default:
        return []
    name = long_name(action)
    if action.nargs == 0:
        return [name] if value == action.const else []
    if isinstance(action, argparse._AppendAction):
        return [word for item in value for word in valued(parser, name, written(action, item))]
    if action.nargs in (None, argparse.OPTIONAL):
        return valued(parser, name, written(action, value))
    return [name, *(written(action, item) for item in value)]


def long_name(action: argparse.Action) -> str:
    """The option's canonical spelling: its first long option string."""
    return next((option for option in action.option_strings if option.startswith("--")), action.option_strings[0])


def written(action: argparse.Action, value: Any) -> str:
    back = WRITTEN_BACK.get(action.type)
    return back(value) if back is not None else str(value)


def valued(parser: argparse.ArgumentParser, name: str, text: str) -> list[str]:
    """The option and its value as two words, or one joined by `=` where the parser would read the value's word as
    a flag (`-x`, `--api-key=KEY --max-num-seqs 64`) and the job would stop at its command line."""
    return [f"{name}={text}"] if parser._parse_optional(text) is not None else [name, text]
