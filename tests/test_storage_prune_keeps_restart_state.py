"""Retention: ``db prune`` keeps what a restarted worker needs and leaves no orphan rows,
on real SQLite and PostgreSQL databases (``sw_review_*``, dropped afterwards)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sparsewatch.storage.store import Store

from tests.support.store_windows import T0, url, window

__all__ = ["url"]  # the fixture

FUTURE = datetime(2100, 1, 1, tzinfo=UTC)


def _seqs(store: Store, table: str, stream: str) -> set[int]:
    with store.reading() as conn:
        t = sa.table(table, sa.column("stream"), sa.column("window_seq"))
        return set(conn.execute(sa.select(t.c.window_seq).where(t.c.stream == stream)).scalars())


def test_newest_windows_are_the_newest_in_time_after_a_window_size_change(url: str) -> None:
    # 1-hour windows (seq = t // 1h), then windows.size = 1 day: seq = t // 1d, far smaller
    # numbers ("window numbers go down when windows.size changes"). The newest windows in time
    # (the daily ones, which a restarted detector recomputes) must be the ones kept.
    hour, day = timedelta(hours=1), timedelta(days=1)
    with Store.open(url) as store:
        hourly = [int((T0 + k * hour).timestamp() // 3600) for k in range(5)]
        for k, seq in enumerate(hourly):
            window(store, "s", seq, T0 + k * hour, hour)
        daily = [int((T0 + (k + 1) * day).timestamp() // 86400) for k in range(3)]
        for k, seq in enumerate(daily):
            window(store, "s", seq, T0 + (k + 1) * day, day)
        dry = store.prune(before=FUTURE, keep_windows=3, dry_run=True)
        report = store.prune(before=FUTURE, keep_windows=3)
        assert report.deleted == dry.deleted
        assert _seqs(store, "windows", "s") == set(daily)  # was: the 3 newest hourly ones
        assert _seqs(store, "documents", "s") == set(daily)
        # the newest snapshot of the model kind is a daily window's: no hourly one is kept
        assert _seqs(store, "snapshots", "s") == set(daily)


def test_rows_of_windows_that_have_no_row_go_too(url: str) -> None:
    # A late document is stored in its own window by event time (duration windows; -1 with
    # count windows), also one the stream never closed (no document of it came in time) or one
    # an earlier prune deleted; so is its novel alert, and an anomaly alert the anomaly worker
    # wrote after the prune. Those rows had no window row to go with: no prune ever deleted them.
    hour = timedelta(hours=1)
    with Store.open(url) as store:
        for seq in (0, 1, 2, 4, 5, 6, 7):  # window 3 never closed
            window(store, "s", seq, T0 + seq * hour, hour)
        store.prune(before=FUTURE, keep_windows=5)  # windows 0 and 1 go
        late = [
            ("in-gap", 3, T0 + 3 * hour + timedelta(minutes=5)),
            ("in-pruned", 1, T0 + hour + timedelta(minutes=5)),
            ("count-window", -1, T0 + timedelta(minutes=1)),
            ("recent-gap", 8, T0 + 8 * hour + timedelta(minutes=1)),  # newer than kept ones
        ]
        window(store, "s", 9, T0 + 9 * hour, hour, late=late)
        with store.transaction() as tx:  # the anomaly worker, behind, on pruned window 0
            tx.insert_alerts(
                [
                    {
                        "kind": "anomaly",
                        "stream": "s",
                        "subject_id": "s-0-1",
                        "score": 2.0,
                        "window_seq": 0,
                        "event_time": T0 + timedelta(seconds=1),
                        "summary": "x",
                    }
                ]
            )
            tx.upsert_anomaly_scores([{"stream": "s", "doc_id": "s-0-1", "anomaly_score": 2.0,
                                       "anomaly": True}])  # fmt: skip
        dry = store.prune(before=FUTURE, keep_windows=5, dry_run=True)
        report = store.prune(before=FUTURE, keep_windows=5)
        assert report.deleted == dry.deleted
        assert report.deleted["windows"] == 1  # 2 (4 is now one of the newest 5)
        assert report.deleted["documents"] == 3 + 3
        assert report.deleted["alerts"] == 1 + 3 + 1
        docs = {d["doc_id"] for d in store.documents(limit=None)}
        # kept: the newest 5 windows' documents, the late one newer than all but them, and the
        # row only the anomaly worker wrote (the detector's columns may still come: its window
        # is unknown)
        assert "recent-gap" in docs and "s-0-1" in docs
        assert not docs & {"in-gap", "in-pruned", "count-window"}
        alerts = {(a["kind"], a["subject_id"]) for a in store.alerts(limit=None)}
        assert ("novel_document", "recent-gap") in alerts
        assert not alerts & {("novel_document", i) for i in ("in-gap", "in-pruned")}
        assert ("anomaly", "s-0-1") not in alerts
        assert _seqs(store, "alerts", "s") == {4, 5, 6, 7, 8, 9}
