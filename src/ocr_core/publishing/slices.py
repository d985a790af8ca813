"""Each job publishes its own slice of the output, and nothing waits for the others or holds the whole dataset.

A job (one `--shard I/N`, or an unsharded run as shard 0 of 1) reads only its own rows' results, writes them
beside its range of input rows as its own data files (assembly.py names them so they sort in input order), and
commits those with a small facts file in the progress folder, `slice-<I>-of-<N>.json` (layout.slice_facts_name:
its rows, errors, speed, cost and command), in one commit. `load_dataset` then returns every finished shard in
input order.

The card is shared, so it is never built from one job's memory: it is rendered from the facts files on the Hub
(or in the folder), which only their own shard writes. After its commit a job reads them again and rewrites the
card until it matches what it read, so whichever of two concurrent shards commits last, the card ends up counting
both; rewriting it from the same facts gives the same card.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..console import say
from ..store.hub import with_retries
from ..store.layout import is_slice_facts_of, slice_facts_name
from ..store.output import Destination
from ..store.progress import RESULT_SCHEMA, folder_lock, newest_rows, part_files, read_part
from .card import CardFacts, ShardLine, render_card
from .live_card import section_key, without_progress

CARD_SETTLE_ATTEMPTS = 5


def slice_results(folder: Path, ids: Sequence[str]) -> pa.Table:
    """The newest result of each of these rows, every column, in no particular order, as one chunk (taking rows
    from a table of many chunks copies all of them at every call). Which record is newest is decided on the row
    ids and times alone; then each part is read once and only its winning rows are kept, so memory holds this
    slice's text, at most twice while its chunks are joined, never another shard's rows."""
    wanted = pa.array(list(ids), pa.string())
    with folder_lock(folder, exclusive=False):
        parts = part_files(folder)
        keys = []
        for position, part in enumerate(parts):
            table = read_part(part, ["row_id", "recorded_at"])
            if table is not None:
                table = table.append_column("_file", pa.array([position] * table.num_rows, pa.int32()))
                table = table.append_column("_row", pa.array(range(table.num_rows), pa.int64()))
                keys.append(table.filter(pc.is_in(table["row_id"], value_set=wanted)))
        kept = newest_rows(pa.concat_tables(keys)) if keys else None
        tables = [] if kept is None else list(winning_rows(parts, kept))
    return pa.concat_tables(tables).combine_chunks() if tables else RESULT_SCHEMA.empty_table()


def winning_rows(parts: list[Path], kept: pa.Table) -> Iterator[pa.Table]:
    for position, part in enumerate(parts):
        rows = kept.filter(pc.equal(kept["_file"], position))["_row"]
        table = read_part(part) if len(rows) else None
        if table is not None:
            yield table.take(rows)


def slice_facts(shard: tuple[int, int], facts: CardFacts, files: list[str]) -> dict[str, Any]:
    """What the card needs to know of one published slice; its own shard alone writes it."""
    return {
        "shard": list(shard),
        "rows": facts.rows,
        "errors": facts.errors,
        "truncated": facts.truncated,
        "pages_per_s": facts.pages_per_s,
        "sustained_pages_per_s": facts.sustained_pages_per_s,
        "billed_pages_per_s": facts.billed_pages_per_s,
        "tokens_per_s": facts.tokens_per_s,
        "window": facts.window,
        "cost": facts.cost,
        "command": facts.command,
        "files": files,
    }


def published_slices(destination: Destination, shards: int) -> list[dict[str, Any]]:
    """The facts of every slice of this N published so far, in shard order (read fresh each time)."""
    prefix = destination.progress_prefix
    names = [name for name in destination.listing() if is_slice_facts_of(name, prefix, shards)]
    if destination.local:
        return sorted((json.loads((destination.root / name).read_text()) for name in names), key=shard_of)
    with tempfile.TemporaryDirectory() as folder:
        paths = [
            with_retries(lambda name=name: destination.hub.download(destination.spec, name, Path(folder)), "reading")
            for name in names
        ]
        return sorted((json.loads(path.read_text()) for path in paths), key=shard_of)


def shard_of(facts: dict[str, Any]) -> int:
    return facts["shard"][0]


def card_facts(template: CardFacts, slices: list[dict[str, Any]]) -> CardFacts:
    """The card's figures from the published slices: totals over them, the first slice's command and speed, and
    one line per slice when the run is sharded."""
    first = slices[0]
    shards = first["shard"][1]
    lines = tuple(
        ShardLine(shard_of(item), item["rows"], item["errors"], item["pages_per_s"], item["cost"]) for item in slices
    )
    return replace(
        template,
        rows=sum(item["rows"] for item in slices),
        errors=sum(item["errors"] for item in slices),
        truncated=sum(item["truncated"] for item in slices),
        pages_per_s=first["pages_per_s"],
        sustained_pages_per_s=first.get("sustained_pages_per_s"),
        billed_pages_per_s=first.get("billed_pages_per_s"),
        tokens_per_s=first["tokens_per_s"],
        window=first["window"],
        cost=first["cost"],
        command=first["command"],
        shards=shards,
        shard_lines=lines if shards > 1 else (),
    )


def publish_slice(
    destination: Destination, files: dict[str, Path], facts: dict[str, Any], template: CardFacts, message: str
) -> str:
    """One commit: this slice's data files, its facts file and the card (this slice's earlier files go); then the
    card is settled against what every shard has published meanwhile."""
    shard = tuple(facts["shard"])
    others = [item for item in published_slices(destination, shard[1]) if tuple(item["shard"]) != shard]
    rendered = card_facts(template, sorted([*others, facts], key=shard_of))
    with tempfile.TemporaryDirectory() as folder:
        facts_path = Path(folder) / slice_facts_name(shard)
        facts_path.write_text(json.dumps(facts, sort_keys=True) + "\n")
        name = destination.in_progress(facts_path.name)
        card = finished_card(destination.existing_card(), rendered, len(others) + 1)
        published = destination.publish({**files, name: facts_path}, card, message, shard)
    if not destination.create_pr:
        settle_card(destination, template, rendered, shard[1])
    return published


def finished_card(existing: str | None, facts: CardFacts, published: int) -> str:
    """The card with these facts; once every shard has published, without the progress the shards wrote into it
    while they ran (live_card.py): the run's own figures take its place."""
    card = render_card(existing, facts)
    return without_progress(card, section_key(facts.config, facts.split)) if published == facts.shards else card


def settle_card(destination: Destination, template: CardFacts, rendered: CardFacts, shards: int) -> None:
    """Rewrites the card until it says what the published facts say: a shard that committed between our reading
    and our commit is counted, whichever commit landed last."""
    for _ in range(CARD_SETTLE_ATTEMPTS):
        slices = published_slices(destination, shards)
        current = card_facts(template, slices)
        if current == rendered:
            return
        card = finished_card(destination.existing_card(), current, len(slices))
        destination.write_card(card, "OCR: card counts every slice")
        rendered = current
    say("warning: the card kept changing under concurrent shards; the next shard to publish rewrites it")
