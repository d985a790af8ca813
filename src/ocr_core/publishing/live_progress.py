"""A Hub run's progress on its card while it runs: counted from the results on disk, carried by the mirror's commits.

The figures are read from the progress folder, which the shape writes as pages finish, in the mirror's thread:
nothing here touches the page loop, and a slow, hanging or failing Hub delays no page. The card rides in the
mirror's own commits (store/mirror.py) rather than commits of its own: the Hub limits how many commits a repo
takes in an hour, and a `--jobs` run's shards already spend them on their progress. It changes at most every
CARD_EVERY_S, and once more when the pages end; an update that fails is one warning, and the next one goes on.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..console import say
from ..preparation.job import Job
from ..rates import recent_pages_per_s
from ..store.output import Destination
from ..store.progress import read_results
from .live_card import RATE_WINDOW_S, ShardProgress, card_states, section_key, with_progress

CARD_EVERY_S = 180.0
"""A person reading the card needs no fresher figures than every few minutes, and each update downloads the card
once; the mirror's commits (every --upload-every, 300 s unless set) bound it too."""
CARD_FILE = ".live-card.md"
CARD = "README.md"


class LiveCard:
    """One job's line on the card: `files` is the mirror's rider (store/mirror.py)."""

    def __init__(
        self,
        destination: Destination,
        owned: Sequence[str],
        skip: Collection[str],
        run_total: int,
        shard: tuple[int, int],
        every_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`skip`: the rows this run found done; `run_total`: the rows of every shard together; `every_s`: the least
        time between two updates but the last."""
        self.destination = destination
        self.owned = pa.array(list(owned), pa.string())
        self.skip = pa.array(sorted(skip), pa.string())
        self.run_total = run_total
        self.shard = shard
        self.every_s = every_s
        self.clock = clock
        self.since = clock()
        self.last: float | None = None
        self.key = section_key(destination.config, destination.split)

    def files(self, listing: Sequence[str], final: bool) -> dict[str, Path]:
        """The card to add to this commit, or nothing: too soon after the last update, or this one failed (one
        warning line; the next update tries again)."""
        now = self.clock()
        if not final and self.last is not None and now - self.last < self.every_s:
            return {}
        self.last = now
        try:
            return {CARD: self.write_card(listing, self.progress(now, final))}
        except Exception as exc:
            say(
                f"warning: the card's progress was not updated ({type(exc).__name__}: {exc}); the pages go on, and "
                "the next update tries again"
            )
            return {}

    def progress(self, now: float, final: bool) -> ShardProgress:
        """This job's figures now, from the newest record of each of its rows: done are the rows this run found
        done and those it finished since it began (a row --retry-errors has yet to redo is not done)."""
        records = read_results(self.destination.progress_dir, ["error"])
        records = records.filter(pc.is_in(records["row_id"], value_set=self.owned))
        this_run = pc.greater_equal(records["recorded_at"], self.since)
        records = records.filter(pc.or_(pc.is_in(records["row_id"], value_set=self.skip), this_run))
        finished = records.filter(pc.greater_equal(records["recorded_at"], self.since))["recorded_at"]
        first = pc.min(finished).as_py()
        recent = finished.filter(pc.greater_equal(finished, now - RATE_WINDOW_S)).to_pylist()
        rate = recent_pages_per_s([*recent, first] if first is not None else [], now, RATE_WINDOW_S)
        done, total = records.num_rows, len(self.owned)
        end = now + (total - done) / rate if rate and done < total and not final else None
        return ShardProgress(
            shard=self.shard[0],
            shards=self.shard[1],
            done=done,
            total=total,
            errors=records.num_rows - records["error"].null_count,
            pages_per_s=rate,
            expected_end=end,
            updated=now,
            ended=final,
            run_total=self.run_total,
        )

    def write_card(self, listing: Sequence[str], mine: ShardProgress) -> Path:
        """The card as the Hub holds it, with this job's line replaced: the other shards' lines stay as they are,
        those of a run cut into another number of shards go."""
        existing = self.read_card(listing)
        states = {
            shard: state for shard, state in card_states(existing, self.key).items() if state.shards == mine.shards
        }
        path = self.destination.progress_dir / CARD_FILE
        path.write_text(with_progress(existing, self.key, {**states, mine.shard: mine}))
        return path

    def read_card(self, listing: Sequence[str]) -> str | None:
        """One read, no retries: a card that cannot be read now is read again at the next update."""
        if CARD not in listing:
            return None
        with tempfile.TemporaryDirectory() as folder:
            return self.destination.hub.download(self.destination.spec, CARD, Path(folder)).read_text()


def show_progress_on_card(job: Job) -> None:
    """Has the mirror carry this job's progress to the card: a Hub output whose card is the main branch's (with
    --create-pr the card changes only in the pull request)."""
    destination = job.destination
    if destination.local or destination.create_pr or not destination.mirror_progress:
        return
    shard = job.source.shard or (0, 1)
    live = LiveCard(destination, job.source.owned(), job.skip, len(job.source.ids), shard, CARD_EVERY_S)
    job.mirror.carry(live.files)
