"""argparse as the recipes use it: an error is the one line that matters, never shows a secret and names the flag an
unknown one was meant to be; --help shows every option's default. The options themselves are parser.py's."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import NoReturn

from ..planning.job_commands import SECRET_FLAGS, masked_secrets
from ..redaction import redact

UNRECOGNIZED = "unrecognized arguments: "
SHAPE_COUNTERPARTS = {
    "--batch-size": (
        "--max-inflight",
        "a server recipe sends pages one by one and keeps up to --max-inflight N of them in flight",
    ),
    "--max-inflight": ("--batch-size", "an offline recipe feeds its engine batches of --batch-size N pages"),
}


class RecipeHelp(argparse.RawDescriptionHelpFormatter):
    """Every option's default in --help (unless its text already names it; never a secret's value); the epilog's
    job command as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        secret = any(flag in SECRET_FLAGS for flag in action.option_strings)
        if action.default in (None, False, "", argparse.SUPPRESS) or "default" in text or secret:
            return action.help
        if not action.option_strings:
            return action.help
        return f"{text} (default: %(default)s)".lstrip()


class RecipeParser(argparse.ArgumentParser):
    """argparse, except that an error is the one line that matters (the usage would bury it), never shows a secret,
    and says which flag an unknown one was meant to be; `failure` keeps it for the summary line. Abbreviations are
    not taken: `--max-sample 2` would silently stop meaning --max-samples once another flag began the same way."""

    failure: str | None = None

    def __init__(self, **kwargs) -> None:
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith(UNRECOGNIZED):
            words = message.removeprefix(UNRECOGNIZED).split()
            hints = "".join(f"; {hint}" for hint in self.flag_hints(words))
            message = f"{UNRECOGNIZED}{' '.join(masked_secrets(words))}{hints}"
        self.failure = redact(message)
        self.exit(2, f"{self.prog}: error: {self.failure} (see {self.prog} --help)\n")

    def flag_hints(self, words: Sequence[str]) -> list[str]:
        """For each unknown flag: its counterpart in this shape of recipe, else the closest flag it has."""
        known = [name for name in self._option_string_actions if name.startswith("--")]
        hints = []
        for flag in (word.partition("=")[0] for word in words if word.startswith("--")):
            counterpart = SHAPE_COUNTERPARTS.get(flag)
            if counterpart is not None and counterpart[0] in known:
                hints.append(f"{flag} belongs to the other shape of recipe: {counterpart[1]}")
            elif meant := meant_flag(flag, known):
                hints.append(f"{flag}: did you mean {meant}?")
        return hints


def meant_flag(flag: str, known: Sequence[str]) -> str | None:
    """The one flag that `flag` abbreviates, else the closest in spelling, else None."""
    longer = [name for name in known if name.startswith(flag)]
    if len(longer) == 1:
        return longer[0]
    closest = difflib.get_close_matches(flag, longer or known, n=1, cutoff=0.75)
    return closest[0] if closest else None
