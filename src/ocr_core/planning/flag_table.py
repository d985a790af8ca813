"""`vllm serve`'s options as one vLLM release's own parser defines them, read from the table tools/vllm_flags.py wrote.

A copy of vLLM's parser by hand went wrong where vLLM is not regular: it only dashes a dotted key up to its first
dot (`--compilation-config.compile_mm_encoder`), it has short aliases (`-asc`, `-tp`, `-cc`) and a `-O3` shorthand,
a flag may take a list (`--api-key K1 K2`), and argparse takes an unambiguous abbreviation. Each release's table
(vllm_flags/VERSION.json, shipped in the package) says, per option, its long name, its aliases, how many words
follow it, its `--no-` form and whether it takes JSON, and so whether dotted keys may set it. A release without a
table is read by the generic rules (`GENERIC`): a flag's name dashed, the words up to the next flag its values.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from .installed import release

TABLE_PACKAGE = "ocr_core.planning"
TABLE_FOLDER = "vllm_flags"


@dataclass(frozen=True)
class Option:
    """One `vllm serve` option: its long name, how many words follow it (0, 1, a count, or argparse's "?", "*",
    "+"), its `--no-` form where it is a boolean, and whether it takes JSON (and so dotted keys)."""

    name: str
    nargs: int | str = 1
    negative: str | None = None
    json: bool = False
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spelled:
    """What a flag's name (the part before any `=`) sets: the option, whether it is the `--no-` form, the dotted key
    under it (`--mm-processor-kwargs.images_kwargs.max_pixels`: ("images_kwargs", "max_pixels")), and the value
    written onto the name (`-O3`); `option` is None where the release has no such option."""

    option: Option | None
    negative: bool = False
    key: tuple[str, ...] = ()
    attached: str | None = None


@dataclass(frozen=True, eq=False)
class Grammar:
    """One release's options by every spelling vLLM's parser takes; `version` None: the generic rules."""

    version: str | None
    options: Mapping[str, Option] = field(default_factory=dict)
    abbreviations: bool = True
    dotted_keys: bool = True
    attached: Mapping[str, str] = field(default_factory=dict)
    by_spelling: Mapping[str, tuple[Option, bool]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_spelling", spellings_of(self.options.values()))

    @property
    def known(self) -> bool:
        """Whether this is a release's own table (else every flag is taken as it is spelled)."""
        return self.version is not None

    def spelled(self, name: str) -> Spelled:
        """The option a flag's name sets, as this release's parser reads the name."""
        if not self.known:
            return generic_spelled(name)
        head, dot, rest = name.partition(".") if name.startswith("--") else (name, "", "")
        head = dashed(head)
        found = self.by_spelling.get(head) or self.abbreviated(head)
        if found is not None:
            return Spelled(found[0], found[1], tuple(rest.split(".")) if dot else ())
        return self.attached_value(name)

    def attached_value(self, name: str) -> Spelled:
        """A one-letter short option with its value written onto it (`-O3`): argparse's own, or the shorthand the
        release's parser rewrites itself (`attached`)."""
        short = name[:2]
        if name.startswith("--") or len(name) < 2:
            return Spelled(None)
        if short in self.attached:
            return Spelled(self.options[self.attached[short]], attached=name[2:].removeprefix("="))
        found = self.by_spelling.get(short)
        if found is not None and found[0].nargs != 0 and len(name) > 2:
            return Spelled(found[0], attached=name[2:])
        return Spelled(None)

    def abbreviated(self, head: str) -> tuple[Option, bool] | None:
        """argparse's abbreviation: a long name that is the start of exactly one option's long spelling."""
        if not self.abbreviations or not head.startswith("--"):
            return None
        matches = {spelling for spelling in self.by_spelling if spelling.startswith(head) and spelling.startswith("--")}
        return self.by_spelling[matches.pop()] if len(matches) == 1 else None

    def nearest(self, name: str) -> str | None:
        """The option of this release whose spelling is closest to `name`, for the refusal's "did you mean"."""
        head = dashed(name.partition(".")[0])
        close = difflib.get_close_matches(head, list(self.by_spelling), n=1, cutoff=0.5)
        return close[0] if close else None


def dashed(name: str) -> str:
    """A long flag's name as vLLM's parser spells it: `_` to `-` (`--max_num_seqs` is `--max-num-seqs`)."""
    return "--" + name.removeprefix("--").replace("_", "-") if name.startswith("--") else name


def generic_spelled(name: str) -> Spelled:
    """The generic rules: the dashed name up to its first dot is the option, what follows the dot its key; `--no-X`
    is X's negative form."""
    head, dot, rest = name.partition(".") if name.startswith("--") else (name, "", "")
    head = dashed(head)
    if head.startswith("--no-") and not dot:
        return Spelled(Option("--" + head.removeprefix("--no-"), nargs=0), negative=True)
    return Spelled(Option(head, nargs="*"), key=tuple(rest.split(".")) if dot else ())


def spellings_of(options: Iterable[Option]) -> dict[str, tuple[Option, bool]]:
    """Every spelling of every option (long, aliases, `--no-` form) with the option and whether it negates."""
    found: dict[str, tuple[Option, bool]] = {}
    for option in options:
        for spelling in (option.name, *option.aliases):
            found[spelling] = (option, False)
        if option.negative is not None:
            found[option.negative] = (option, True)
    return found


GENERIC = Grammar(None)


def option_of(entry_name: str, entry: Mapping) -> Option:
    nargs = entry.get("nargs", 1)
    return Option(entry_name, nargs, entry.get("negative"), bool(entry.get("json")), tuple(entry.get("aliases", ())))


def grammar_of(data: Mapping) -> Grammar:
    """A table as tools/vllm_flags.py writes it, read into a Grammar."""
    options = {name: option_of(name, entry) for name, entry in data["options"].items()}
    return Grammar(
        version=data["vllm"],
        options=options,
        abbreviations=bool(data.get("abbreviations", True)),
        dotted_keys=bool(data.get("dotted_keys", False)),
        attached=dict(data.get("attached", {})),
    )


def table_versions() -> list[str]:
    """The releases the package holds a table for."""
    folder = resources.files(TABLE_PACKAGE).joinpath(TABLE_FOLDER)
    return sorted(item.name.removesuffix(".json") for item in folder.iterdir() if item.name.endswith(".json"))


@cache
def grammar_for(version: str | None) -> Grammar | None:
    """The table of this vLLM release (`0.32.0+cpu` reads 0.32.0's; `0.26.1` reads 0.26.0's, a patch release keeps
    its minor's flags); None where the package holds none for it."""
    found = release(version)
    if found is None:
        return None
    wanted = "{}.{}.{}".format(*found)
    same_minor = [name for name in table_versions() if release(name)[:2] == found[:2]]
    name = wanted if wanted in same_minor else (same_minor[0] if same_minor else None)
    if name is None:
        return None
    text = resources.files(TABLE_PACKAGE).joinpath(TABLE_FOLDER, f"{name}.json").read_text()
    return grammar_of(json.loads(text))
