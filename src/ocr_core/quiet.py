"""Keeps third-party notices that say nothing a user can act on off the terminal, so they never tear the progress
bar: each is silenced by its exact source, and every other warning still shows.

- Pillow warns ("possible decompression bomb") on any page above 89 MP, though a page is only read to be fitted
  to the model's size; one above twice that still fails, as its own error row.
- vLLM's CPU build logs "Triton is installed, but doesn't include CPU backend" when an offline recipe imports it.
"""

from __future__ import annotations

import logging
import warnings

from PIL import Image

TRITON_LOGGER = "vllm.triton_utils.importing"
TRITON_NOTICE = "doesn't include CPU backend"


def not_the_triton_notice(record: logging.LogRecord) -> bool:
    return TRITON_NOTICE not in record.getMessage()


def silence_notices() -> None:
    """Once, before any page is read or vLLM is imported (a logger's filter outlives vLLM's logging set-up)."""
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    logging.getLogger(TRITON_LOGGER).addFilter(not_the_triton_notice)
