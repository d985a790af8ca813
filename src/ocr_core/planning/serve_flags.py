"""The engine's flags read the way vLLM's own parser reads them, so that the plan and vLLM never disagree.

vLLM's `FlexibleArgumentParser` takes `--max_num_seqs` for `--max-num-seqs`, `--flag=value` for `--flag value`, and
keeps the last value a flag is given; a boolean's `--no-` form sets the same option as its plain form. A plan that
compared spellings word by word saw `--api_server_count 1` as a flag it did not know: both spellings reached
`vllm serve`, vLLM ran one API server and the run waited a minute at every start for a second one. Everything
that asks what a flag list says (the front-end plan, the window, readiness, which of the plan's flags the user
replaced) asks it here.

`--extra-serve-args` is split into words here and nowhere else (`user_flags`): a quote left open is the user's to
fix, so it is refused as a command error, not met later as a crash.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import CommandError

NEGATIVE_NUMBER = re.compile(r"-\d")


@dataclass(frozen=True)
class Flag:
    """One flag as it was given: its words (`--name value`, `--name=value` or `--name`) and the option it sets."""

    words: tuple[str, ...]

    @property
    def option(self) -> str:
        """The option vLLM stores the flag under, in its dashed spelling: `--max_num_seqs=8` and `--max-num-seqs`
        both set `--max-num-seqs`; `--no-enable-prefix-caching` sets `--enable-prefix-caching`."""
        return option_of(self.words[0])

    @property
    def value(self) -> str | None:
        """What the flag was given (`--name=value` or the word after it); None for a bare switch."""
        first = self.words[0]
        if "=" in first:
            return first.partition("=")[2]
        return " ".join(self.words[1:]) if len(self.words) > 1 else None


def option_of(word: str) -> str:
    """The dashed option name a flag word sets (see Flag.option); a short flag (`-tp`) is its own name."""
    name = dashed(word.partition("=")[0])
    return "--" + name.removeprefix("--no-") if name.startswith("--no-") else name


def dashed(name: str) -> str:
    """A long flag's name in vLLM's dashed spelling (`--max_num_seqs` is `--max-num-seqs`)."""
    return "--" + name.removeprefix("--").replace("_", "-") if name.startswith("--") else name


def canonical(words: Sequence[str]) -> list[str]:
    """The same flags in one spelling: dashed names, and `--name value` for `--name=value` (kept joined where the
    value starts with a dash, which argparse would take for a flag). Two spellings of one command are one command,
    so they start one engine and find one cache."""
    spelled: list[str] = []
    for flag in parse_flags(words):
        first, *rest = flag.words
        name, equals, value = first.partition("=")
        if equals and not value.startswith("-"):
            spelled += [dashed(name), value, *rest]
        else:
            spelled += [dashed(name) + equals + value, *rest]
    return spelled


def user_flags(text: str) -> tuple[str, ...]:
    """The words of `--extra-serve-args`, split as a shell splits them; refused when they cannot be split."""
    try:
        return tuple(shlex.split(text or ""))
    except ValueError as exc:
        raise CommandError(
            f"--extra-serve-args {text!r} cannot be split into flags ({exc}): close the quote, e.g. "
            "--extra-serve-args '--chat-template-content-format \"openai\"'"
        ) from None


def parse_flags(words: Iterable[str]) -> list[Flag]:
    """Each flag with the words that belong to it: a word that does not start with a dash (a number, a JSON value,
    a path) or is a negative number goes with the flag before it."""
    groups: list[list[str]] = []
    for word in words:
        if (word.startswith("-") and not NEGATIVE_NUMBER.match(word)) or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return [Flag(tuple(group)) for group in groups]


def flag_value(words: Sequence[str], name: str) -> str | None:
    """The last value `words` give the option `name` (in any spelling vLLM takes), as vLLM keeps it."""
    wanted = option_of(name)
    value = None
    for flag in parse_flags(words):
        if flag.option == wanted:
            value = flag.value
    return value


def options(words: Sequence[str]) -> set[str]:
    """Every option `words` set, in dashed spelling."""
    return {flag.option for flag in parse_flags(words)}


def without_options(words: Sequence[str], dropped: Iterable[str]) -> list[str]:
    """`words` less every flag (with its values) that sets one of the options `dropped`."""
    gone = {option_of(name) for name in dropped}
    return [word for flag in parse_flags(words) if flag.option not in gone for word in flag.words]


def replaced_options(planned: Sequence[str], given: Sequence[str]) -> list[str]:
    """The options of `planned` that `given` sets too, in the order the plan gives them."""
    set_by_given = options(given)
    return [flag.option for flag in parse_flags(planned) if flag.option in set_by_given]


def merged(base: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """`base` less what `overrides` set, then `overrides`: one spelling of each option reaches vLLM, and it is the
    one the later list gave."""
    return [*without_options(base, options(overrides)), *overrides]
