"""The card's live progress (live_card.py, live_progress.py): figures counted from the results on disk, each shard's
line and the total, the bound on how often it changes, and a Hub that fails or hangs delaying no page.

The unit tests give the figures known times through an injected clock; the runs use the fake vLLM server and the
folder Hub double, and read the card from the double while the server holds the pages.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pytest

from ocr_core.publishing import live_progress
from ocr_core.publishing.live_card import (
    ShardProgress,
    card_states,
    duration,
    with_progress,
    without_progress,
)
from ocr_core.publishing.live_progress import LiveCard
from ocr_core.rates import recent_pages_per_s
from ocr_core.store import hub as hub_module
from ocr_core.store.lease import Lease
from ocr_core.store.mirror import ProgressMirror
from ocr_core.store.output import Destination
from ocr_core.store.progress import RESULT_SCHEMA, RowResult, write_durably
from tests.test_resume_publish import REPO, repeated, run_main, served
from tests.testbed.fake_server import fake_server
from tests.testbed.hub_double import FolderHub

KEY = "default/train"
WARNING = "warning: the card's progress was not updated"
SCRIPT = "ovis-ocr2-server.py"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def write_rows(folder: Path, name: str, rows: list[RowResult]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_durably(folder / name, [pa.Table.from_pylist([asdict(row) for row in rows], schema=RESULT_SCHEMA)])


def ids(first: int, last: int) -> list[str]:
    return [f"r{number:03d}" for number in range(first, last)]


def state(shard: int, shards: int, **figures) -> ShardProgress:
    values = dict(done=10, total=50, errors=0, pages_per_s=1.0, expected_end=1040.0, updated=1000.0, ended=False)
    return ShardProgress(shard=shard, shards=shards, run_total=50 * shards, **{**values, **figures})


@pytest.fixture(autouse=True)
def quick_hub_retries(monkeypatch):
    monkeypatch.setattr(hub_module, "UPLOAD_BACKOFF_S", 0.01)


# ---- the recent rate ----


def test_the_recent_rate_counts_the_last_minutes_and_a_young_run_from_its_first_page():
    steady = [float(second) for second in range(0, 1000, 10)]
    assert recent_pages_per_s(steady, now=990.0, window_s=600.0) == pytest.approx(60 / 600)
    assert recent_pages_per_s([100.0, 110.0, 120.0], now=130.0, window_s=600.0) == pytest.approx(2 / 30), (
        "a run younger than the window counts from its first page, not from its start-up"
    )
    assert recent_pages_per_s([100.0], now=130.0, window_s=600.0) is None
    assert recent_pages_per_s([], now=130.0, window_s=600.0) is None
    slowed = [float(second) for second in range(0, 600, 1)] + [float(second) for second in range(600, 1210, 10)]
    assert recent_pages_per_s(slowed, now=1200.0, window_s=600.0) == pytest.approx(60 / 600), "the old speed is gone"


# ---- the section ----


def test_the_section_goes_before_the_config_s_own_and_keeps_the_front_matter_and_the_prose():
    card = "---\nlicense: mit\n---\n# Mine\n\nNotes.\n\n<!-- ocr-vllm:default -->\n## OCR\n<!-- /ocr-vllm:default -->\n"
    live = with_progress(card, KEY, {0: state(0, 1)})
    assert live.startswith("---\nlicense: mit\n---\n# Mine\n\nNotes.\n")
    assert live.index("## Progress: config `default`, split `train`") < live.index("<!-- ocr-vllm:default -->")
    again = with_progress(live, KEY, {0: state(0, 1, done=20)})
    assert again.count("## Progress") == 1 and "| all | 20 of 50 (40%) |" in again
    assert without_progress(again, KEY) == card


def test_a_new_card_holds_the_section_alone_and_reads_back_every_shard_s_figures():
    states = {0: state(0, 2), 1: state(1, 2, done=50, ended=True)}
    card = with_progress(None, KEY, states)
    assert card_states(card, KEY) == states
    assert card_states(card, "other/train") == {}
    assert card_states(card.replace('"done": 10', '"done": "ten', 1), KEY) == {}, "a hand-edited state is let go"


def test_each_shard_has_its_line_and_the_total_ends_with_the_last_shard():
    states = {
        0: state(0, 3, done=10, errors=1, pages_per_s=1.0, expected_end=1040.0),
        1: state(1, 3, done=50, errors=2, pages_per_s=None, expected_end=None, ended=True),
        2: state(2, 3, done=20, pages_per_s=0.5, expected_end=1060.0),
    }
    card = with_progress(None, KEY, states)
    assert "| shard 0 | 10 of 50 (20%) | 1 | 1.00 | 1970-01-01 00:17 (in 1 min) | 1970-01-01 00:16 |" in card
    assert "| shard 1 | 50 of 50 (100%) | 2 | not known yet | pages done |" in card
    assert "| **all 3 shards** | 80 of 150 (53%) | 3 | 1.50 | 1970-01-01 00:17 (in 1 min) | |" in card
    waiting = with_progress(None, KEY, {0: states[0], 2: states[2]})
    assert "| **all 3 shards** | 30 of 150 (20%) | 1 | 1.50 | when all 3 shards report (2 have) | |" in waiting


def test_a_stopped_line_says_how_to_go_on_and_times_left_read_plainly():
    card = with_progress(None, KEY, {0: state(0, 1, done=30, ended=True)})
    assert "| all | 30 of 50 (60%) | 0 | 1.00 | stopped: rerun the same command to go on |" in card
    assert [duration(seconds) for seconds in (20, 600, 3 * 3600 + 300, 2 * 86400 + 5 * 3600)] == [
        "under a minute",
        "10 min",
        "3 h 05 min",
        "2 d 5 h",
    ]


# ---- the figures, from the results on disk ----


def live_store(tmp_path: Path, hub: FolderHub, shard: tuple[int, int] = (0, 1)) -> tuple[LiveCard, Clock]:
    """100 rows of which this run found 10 done (one with an error), and then did 30, one every 10 s from t=1010
    (one with an error); an earlier error that --retry-errors has yet to redo and another shard's row count for
    nothing."""
    destination = Destination(REPO, "train", None, hub, work_dir=tmp_path / "work", shard=shard)
    folder = destination.progress_dir
    found = [RowResult(index, row_id, text="t", recorded_at=5.0) for index, row_id in enumerate(ids(0, 10))]
    found[3] = RowResult(3, "r003", error="loop", recorded_at=5.0)
    write_rows(folder, "part-earlier.parquet", [*found, RowResult(50, "r050", error="loop", recorded_at=500.0)])
    done = [
        RowResult(index, row_id, text="t", recorded_at=1010.0 + 10 * number)
        for number, (index, row_id) in enumerate(zip(range(10, 40), ids(10, 40)))
    ]
    done[7] = RowResult(17, "r017", error="cut off", recorded_at=1080.0)
    write_rows(folder, "part-now.parquet", [*done, RowResult(0, "elsewhere", text="t", recorded_at=1100.0)])
    clock = Clock(1000.0)
    skip = set(ids(0, 10))
    live = LiveCard(destination, ids(0, 100), skip, 100 * shard[1], shard, every_s=180.0, clock=clock)
    clock.now = 1300.0
    return live, clock


def test_the_figures_are_this_job_s_rows_done_errors_the_recent_rate_and_the_end(tmp_path):
    live, _ = live_store(tmp_path, FolderHub(tmp_path / "hub"))
    figures = live.progress(1300.0, final=False)
    assert (figures.done, figures.total, figures.errors) == (40, 100, 2)
    assert figures.pages_per_s == pytest.approx(29 / 290)
    assert figures.expected_end == pytest.approx(1300.0 + 60 / (29 / 290))
    card = live.files([], final=False)["README.md"].read_text()
    assert "| all | 40 of 100 (40%) | 2 | 0.10 | 1970-01-01 00:31 (in 10 min) | 1970-01-01 00:21 |" in card
    final = live.progress(1310.0, final=True)
    assert final.ended and final.expected_end is None


def test_the_card_changes_at_most_once_an_interval_and_once_more_when_the_pages_end(tmp_path):
    live, clock = live_store(tmp_path, FolderHub(tmp_path / "hub"))
    updates = []
    for now, final in [(1300.0, False), (1350.0, False), (1479.0, False), (1481.0, False), (1500.0, False)]:
        clock.now = now
        updates.append(bool(live.files([], final)))
    clock.now = 1501.0
    updates.append(bool(live.files([], final=True)))
    assert updates == [True, False, False, True, False, True]


MIRROR_THREAD = "progress-mirror"


def reading_the_card(path_in_repo: str, thread: str) -> bool:
    """Whether this download is the card read in `thread` (the mirror's, in a run: the check of OUTPUT before it
    reads the card too)."""
    return path_in_repo == "README.md" and threading.current_thread().name == thread


class FailingCardHub(FolderHub):
    """Its card cannot be read from `thread` `failures` times."""

    failures: int = 1
    thread: str = MIRROR_THREAD

    def download(self, repo_id: str, path_in_repo: str, local_dir: Path) -> Path:
        if reading_the_card(path_in_repo, self.thread) and self.failures:
            self.failures -= 1
            raise ConnectionError("simulated Hub outage")
        return super().download(repo_id, path_in_repo, local_dir)


def test_a_failed_update_is_one_warning_and_the_next_one_goes_on(tmp_path, capsys):
    hub = FailingCardHub(tmp_path / "hub")
    hub.thread = threading.current_thread().name
    hub.create_repo(REPO, private=False)
    (hub.repo(REPO) / "README.md").write_text("# Mine\n")
    live, clock = live_store(tmp_path, hub)
    assert live.files(["README.md"], final=False) == {}
    assert capsys.readouterr().err.count(WARNING) == 1
    clock.now += 180.0
    card = live.files(["README.md"], final=False)["README.md"].read_text()
    assert card.startswith("# Mine\n") and "| all | 40 of 100 (40%) |" in card
    assert WARNING not in capsys.readouterr().err


def test_a_shard_keeps_the_other_shards_lines_and_drops_those_of_another_number_of_shards(tmp_path):
    hub = FolderHub(tmp_path / "hub")
    hub.create_repo(REPO, private=False)
    old = with_progress(None, KEY, {5: state(5, 8, done=7)})
    (hub.repo(REPO) / "README.md").write_text(with_progress(old, KEY, {1: state(1, 2, done=80, ended=True)}))
    live, _ = live_store(tmp_path, hub, shard=(0, 2))
    card = live.files(["README.md"], final=False)["README.md"].read_text()
    assert sorted(card_states(card, KEY)) == [0, 1]
    assert "| shard 0 | 40 of 100 (40%) |" in card and "| shard 1 | 80 of 50 " in card
    assert "| **all 2 shards** | 120 of 200 (60%) | 2 |" in card


def test_the_card_rides_in_the_mirror_s_commits_and_costs_none_of_its_own(tmp_path):
    """Three uploads, each renewing the lease: the card goes in the first and, the pages ended, in the last; the
    mirror without a lease and with nothing new to upload makes no commit for the card alone."""
    hub = FolderHub(tmp_path / "hub")
    hub.create_repo(REPO, private=False)
    live, clock = live_store(tmp_path, hub)
    mirror = ProgressMirror(live.destination, 300.0, {"model": "m"}, Lease.new("run", "whole", 900.0))
    mirror.carry(live.files)
    mirror.upload()
    clock.now += 60.0
    mirror.upload()
    mirror.upload(final=True)
    assert len(hub.commits) == 3
    assert ["README.md" in commit.added for commit in hub.commits] == [True, False, True]
    assert card_states((hub.repo(REPO) / "README.md").read_text(), KEY)[0].ended
    bare = ProgressMirror(live.destination, 300.0, {"model": "m"})
    bare.carry(live.files)
    bare.upload(final=True)
    assert len(hub.commits) == 3


# ---- whole runs through the Hub double ----


@pytest.fixture
def server():
    with fake_server() as running:
        yield running


def card_now(hub: FolderHub) -> str | None:
    path = hub.repo(REPO) / "README.md"
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def hold_until(seen: list, look, timeout_s: float = 120.0) -> None:
    """Holds the page being answered until `look()` finds something (kept in `seen`); gives up after `timeout_s`,
    which only a broken run reaches (its test then fails on what `seen` lacks)."""
    deadline = time.monotonic() + timeout_s
    while not seen and time.monotonic() < deadline:
        found = look()
        if found:
            seen.append(found)
            return
        time.sleep(0.05)


def live_line(hub: FolderHub, shard: int = 0) -> str | None:
    """The card, while it shows this shard working with some of its pages done."""
    card = card_now(hub)
    figures = card_states(card, KEY).get(shard)
    return card if figures and not figures.ended and 0 < figures.done < figures.total else None


def test_a_hub_run_s_card_shows_its_progress_while_it_runs(server, tmp_path, capsys, monkeypatch):
    """One page at a time, a part every 16 pages: once 20 pages are answered the server holds the rest until the
    card on the Hub double shows the first part's pages done of 48."""
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(live_progress, "CARD_EVERY_S", 0.0)
    hub = FolderHub(tmp_path / "hub")
    seen: list[str] = []
    server.state.before_answer = lambda answered: hold_until(seen, lambda: live_line(hub)) if answered >= 20 else None
    argv = [
        str(repeated(tmp_path / "in", copies=4)),
        REPO,
        *served(server, "--upload-every", "1", "--max-inflight", "1"),
    ]
    code, _, err = run_main(SCRIPT, argv, capsys, hub=hub)
    assert code == 0, err
    assert seen, "the card never showed the run's progress while it ran"
    figures = card_states(seen[0], KEY)[0]
    assert figures.total == 48 and 16 <= figures.done < 48 and figures.pages_per_s
    assert figures.expected_end is not None and figures.expected_end >= figures.updated
    assert f"| all | {figures.done} of 48 (" in seen[0]
    final = card_now(hub)
    assert "## Progress" not in final and "| rows | 48 |" in final, "the finished run's figures replace the progress"
    assert WARNING not in err


class HangingCardHub(FolderHub):
    """Reading the card in the mirror's thread hangs, the first time, until `release()` says so."""

    def __init__(self, root: Path, release) -> None:
        super().__init__(root)
        self.hanging = threading.Event()
        self.release = release
        self.released_by_pages = False

    def download(self, repo_id: str, path_in_repo: str, local_dir: Path) -> Path:
        if reading_the_card(path_in_repo, MIRROR_THREAD) and not self.hanging.is_set():
            self.hanging.set()
            deadline = time.monotonic() + 120
            while not self.release() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.released_by_pages = self.release()
        return super().download(repo_id, path_in_repo, local_dir)


def test_a_hanging_card_update_holds_no_page(server, tmp_path, capsys, monkeypatch):
    """The server holds the first page until the card's read hangs; the read stays hung until every page is
    answered, so the run can only finish if no page waited for the card."""
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(live_progress, "CARD_EVERY_S", 0.0)
    hub = HangingCardHub(tmp_path / "hub", release=lambda: server.state.answered >= 48)
    hub.create_repo(REPO, private=False)
    (hub.repo(REPO) / "README.md").write_text("# Mine\n")
    seen: list[bool] = []
    server.state.before_answer = lambda answered: hold_until(seen, hub.hanging.is_set) if answered == 0 else None
    argv = [str(repeated(tmp_path / "in", copies=4)), REPO, *served(server, "--upload-every", "1")]
    code, summary, err = run_main(SCRIPT, argv, capsys, hub=hub)
    assert code == 0 and summary["done_this_run"] == 48, err
    assert seen and hub.released_by_pages, "the pages waited for the hanging card"
    final = card_now(hub)
    assert "# Mine\n" in final and "| rows | 48 |" in final and "## Progress" not in final


def test_a_failing_card_update_is_one_warning_and_the_run_goes_on(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(live_progress, "CARD_EVERY_S", 0.0)
    hub = FailingCardHub(tmp_path / "hub")
    hub.create_repo(REPO, private=False)
    (hub.repo(REPO) / "README.md").write_text("# Mine\n")
    seen: list[bool] = []
    failed = lambda: hub.failures == 0  # noqa: E731
    server.state.before_answer = lambda answered: hold_until(seen, failed) if answered == 0 else None
    cards = []
    commit = hub.commit

    def recording(repo_id, add, delete, message, create_pr=False):
        if "README.md" in add and message.startswith("OCR progress"):
            cards.append(Path(add["README.md"]).read_text())
        return commit(repo_id, add, delete, message, create_pr)

    hub.commit = recording
    argv = [str(repeated(tmp_path / "in", copies=4)), REPO, *served(server, "--upload-every", "1")]
    code, _, err = run_main(SCRIPT, argv, capsys, hub=hub)
    assert code == 0, err
    assert seen and err.count(WARNING) == 1
    assert cards and card_states(cards[-1], KEY)[0].ended, "the updates after the failure went on"


def test_a_run_s_card_updates_ride_on_its_progress_commits(server, tmp_path, capsys, monkeypatch):
    """Progress commits every second, the card's interval longer than the run: the pages are held until three
    progress commits are in, and only the first and the last of them carry the card; no commit carries it alone."""
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(live_progress, "CARD_EVERY_S", 1e9)
    hub = FolderHub(tmp_path / "hub")
    seen: list[bool] = []

    def three_uploads() -> bool:
        return sum(commit.message.startswith("OCR progress: ") for commit in hub.commits) >= 4

    server.state.before_answer = lambda answered: hold_until(seen, three_uploads) if answered == 0 else None
    argv = [str(repeated(tmp_path / "in", copies=2)), REPO, *served(server, "--upload-every", "1")]
    code, _, err = run_main(SCRIPT, argv, capsys, hub=hub)
    assert code == 0 and seen, err
    progress = [commit for commit in hub.commits if commit.message.startswith("OCR progress: ")]
    carrying = [commit for commit in progress if "README.md" in commit.added]
    assert len(progress) >= 4 and len(carrying) == 2
    assert carrying[0] is not progress[-1] and carrying[-1] is next(
        commit for commit in reversed(progress) if "file(s) in" in commit.message
    )
    assert all(len(commit.added) > 1 for commit in carrying), "the card went up in a commit of its own"


def test_two_shards_lines_and_the_total_show_while_the_second_runs(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OCR_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(live_progress, "CARD_EVERY_S", 0.0)
    hub = FolderHub(tmp_path / "hub")
    source = repeated(tmp_path / "in", copies=8)
    argv = [str(source), REPO, *served(server, "--upload-every", "1", "--max-inflight", "1")]
    code, _, err = run_main(SCRIPT, [*argv, "--shard", "1/2"], capsys, hub=hub)
    assert code == 0, err
    after_one = card_now(hub)
    assert "**1 of 2 shards are in.**" in after_one
    assert "| shard 1 | 48 of 48 (100%) |" in after_one and "pages done" in after_one
    assert "| **all 2 shards** | 48 of 96 (50%) |" in after_one and "when all 2 shards report (1 have)" in after_one

    seen: list[str] = []
    answered_before = server.state.answered
    server.state.before_answer = lambda answered: (
        hold_until(seen, lambda: live_line(hub, shard=0)) if answered - answered_before >= 20 else None
    )
    code, _, err = run_main(SCRIPT, [*argv, "--shard", "0/2"], capsys, hub=hub)
    assert code == 0, err
    assert seen, "the card never showed shard 0 working"
    states = card_states(seen[0], KEY)
    assert sorted(states) == [0, 1] and states[1].ended and not states[0].ended
    assert "| shard 0 | " in seen[0] and "| shard 1 | 48 of 48 (100%) |" in seen[0]
    assert f"| **all 2 shards** | {48 + states[0].done} of 96 (" in seen[0]
    final = card_now(hub)
    assert "**2 of 2 shards are in.**" in final and "## Progress" not in final
