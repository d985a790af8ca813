"""OvisOCR2's hooks: the card's own output clean-up, and the flag that keeps its figure tags.

Like the card's parser, the output drops figure placeholders (`<img src="images/bbox_...">`, kept with
--keep-image-tags) and trims a truncated repeating tail. The facts (prompt, sampling, flags) are in the scripts.
"""

import argparse
import re
from collections.abc import Mapping
from typing import Any

from ocr_core.facts import Parsed
from ocr_core.judging.repeats import trim_repeats

IMAGE_TAG = re.compile(r'<img\s+src="images/bbox_\d+_\d+_\d+_\d+\.jpg"\s*/?>')
TRIM_FROM_CHARS = 8000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep-image-tags",
        action="store_true",
        help="keep the model's <img src=images/bbox_...> figure tags",
    )


def parse(text: str, options: Mapping[str, Any]) -> Parsed:
    if len(text) >= TRIM_FROM_CHARS:
        text = trim_repeats(text, min_repeats=5)
    if not options["keep_image_tags"]:
        text = re.sub(r"\n{3,}", "\n\n", IMAGE_TAG.sub("", text))
    return Parsed(text.strip())
