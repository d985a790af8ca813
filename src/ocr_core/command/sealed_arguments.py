"""A job's arguments with no secret in them: the words that hold one travel as a job secret, put back in the job.

HF Jobs show a job's command line on its page, to anyone who can see the job. A password in `--server`'s URL or
a token inside `--extra-serve-args` would be shown there, so the launcher sends each such word masked (as
`redact` masks it) and the words themselves in the job secret SEALED_SECRET, which HF Jobs hand only to the job's
environment. The job puts each back where its masked form stands, before it parses its command line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from ..redaction import redact

SEALED_SECRET = "OCR_SEALED_ARGUMENTS"


def sealed(arguments: Sequence[str]) -> tuple[list[str], str | None]:
    """The arguments as the job's page may show them, and the secret that holds the words masked in them (None
    when no word holds a secret): each as its place, its masked form and itself."""
    shown = [redact(word) for word in arguments]
    held = [[index, masked, word] for index, (masked, word) in enumerate(zip(shown, arguments)) if masked != word]
    return shown, json.dumps(held) if held else None


def unsealed(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """The job's command line with its sealed words back; a word stays as it is unless the secret says that its
    masked form stands at that place (a command line the launcher did not write is not touched)."""
    words = list(argv)
    for index, masked, word in json.loads(environ.get(SEALED_SECRET) or "[]"):
        if index < len(words) and words[index] == masked:
            words[index] = word
    return words
