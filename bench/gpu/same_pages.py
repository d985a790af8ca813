"""How many pages a lever's run wrote the same text for as the reference run, read from both runs' published rows.

A lever that speeds the fleet up must not change what it writes: CUDA graphs, another step size or another kernel
may change the numerics. Both runs read the same dataset from its first row, so the published rows line up by
position; the share of pages with the same text is the figure. Random weights write garbage, the same garbage for
the same numerics, so a change shows, unless the garbage does not depend on the page: `distinct` says how many
different texts the reference wrote, and a comparison over one text repeated says little.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

COLUMN = "markdown"


def texts(output: Path) -> list[str | None]:
    """The output's published texts in input order (its data/ files sorted by name, as the contract names them)."""
    files = sorted((output / "data").glob("*.parquet"))
    return [text for path in files for text in pq.read_table(path, columns=[COLUMN]).column(COLUMN).to_pylist()]


def agreement(reference: Path, other: Path) -> dict | None:
    """Pages both runs wrote and how many of them hold the same text; None where either wrote none."""
    first, second = texts(reference), texts(other)
    pages = min(len(first), len(second))
    if not pages:
        return None
    same = sum(a == b for a, b in zip(first[:pages], second[:pages], strict=True))
    return {
        "reference": reference.name,
        "pages": pages,
        "same_text": same,
        "share": round(same / pages, 4),
        "distinct": len(set(first[:pages])),
    }


def compare(rows: list[dict], outputs: Path, reference: str) -> None:
    """Each run's texts against the reference run's (outputs/ARM-RUN), on the pages both wrote, into its row."""
    for row in rows:
        if row.get("ok") and row["arm"] != reference:
            row["same_text_as_reference"] = agreement(outputs / reference, outputs / row["arm"])
