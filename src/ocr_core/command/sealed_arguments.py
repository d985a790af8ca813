"""A job's arguments with no secret in them: the words that hold one travel as a job secret, put back in the job.

HF Jobs show a job's command line on its page, to anyone who can see the job. A password in `--server`'s URL or
a token inside `--extra-serve-args` would be shown there, so the launcher sends each such word masked (as
`redact` masks it) and the words themselves in the job secret SEALED_SECRET, which HF Jobs hand only to the job's
environment. The job puts each back where its masked form stands, before it parses its command line.

A dry run's hand command names the secret too: the user exports it from `hand_template`, each *** put back as
typed; a value the job cannot use (not the launcher's list, or a *** left in it) stops the job at once, exit 2,
rather than running it against a server with `***` for its password.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from ..planning.serve_flags import user_flags
from ..redaction import MASK, redact, register_run_secrets
from ..settings import Settings

SEALED_SECRET = "OCR_SEALED_ARGUMENTS"


def sealed(arguments: Sequence[str]) -> tuple[list[str], str | None]:
    """The arguments as the job's page may show them, and the secret that holds the words masked in them (None
    when no word holds a secret): each as its place, its masked form and itself."""
    shown = [redact(word) for word in arguments]
    held = [[index, masked, word] for index, (masked, word) in enumerate(zip(shown, arguments)) if masked != word]
    return shown, json.dumps(held) if held else None


def hand_template(sealed_words: str) -> str:
    """The value to export as SEALED_SECRET to start a dry run's job by hand: each sealed word's place and masked
    form, and where the word goes, its masked form again for the user to fill in. It holds no secret."""
    return json.dumps([[index, masked, masked] for index, masked, _ in json.loads(sealed_words)])


def unsealed(
    argv: Sequence[str], refuse: Callable[[str], NoReturn], environ: Mapping[str, str] = os.environ
) -> list[str]:
    """The job's command line with its sealed words back; a word stays as it is unless the secret says that its
    masked form stands at that place (a command line the launcher did not write is not touched). A secret that is
    not the launcher's list, or still holds a ***, is refused with `refuse` (the parser's error: exit 2), and its
    words are never said."""
    words = list(argv)
    try:
        held = [
            (int(index), str(masked), str(word))
            for index, masked, word in json.loads(environ.get(SEALED_SECRET) or "[]")
        ]
    except (ValueError, TypeError) as exc:
        refuse(
            f"{SEALED_SECRET} is not the launcher's list of [place, masked word, word] entries ({type(exc).__name__}); "
            "export it as the launcher's --dry-run shows, or start the job with the launcher (--jobs N)"
        )
    for index, masked, word in held:
        if MASK in word:
            refuse(
                f"{SEALED_SECRET} still holds {MASK} in the word for {masked} (place {index}): put back in it what "
                "you typed there (the --server URL's user:password, a token of --extra-serve-args) and start the job "
                "again"
            )
        if index < len(words) and words[index] == masked:
            words[index] = word
    return words


def register_command_secrets(settings: Settings, environ: Mapping[str, str] = os.environ) -> None:
    """Every secret the parsed command holds, registered once so that nothing the run prints or writes shows it:
    the tokens, the --server URL's credential and the secret flags of --extra-serve-args."""
    tokens = (settings.hf_token, settings.api_key)
    register_run_secrets(tokens, settings.server, user_flags(settings.extra_serve_args), environ)
