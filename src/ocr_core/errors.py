"""Which failures end the job, and how: the typed errors every shape shares.

A `CommandError` means the command itself must change (exit 2: a wrong flag, an unusable input, a server that
cannot start, no GPU for an offline recipe, a Hub that refuses the token). A `JobFailed` means nothing more can
succeed in this run, though the command may be right (exit 1: finished rows are kept for the rerun). Anything
else that goes wrong on one page becomes that page's error row, with `internal_error` naming where it happened.
"""

from __future__ import annotations

ERROR_TEXT_LIMIT = 500
INTERNAL_ERROR = "internal error"


class CommandError(Exception):
    """The command cannot work as written; the message says what to change."""


class JobFailed(Exception):
    """Nothing can succeed until the command changes; the message says how."""


class CutOff(JobFailed):
    """The pages are cut off at max_tokens: the way on is a command, the same one with a larger --max-tokens and
    --retry-errors, which the shape prints as it stops (the launch's `raised`)."""


def internal_error(stage: str, exc: BaseException) -> str:
    """The error column of a page that met an exception nobody expected: a bug, or an answer of an odd shape."""
    return f"{INTERNAL_ERROR} while {stage}: {type(exc).__name__}: {exc}"[:ERROR_TEXT_LIMIT]
