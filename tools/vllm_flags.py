"""Writes the flag table of the vLLM this interpreter imports: every `vllm serve` option, read from its own parser.

    python tools/vllm_flags.py [--out FOLDER]      # run by a python that imports vllm (the test bed's, a pinned venv)
    PYTHONPATH=WHEEL_DIR python tools/vllm_flags.py --stub gguf   # another release's code (its wheel unpacked
                                                                    # without dependencies) on the test bed's packages

The plan reads `--extra-serve-args` through this table (src/ocr_core/planning/vllm_flags/VERSION.json): which
option each word sets (aliases, `_` for `-`, `=`, argparse's unambiguous abbreviations, a dotted key against its JSON
option), how many values it takes, and whether vLLM merges dotted keys. Only the parser is built: the engine's
compiled ops are never imported, so a release that cannot run on this machine still gives its table. A module that
release imports at parse time but the interpreter lacks (0.17 and 0.22 import `gguf` for GGUF configs) can be
stubbed with `--stub NAME`: no option's definition reads it.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

TABLES = Path(__file__).resolve().parents[1] / "src" / "ocr_core" / "planning" / "vllm_flags"
NO_VALUE_ACTIONS = ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction", "_CountAction", "_HelpAction")
# A dict option every release here has: the probe of whether the parser merges dotted keys sets a key of it.
DOTTED_PROBE = ("--mm-processor-kwargs", "mm_processor_kwargs")


class Refused(Exception):
    """The parser refused a probe's words."""


class Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the named modules (and their submodules) as empty stand-ins whose every attribute is a class."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = stand_in
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def stand_in(name: str) -> type:
    """Any attribute of a stubbed module: a class of that name (dunder names stay missing, as inspect expects)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {})


def serve_parser() -> argparse.ArgumentParser:
    """`vllm serve`'s parser as this release builds it (its make_arg_parser behind the positional model), raising
    instead of exiting; tests/pinned/flagcheck.py checks the recipes' flags with it. Built from the parser module
    rather than the `serve` subcommand, whose package also imports the benchmarks and, through them, the compiled
    kernels that a release that cannot run here cannot load."""
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser

    def refuse(message: str) -> None:
        raise Refused(message)

    parser = FlexibleArgumentParser(prog="vllm serve")
    parser.add_argument("model_tag", nargs="?")
    parser = make_arg_parser(parser)
    parser.error = refuse
    return parser


def nargs_of(action: argparse.Action) -> int | str:
    """How many words follow the option: 0 (a switch), 1, a fixed count, or argparse's "?", "*", "+"."""
    if type(action).__name__ in NO_VALUE_ACTIONS or isinstance(action, argparse.BooleanOptionalAction):
        return 0
    return 1 if action.nargs is None else action.nargs


def takes_json(action: argparse.Action) -> bool:
    """Whether the option's value is a JSON object (a dict or a config dataclass), the options dotted keys set."""
    kind = action.type
    if not callable(kind) or nargs_of(action) != 1:
        return False
    try:
        value = kind("{}")
    except Exception:
        return getattr(kind, "__name__", "") == "parse_dataclass"
    return value is not None and not isinstance(value, str)


def option_entry(action: argparse.Action) -> tuple[str, dict[str, Any]]:
    """The option's long name and its row: aliases, nargs, the `--no-` form of a boolean, whether it takes JSON."""
    strings = list(action.option_strings)
    negatives = [s for s in strings if s.startswith("--no-") and "--" + s.removeprefix("--no-") in strings]
    names = [s for s in strings if s not in negatives]
    long = next((s for s in names if s.startswith("--")), names[0])
    entry: dict[str, Any] = {"nargs": nargs_of(action)}
    if aliases := [s for s in names if s != long]:
        entry["aliases"] = aliases
    if isinstance(action, argparse.BooleanOptionalAction):
        entry["negative"] = "--no-" + long.removeprefix("--")
    if takes_json(action):
        entry["json"] = True
    return long, entry


def dotted_keys(parser: argparse.ArgumentParser) -> bool:
    """Whether this parser takes `--option.key value` for one key of the option's JSON and merges the keys of several
    such flags into one object (FlexibleArgumentParser's dotted keys), as the plan's merge relies on."""
    flag, dest = DOTTED_PROBE
    try:
        parsed = parser.parse_args([flag + ".a.b", "1", flag + ".a.c", "2", flag + ".d", "3"])
    except (Refused, ValueError, TypeError):
        return False
    return getattr(parsed, dest, None) == {"a": {"b": 1, "c": 2}, "d": 3}


def attached_shorthands(parser: argparse.ArgumentParser, options: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Short forms the parser rewrites itself before argparse sees them (`-O3` for `--optimization-level 3` from
    0.11 on): each single-dash one-letter word that is no option string of its own, with the option it sets."""
    known = {alias for entry in options.values() for alias in entry.get("aliases", ())}
    defaults = vars(parser.parse_args([]))
    found = {}
    for letter in "O":
        short = "-" + letter
        if short in known:
            continue
        try:
            changed = [k for k, v in vars(parser.parse_args([short + "3"])).items() if v != defaults.get(k)]
        except (Refused, ValueError, TypeError):
            continue
        long = "--" + changed[0].replace("_", "-") if len(changed) == 1 else None
        if long in options:
            found[short] = long
    return found


def table(parser: argparse.ArgumentParser, version: str) -> dict[str, Any]:
    options = dict(
        sorted(option_entry(action) for action in parser._actions if action.option_strings and action.dest != "help")
    )
    return {
        "vllm": version,
        "generated_by": "tools/vllm_flags.py",
        "abbreviations": bool(parser.allow_abbrev),
        "dotted_keys": dotted_keys(parser),
        "attached": attached_shorthands(parser, options),
        "options": options,
    }


def release_of(version: str) -> str:
    """The release a table is filed under: `0.32.0+cpu` is 0.32.0's parser."""
    return version.split("+")[0]


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--out", type=Path, default=TABLES, help="folder to write VERSION.json into")
    cli.add_argument("--stdout", action="store_true", help="print the table instead of writing it")
    cli.add_argument("--stub", action="append", default=[], help="a module to import as an empty stand-in")
    args = cli.parse_args(argv)
    if args.stub:
        sys.meta_path.insert(0, Stubs(args.stub))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    sys.argv = sys.argv[:1]
    import vllm

    version = release_of(vllm.__version__)
    text = render(table(serve_parser(), version))
    if args.stdout:
        sys.stdout.write(text)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{version}.json").write_text(text)
    print(args.out / f"{version}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
