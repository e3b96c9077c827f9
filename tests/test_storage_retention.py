"""Retention (``Store.prune`` / ``sparsewatch db prune``) on real SQLite and PostgreSQL: old
windows go with every row of theirs, what a restarted worker needs stays, a dry run only counts."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sparsewatch.storage import retention
from sparsewatch.storage.schema import metadata
from sparsewatch.storage.store import Store

from tests.support.cli import run_cli
from tests.support.storage import T0, dump, novel_document_alerts, write_window

N_WINDOWS = 10  # window w covers [T0 + w h, T0 + (w + 1) h)
BY_WINDOW = ("windows", "documents", "alerts", "topics", "snapshots")


def _window_of(table: str, row: tuple) -> int:
    """The window number of a row of ``dump`` (its columns in the schema's order)."""
    return row[list(metadata.tables[table].columns.keys()).index("window_seq")]


@pytest.fixture
def store(database_url: str):
    with Store.open(database_url) as store:
        for seq in range(N_WINDOWS):
            write_window(store, seq, n=20, stream="news")
        for seq in range(3):
            write_window(store, seq, n=5, stream="tweets")
        yield store


def _rows_by_window(snapshot: dict, stream: str) -> dict[str, dict[int, list]]:
    out: dict[str, dict[int, list]] = {}
    for table in BY_WINDOW:
        for row in snapshot[table]:
            if stream in row:
                out.setdefault(table, {}).setdefault(_window_of(table, row), []).append(row)
    return out


def test_old_windows_go_with_their_rows_and_the_rest_stays_as_it_was(store):
    before = dump(store)
    dry = store.prune(before=T0 + timedelta(hours=5), keep_windows=2, dry_run=True)
    assert dump(store) == before  # a dry run deletes nothing
    report = store.prune(before=T0 + timedelta(hours=5), keep_windows=2)
    assert report.deleted == dry.deleted
    after = dump(store)
    # news windows 0..3 ended before T0 + 5h (tweets 0..1: its newest 2 windows are kept)
    old_news = _rows_by_window(before, "news")
    new_news = _rows_by_window(after, "news")
    for table in BY_WINDOW:
        kept = {w: rows for w, rows in old_news.get(table, {}).items() if w >= 4}
        if table == "snapshots":  # the newest snapshot of each kind is kept, here window 9's
            assert set(new_news[table]) == set(range(4, N_WINDOWS))
        assert new_news.get(table, {}) == kept, table
    tweets = _rows_by_window(after, "tweets")
    assert set(tweets["windows"]) == {1, 2}
    assert report.deleted["windows"] == 4 + 1
    assert report.deleted["documents"] == 4 * 20 + 5
    # what a restarted worker reads is untouched, and so are the dead letters
    for table in ("checkpoints", "partition_offsets", "dead_letters"):
        assert after[table] == before[table], table


def test_keep_windows_and_keep_snapshots_hold_however_old(store):
    future = datetime(2100, 1, 1, tzinfo=UTC)
    assert store.prune(before=future, keep_windows=N_WINDOWS).deleted["windows"] == 3 - 3
    report = store.prune(before=future, keep_windows=1, keep_snapshots=3, streams=["news"])
    assert report.deleted["windows"] == N_WINDOWS - 1
    after = dump(store)
    news = _rows_by_window(after, "news")
    assert set(news["windows"]) == set(news["documents"]) == {N_WINDOWS - 1}
    # the 3 newest snapshots outlive their windows: the models as they were stay inspectable
    assert set(news["snapshots"]) == {N_WINDOWS - 3, N_WINDOWS - 2, N_WINDOWS - 1}
    assert set(_rows_by_window(after, "tweets")["windows"]) == {0, 1, 2}  # --stream news only
    # a later prune keeping fewer snapshots deletes those the earlier one kept without windows
    report = store.prune(before=future, keep_windows=1, keep_snapshots=1, streams=["news"])
    assert report.deleted == dict.fromkeys(report.deleted, 0) | {"snapshots": 2}
    assert set(_rows_by_window(dump(store), "news")["snapshots"]) == {N_WINDOWS - 1}


def test_dead_letters_by_stored_time_in_batches(store, monkeypatch):
    monkeypatch.setattr(retention, "DEAD_LETTER_BATCH", 3)
    n = len(dump(store)["dead_letters"])
    assert n == N_WINDOWS  # one per window written (the tweets' share keys with the news')
    long_ago = datetime(2000, 1, 1, tzinfo=UTC)
    assert store.prune(dead_letters_before=long_ago).deleted["dead_letters"] == 0
    soon = datetime.now(UTC) + timedelta(seconds=5)
    assert store.prune(dead_letters_before=soon, dry_run=True).deleted["dead_letters"] == n
    assert store.prune(dead_letters_before=soon).deleted["dead_letters"] == n
    assert dump(store)["dead_letters"] == []


def test_the_command(store, database_url, monkeypatch, capsys):
    url = database_url
    code, out, err = run_cli(monkeypatch, capsys, "db", "prune", "--database-url", url)
    assert code == 2 and "give --before, --dead-letters-before or both" in err
    args = ["db", "prune", "--database-url", url, "--before", (T0 + timedelta(hours=3)).isoformat()]
    # fewer than the windows a restarted worker recomputes: refused (was accepted)
    code, out, err = run_cli(monkeypatch, capsys, *args, "--keep-windows", "9", "--dry-run")
    assert code == 2 and out == "" and "windows.checkpoint_every (10)" in err
    monkeypatch.setenv("SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY", "1")
    code, out, err = run_cli(monkeypatch, capsys, *args, "--keep-windows", "1", "--dry-run")
    assert code == 0 and err == ""
    # windows 0 and 1 of both streams ended before T0 + 3h: 2 x 20 + 2 x 5 documents, 3 novel
    # alerts a news window and 1 a tweets window, 4 topics and 1 snapshot a window
    assert out == (
        "would delete 4 windows, 50 documents, 8 alerts, 16 topics, 4 snapshots, 0 dead letters\n"
    )
    code, out, err = run_cli(monkeypatch, capsys, "db", "prune", "--database-url", url,
                             "--before", "now", "--keep-windows", "2", "--json")  # fmt: skip
    assert code == 0 and err == ""
    deleted = json.loads(out)["deleted"]
    assert deleted["windows"] == (N_WINDOWS - 2) + (3 - 2)
    assert len(dump(store)["windows"]) == 4


def test_pruning_while_a_worker_writes_leaves_whole_windows(store):
    # A worker keeps writing windows (one transaction each) while prune runs again and again:
    # neither fails, and every window is there whole or gone whole (its documents, alerts and
    # topics with it), however the transactions interleave.
    errors: list[BaseException] = []
    done = threading.Event()

    def worker() -> None:
        try:
            for seq in range(N_WINDOWS, N_WINDOWS + 30):
                write_window(store, seq, n=20, stream="news")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=worker)
    writer.start()
    prunes = 0
    while not done.is_set() or prunes == 0:
        store.prune(before=T0 + timedelta(hours=N_WINDOWS + 15), keep_windows=5)
        prunes += 1
    writer.join()
    assert errors == []
    news = _rows_by_window(dump(store), "news")
    windows = set(news["windows"])
    assert windows >= set(range(N_WINDOWS + 15, N_WINDOWS + 30))  # newer than the cut-off
    for table in ("documents", "alerts", "topics"):
        assert set(news[table]) == windows, table
    assert all(len(news["documents"][w]) == 20 for w in windows)
    assert all(len(news["topics"][w]) == 4 for w in windows)


def test_alerts_pending_publication_outlive_their_window_until_sent(
    database_url, monkeypatch, capsys
):
    # An alert committed but not yet sent to the alerts topic (the writer's outbox: the topic
    # or the broker was down) is the only copy the writer sends from: prune deleted it with its
    # window, and the alert never reached the topic. It stays, counted, until it is sent.
    with Store.open(database_url) as store:
        for seq in range(4):
            write_window(store, seq, n=14, stream="news")  # 2 novel alerts a window
        with store.transaction() as tx:
            pending = novel_document_alerts(
                [{"stream": "news", "doc_id": f"late-{i}", "window_seq": i,
                  "event_time": T0 + timedelta(hours=i, minutes=30), "novelty_score": 0.9,
                  "novel": True, "text": "a story"} for i in (0, 1, -1)],
                summary_chars=40,
            )  # fmt: skip
            tx.insert_alerts(pending, publish_to="sw.alerts")  # window -1 has no row: an orphan
        before = T0 + timedelta(hours=3)  # windows 0 and 1 ended before it
        args = ["db", "prune", "--database-url", database_url, "--before", before.isoformat()]
        monkeypatch.setenv("SPARSEWATCH_WINDOWS_CHECKPOINT_EVERY", "1")
        code, out, err = run_cli(monkeypatch, capsys, *args, "--keep-windows", "1", "--dry-run")
        assert code == 0 and err == ""
        assert out == (
            "would delete 2 windows, 28 documents, 4 alerts, 8 topics, 2 snapshots, "
            "0 dead letters; would keep 3 alerts still pending publication\n"
        )
        code, out, err = run_cli(monkeypatch, capsys, *args, "--keep-windows", "1", "--json")
        assert code == 0 and err == ""
        assert json.loads(out)["deleted"]["alerts"] == 4
        assert json.loads(out)["kept_pending_alerts"] == 3
        left = store.pending_alerts("sw.alerts")
        assert sorted(a["subject_id"] for a in left) == ["late--1", "late-0", "late-1"]
        # once sent, the next prune takes them: they are orphans of pruned windows
        store.mark_alerts_published([a["id"] for a in left])
        report = store.prune(before=before, keep_windows=1)
        assert report.deleted["alerts"] == 3 and report.kept_pending_alerts == 0
        assert {a["window_seq"] for a in store.alerts(limit=None)} == {2, 3}
