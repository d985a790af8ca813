"""A dataset card's YAML front matter, apart from its prose."""

from __future__ import annotations

import yaml


def split_front_matter(card: str | None) -> tuple[dict, str]:
    if not card or not card.startswith("---"):
        return {}, card or ""
    _, header, body = card.split("---", 2)
    return (yaml.safe_load(header) or {}), body
