"""The card's progress section: where a run writing to the Hub stands while it runs, read where its user looks.

A run on HF Jobs has no terminal its user watches, so each job writes its own line into a marked section of the
dataset card: pages done of its rows, errors, the rate over the last minutes, and the expected end as a UTC time
and as the time left. A `--jobs` run's shards share the card; each rewrites only its own line and keeps the other
shards' lines as the card holds them (their figures travel in the section as JSON, so no shard needs another's
files), and the section adds a total. A line lost to two shards' writes crossing is its shard's previous figures,
back to current at that shard's next update. When every shard has published, the section goes: the card's
figures of the finished run replace it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from ..store.front_matter import split_front_matter
from .card import section_markers

STATE_MARK = "ocr-vllm-progress-state"
RATE_WINDOW_S = 600.0
"""The rate behind the expected end: long enough to hold many pages at any useful speed, short enough that the
expected end follows a change of speed (a replica lost, a harder part of the input) within an update or two."""


@dataclass(frozen=True)
class ShardProgress:
    """One job's figures at one moment (Unix seconds); `ended`: its pages stopped (done, failed or interrupted)."""

    shard: int
    shards: int
    done: int
    total: int
    errors: int
    pages_per_s: float | None
    expected_end: float | None
    updated: float
    ended: bool
    run_total: int
    """The rows every shard together covers: the total line's own count, known before every shard reports."""


def section_key(config: str | None, split: str) -> str:
    return f"{config or 'default'}/{split}"


def markers(key: str) -> tuple[str, str]:
    return f"<!-- ocr-vllm-progress:{key} -->", f"<!-- /ocr-vllm-progress:{key} -->"


def section_of(prose: str, key: str) -> str | None:
    start, end = markers(key)
    if start not in prose or end not in prose:
        return None
    return prose.partition(start)[2].partition(end)[0]


def card_states(card: str | None, key: str) -> dict[int, ShardProgress]:
    """Every shard's figures as this card's section holds them; none from a card without one, or one whose state
    cannot be read (a hand edit): the shards write their lines again."""
    section = section_of(split_front_matter(card)[1], key)
    found = re.search(rf"<!-- {STATE_MARK} (.*?) -->", section or "", re.DOTALL)
    if found is None:
        return {}
    try:
        states = [ShardProgress(**item) for item in json.loads(found.group(1))]
    except (ValueError, TypeError):
        return {}
    return {state.shard: state for state in states}


def with_progress(card: str | None, key: str, states: dict[int, ShardProgress]) -> str:
    """The card with this config and split's section holding `states`: in its place, or before the config's own
    section, or after the card's prose; the front matter and every other section stay as they were."""
    head, prose = split_card(card)
    start, end = markers(key)
    block = f"{start}\n{progress_section(key, states)}{end}\n"
    if section_of(prose, key) is not None:
        before, _, rest = prose.partition(start)
        prose = before + block + rest.partition(end)[2].lstrip("\n")
    elif section_markers(key.split("/")[0])[0] in prose:
        before, found, rest = prose.partition(section_markers(key.split("/")[0])[0])
        prose = f"{before}{block}\n{found}{rest}"
    else:
        prose = f"{prose.rstrip()}\n\n{block}" if prose.strip() else f"\n{block}"
    return head + prose


def without_progress(card: str, key: str) -> str:
    """The card with this config and split's section gone (every shard has published)."""
    start, end = markers(key)
    if section_of(split_front_matter(card)[1], key) is None:
        return card
    before, _, rest = card.partition(start)
    return before + rest.partition(end)[2].lstrip("\n")


def split_card(card: str | None) -> tuple[str, str]:
    """The card's front matter exactly as written (or nothing when it has none), and its prose."""
    if not card or not card.startswith("---"):
        return "", card or ""
    _, header, prose = card.split("---", 2)
    return f"---{header}---", prose


def progress_section(key: str, states: dict[int, ShardProgress]) -> str:
    config, split = key.split("/")
    ordered = [states[shard] for shard in sorted(states)]
    sharded = ordered[0].shards > 1
    rows = "".join(progress_row(f"shard {state.shard}" if sharded else "all", state) for state in ordered)
    if sharded:
        rows += total_row(ordered)
    state = json.dumps([asdict(state) for state in ordered], sort_keys=True)
    return f"""## Progress: config `{config}`, split `{split}`

The run rewrites this section every few minutes while it works; when every shard has published, the run's own \
figures take its place.

| | pages done | errors | pages/s, last {RATE_WINDOW_S / 60:.0f} min | expected end (UTC) | updated (UTC) |
|---|---|---|---|---|---|
{rows}
<!-- {STATE_MARK} {state} -->
"""


def progress_row(label: str, state: ShardProgress) -> str:
    return (
        f"| {label} | {share(state.done, state.total)} | {state.errors:,} | {rate(state.pages_per_s)} | "
        f"{expected(state)} | {stamp(state.updated)} |\n"
    )


def total_row(states: list[ShardProgress]) -> str:
    """Every shard together: the run's rows (of every shard, reported or not), the rate of the shards still
    working, and the end of the last of them, once every shard has reported."""
    shards = states[0].shards
    done = sum(state.done for state in states)
    working = [state for state in states if not state.ended]
    rates = [state.pages_per_s for state in working if state.pages_per_s is not None]
    if len(states) < shards:
        end = f"when all {shards} shards report ({len(states)} have)"
    elif not working:
        end = "every shard's pages ended"
    elif any(state.expected_end is None for state in working):
        end = "not known yet"
    else:
        end = when(max(state.expected_end for state in working), max(state.updated for state in states))
    errors = sum(state.errors for state in states)
    pages_per_s = rate(sum(rates) if rates else None)
    return f"| **all {shards} shards** | {share(done, states[0].run_total)} | {errors:,} | {pages_per_s} | {end} | |\n"


def expected(state: ShardProgress) -> str:
    if state.ended:
        return "pages done" if state.done >= state.total else "stopped: rerun the same command to go on"
    if state.done >= state.total:
        return "publishing"
    if state.expected_end is None:
        return "not known yet"
    return when(state.expected_end, state.updated)


def when(end: float, now: float) -> str:
    return f"{stamp(end)} (in {duration(end - now)})"


def share(done: int, total: int) -> str:
    percent = f" ({100 * done / total:.0f}%)" if total else ""
    return f"{done:,} of {total:,}{percent}"


def rate(pages_per_s: float | None) -> str:
    return "not known yet" if pages_per_s is None else f"{pages_per_s:.2f}"


def stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%d %H:%M")


def duration(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    if minutes < 1:
        return "under a minute"
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"
