"""The engine's flags read the way the vLLM that runs reads them (its own table, flag_table.py), so that the plan and
vLLM never disagree.

vLLM's `FlexibleArgumentParser` takes `--max_num_seqs` for `--max-num-seqs`, `--flag=value` for `--flag value`, a
short alias (`-asc 1`) or an unambiguous abbreviation for the long name, and keeps the last value a flag is given;
a boolean's `--no-` form sets the same option as its plain form; `--option.key value` sets one key of a JSON option,
and those keys are merged into one object. Everything that asks what a flag list says (the front-end plan, the
window, readiness, which of the plan's flags the user replaced, the cache key, the fingerprint) asks it here.

The user's words reach vLLM exactly as typed: `merged` only drops the flags of the lower layer that the user's
replace, and `canonical` (one spelling per flag, for keys and fingerprints) is never what a replica is started with.

`--extra-serve-args` is split into words here and nowhere else (`user_flags`): a quote left open, or a flag the
pinned vLLM does not have, is the user's to fix, so it is refused as a command error naming the flag and the
problem, never echoing the words (they may hold a secret).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ..console import say
from ..errors import CommandError
from ..redaction import is_secret_flag, register_secret
from .flag_table import GENERIC, Grammar, dashed, grammar_for

NEGATIVE_NUMBER = re.compile(r"-\d")


@dataclass(frozen=True)
class Flag:
    """One flag as it was given: its words, the long name of the option it sets ("" for words before any flag),
    whether it is the `--no-` form, the dotted key it sets under a JSON option, its values, and `strays`: words
    after it that no option takes (vLLM refuses them; `problems` names them). `known` is False where the release's
    table has no such option."""

    words: tuple[str, ...]
    option: str
    values: tuple[str, ...] = ()
    negative: bool = False
    key: tuple[str, ...] = ()
    known: bool = True
    strays: int = 0
    missing: bool = False

    @property
    def name(self) -> str:
        """The flag's name as typed (never its value)."""
        return self.words[0].partition("=")[0]

    @property
    def value(self) -> str | None:
        """What the flag was given, its values joined by a space; None for a bare switch."""
        return " ".join(self.values) if self.values else None

    def spelled(self) -> list[str]:
        """The flag in one spelling: its long name (the `--no-` form for a negated boolean), the dotted key as
        typed, then its values as words (joined with `=` where a value starts with a dash, which argparse would take
        for a flag); a flag the table does not know stays as typed."""
        if not self.known:
            return list(self.words)
        name = "--no-" + self.option.removeprefix("--") if self.negative else self.option
        name += "".join("." + part for part in self.key)
        rest = list(self.words[len(self.words) - self.strays :]) if self.strays else []
        if len(self.values) == 1 and self.values[0].startswith("-"):
            return [f"{name}={self.values[0]}", *rest]
        return [name, *self.values, *rest]


def is_flag_word(word: str) -> bool:
    """A word argparse reads as a flag: a dash and more, not a negative number."""
    return word.startswith("-") and len(word) > 1 and not NEGATIVE_NUMBER.match(word)


def wanted_values(nargs: int | str, following: Sequence[str]) -> int:
    """How many of the words after a flag are its values, as argparse counts them: words up to the next flag, at
    most one for "?", exactly `nargs` for a count."""
    free = 0
    while free < len(following) and not is_flag_word(following[free]):
        free += 1
    if nargs in ("*", "+"):
        return free
    if nargs == "?":
        return min(free, 1)
    return min(free, int(nargs))


def parse_flags(words: Iterable[str], grammar: Grammar = GENERIC) -> list[Flag]:
    """Each flag with the words that belong to it, as `grammar`'s release reads them."""
    words = list(words)
    flags: list[Flag] = []
    index = 0
    while index < len(words):
        word = words[index]
        if not is_flag_word(word):
            last = flags.pop() if flags else Flag((), "", known=False)
            flags.append(replace(last, words=(*last.words, word), strays=last.strays + 1))
            index += 1
            continue
        flag, taken = read_flag(word, words[index + 1 :], grammar)
        flags.append(flag)
        index += 1 + taken
    return flags


def read_flag(word: str, following: Sequence[str], grammar: Grammar) -> tuple[Flag, int]:
    """The flag `word` starts and how many of the `following` words are its values."""
    name, equals, explicit = word.partition("=")
    spelled = grammar.spelled(name)
    option = spelled.option
    if option is None:
        taken = wanted_values("*", following)
        return Flag((word, *following[:taken]), dashed(name), tuple(following[:taken]), known=False), taken
    nargs = 1 if spelled.key else option.nargs
    if equals or spelled.attached:
        values: tuple[str, ...] = (explicit,) if equals else (spelled.attached or "",)
        return Flag((word,), option.name, values, spelled.negative, spelled.key), 0
    taken = 0 if nargs == 0 else wanted_values(nargs, following)
    values = tuple(following[:taken])
    missing = (nargs == "+" and not values) or (isinstance(nargs, int) and len(values) < nargs)
    flag = Flag((word, *values), option.name, values, spelled.negative, spelled.key, missing=missing)
    return flag, taken


def user_flags(text: str) -> tuple[str, ...]:
    """The words of `--extra-serve-args`, split as a shell splits them; refused when they cannot be split, naming the
    problem and never the words (an `--api-key` among them would be printed in clear)."""
    try:
        return tuple(shlex.split(text or ""))
    except ValueError as exc:
        raise CommandError(
            f"--extra-serve-args cannot be split into flags ({str(exc).lower()}): close the quote, e.g. "
            "--extra-serve-args '--chat-template-content-format \"openai\"'"
        ) from None


def checked_user_flags(text: str, vllm_version: str | None) -> tuple[str, ...]:
    """`--extra-serve-args` split and read by the table of the vLLM the recipe pins: the values of its secret flags
    are registered as secrets at once (before any message can print them), and a flag that release does not have,
    a dotted key on an option that takes no JSON, a missing value or a word no flag takes is a CommandError naming
    the nearest option of that release. With no table for that release the words pass, with a note."""
    words = user_flags(text)
    grammar = grammar_for(vllm_version)
    if grammar is None:
        if words:
            release = f"vLLM {vllm_version}" if vllm_version else "this recipe's vLLM"
            say(f"note: no flag table for {release}: --extra-serve-args go to vllm serve unchecked")
        return words
    for value in secret_values(words, grammar):
        register_secret(value)
    found = problems(words, grammar)
    if found:
        raise CommandError(f"--extra-serve-args: {'; '.join(found)}")
    return words


def secret_values(words: Sequence[str], grammar: Grammar) -> list[str]:
    """Every value of a flag whose option is a secret as the release reads it (an abbreviation such as `--api-k`
    is `--api-key`; `--api-key K1 K2` has two), and any word after it that no flag takes."""
    values = []
    for flag in parse_flags(words, grammar):
        if flag.known and is_secret_flag(flag.option):
            values += [*flag.values, *flag.words[len(flag.words) - flag.strays :]] if flag.strays else flag.values
    return values


def problems(words: Sequence[str], grammar: Grammar) -> list[str]:
    """What the release behind `grammar` would refuse in `words`, each naming the flag (never a value)."""
    found = []
    position = 0
    for flag in parse_flags(words, grammar):
        position += len(flag.words)
        problem = flag_problem(flag, grammar)
        if problem is not None:
            found.append(problem)
        if flag.strays:
            found.append(f"word {position - flag.strays + 1} of --extra-serve-args is no flag's value")
    return found


def flag_problem(flag: Flag, grammar: Grammar) -> str | None:
    """Why the release behind `grammar` refuses this flag, by its name; None where it takes it."""
    release = f"vLLM {grammar.version}"
    option = grammar.options.get(flag.option)
    if not flag.known:
        near = grammar.nearest(flag.name)
        return f"{flag.name} is not a vllm serve option of {release}" + (f" (nearest: {near})" if near else "")
    if flag.key and not (option is not None and option.json and grammar.dotted_keys):
        return f"{flag.name}: {flag.option} of {release} takes no dotted keys"
    if flag.missing:
        return f"{flag.name} needs a value"
    if option is not None and option.nargs == 0 and flag.values:
        return f"{flag.name} is a switch and takes no value"
    return None


def flag_value(words: Sequence[str], name: str, grammar: Grammar = GENERIC) -> str | None:
    """The last value `words` give the option `name` (in any spelling vLLM takes), as vLLM keeps it."""
    wanted = option_name(name, grammar)
    value = None
    for flag in parse_flags(words, grammar):
        if flag.option == wanted and not flag.key:
            value = flag.value
    return value


def option_name(name: str, grammar: Grammar) -> str:
    option = grammar.spelled(name).option
    return option.name if option is not None else dashed(name)


def options(words: Sequence[str], grammar: Grammar = GENERIC) -> set[str]:
    """Every option `words` set, by its long name."""
    return {flag.option for flag in parse_flags(words, grammar)}


def without_options(words: Sequence[str], dropped: Iterable[str], grammar: Grammar = GENERIC) -> list[str]:
    """`words` less every flag (with its values) that sets one of the options `dropped`."""
    gone = {option_name(name, grammar) for name in dropped}
    return [word for flag in parse_flags(words, grammar) if flag.option not in gone for word in flag.words]


def replaced_options(planned: Sequence[str], given: Sequence[str], grammar: Grammar = GENERIC) -> list[str]:
    """The options of `planned` that `given` sets too, in the order the plan gives them."""
    set_by_given = options(given, grammar)
    return [flag.option for flag in parse_flags(planned, grammar) if flag.option in set_by_given]


def merged(base: Sequence[str], overrides: Sequence[str], grammar: Grammar = GENERIC) -> list[str]:
    """`base` less what `overrides` set, then `overrides` as given: the later list's flag wins, as in vLLM.

    A dotted key (`--mm-processor-kwargs.images_kwargs.max_pixels N`) sets one key, and vLLM merges the dotted keys of
    an option into one object, but a whole JSON value of that option given beside them is dropped by vLLM's parser.
    So a base flag giving the whole object is turned into dotted keys, one per top-level key, less the keys the
    overrides set, which vLLM merges with the user's; one that is no JSON object is replaced."""
    given = parse_flags(overrides, grammar)
    whole = {flag.option for flag in given if not flag.key}
    keys = {flag.option: set() for flag in given if flag.key and flag.option not in whole}
    for flag in given:
        if flag.option in keys:
            keys[flag.option].add(flag.key)
    kept: list[str] = []
    for flag in parse_flags(base, grammar):
        if flag.option in whole:
            continue
        kept += as_dotted(flag, keys[flag.option]) if flag.option in keys and not flag.key else flag.words
    return [*kept, *overrides]


def as_dotted(flag: Flag, taken: Iterable[tuple[str, ...]]) -> list[str]:
    """A whole JSON object flag as one dotted key per top-level key, less the key paths `taken` (the user's, which
    vLLM would otherwise report as duplicates); nothing where its value is no JSON object."""
    try:
        value = json.loads(flag.value or "")
    except ValueError:
        return []
    if not isinstance(value, dict):
        return []
    for path in taken:
        without_key(value, path)
    return [word for key, item in value.items() for word in (f"{flag.option}.{key}", json.dumps(item))]


def without_key(value: dict, path: tuple[str, ...]) -> None:
    """Removes the key at `path` from a nested JSON object, where it is there."""
    *parents, last = path
    for part in parents:
        value = value.get(part)
        if not isinstance(value, dict):
            return
    value.pop(last, None)


def canonical(words: Sequence[str], grammar: Grammar = GENERIC) -> list[str]:
    """The same flags in one spelling (Flag.spelled): two spellings of one command are one command, so they find
    one engine cache and resume one job. Only keys and fingerprints read it; vLLM gets the words as given."""
    return [word for flag in parse_flags(words, grammar) for word in flag.spelled()]
