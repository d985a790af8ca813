"""What a run says on stderr: its own messages (`say`, above the progress bar), and none of the third-party notices
that say nothing a user can act on.

It keeps third-party notices that say nothing a user can act on off the terminal, so they never tear the progress
bar: each is silenced by its exact source, and every other warning still shows.

- Pillow warns ("possible decompression bomb") on any page above 89 MP, though a page is only read to be fitted
  to the model's size; one above twice that still fails, as its own error row.
- vLLM's CPU build logs "Triton is installed, but doesn't include CPU backend" when an offline recipe imports it.
- multiprocessing's resource tracker warns at the interpreter's exit, after the summary line, that it cleans up
  the shared memory vLLM's engine left ("leaked shared_memory objects to clean up at shutdown"): it does clean
  them up, and the summary has to be the last thing on screen. The tracker is a process of its own, started with
  the interpreter's -W options, so the filter goes into sys.warnoptions before vLLM starts it.
"""

from __future__ import annotations

import logging
import sys
import warnings

from PIL import Image
from tqdm.auto import tqdm

from .redaction import redact

TRITON_LOGGER = "vllm.triton_utils.importing"
TRITON_NOTICE = "doesn't include CPU backend"
TRACKER_NOTICE = "ignore:resource_tracker:UserWarning"


def not_the_triton_notice(record: logging.LogRecord) -> bool:
    return TRITON_NOTICE not in record.getMessage()


def silence_notices() -> None:
    """Once, before any page is read or vLLM is imported (a logger's filter outlives vLLM's logging set-up)."""
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    logging.getLogger(TRITON_LOGGER).addFilter(not_the_triton_notice)
    if TRACKER_NOTICE not in sys.warnoptions:
        sys.warnoptions.append(TRACKER_NOTICE)


def say(message: str) -> None:
    """Logs to stderr without tearing the progress bar; stdout is kept for the final summary. Never a secret."""
    tqdm.write(redact(message), file=sys.stderr)


# At import too: a spawned engine process imports the recipe (and so this module) before vLLM, and has no run_recipe.
silence_notices()
