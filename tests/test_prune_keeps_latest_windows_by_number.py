"""Retention: ``db prune --keep-windows N`` keeps the count windows a restarted detector
recomputes, the last N it closed (highest-numbered), even when a backfill of older documents made
them end before windows closed earlier; duration windows are kept by event time as before. On
real SQLite and PostgreSQL databases (``sw_review_*``, dropped afterwards)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sparsewatch.storage.schema import alerts
from sparsewatch.storage.store import Store

from tests.support.store_windows import T0, url, window

__all__ = ["url"]  # the fixture

HOUR = timedelta(hours=1)
BEFORE = datetime(2025, 1, 1, tzinfo=UTC)
# Count windows in the order the detector closed them: 0-3 hold documents of June 2024, then a
# backfill of 2020 documents forms windows 4-6. With a checkpoint at window 3 and
# windows.checkpoint_every = 3, windows 4-6 are what a restarted detector recomputes.
COUNT_STARTS = {
    0: datetime(2024, 6, 1, tzinfo=UTC),
    1: datetime(2024, 6, 2, tzinfo=UTC),
    2: datetime(2024, 6, 3, tzinfo=UTC),
    3: datetime(2024, 6, 4, tzinfo=UTC),
    4: datetime(2020, 1, 1, tzinfo=UTC),
    5: datetime(2020, 1, 2, tzinfo=UTC),
    6: datetime(2020, 1, 3, tzinfo=UTC),
}


def _window_seqs(store: Store) -> set[int]:
    return {int(w["window_seq"]) for w in store.windows(limit=None)}


def _alert_ids(store: Store, seq: int) -> list[int]:
    with store.reading() as conn:
        query = sa.select(alerts.c.id).where(alerts.c.window_seq == seq).order_by(alerts.c.id)
        return [int(i) for i in conn.execute(query).scalars()]


def _count_windows(store: Store) -> None:
    for seq, start in COUNT_STARTS.items():
        window(store, "s", seq, start, HOUR)


def test_the_last_closed_count_windows_survive_a_backfill_and_their_redo_keeps_its_rows(
    url: str,
) -> None:
    with Store.open(url) as store:
        _count_windows(store)
        with store.transaction() as tx:  # the anomaly worker scored window 6's documents
            tx.upsert_anomaly_scores(
                [{"stream": "s", "doc_id": "s-6-0", "anomaly_score": 3.0, "anomaly": True}]
            )
        ids_before = _alert_ids(store, 6)
        dry = store.prune(before=BEFORE, keep_windows=3, dry_run=True)
        report = store.prune(before=BEFORE, keep_windows=3)
        assert report.deleted == dry.deleted
        # window 0 goes; 1-3 are the newest by event time, 4-6 the last closed (the old rule
        # kept 1-3 only and deleted 0, 4, 5 and 6)
        assert report.deleted["windows"] == 1
        assert _window_seqs(store) == {1, 2, 3, 4, 5, 6}
        # the restarted detector writes window 6 again: first write wins, nothing is redone
        window(store, "s", 6, COUNT_STARTS[6], HOUR)
        assert _alert_ids(store, 6) == ids_before  # was: recreated under a new id
        doc = next(d for d in store.documents(limit=None) if d["doc_id"] == "s-6-0")
        assert doc["anomaly_score"] == 3.0  # was: None


def test_rows_of_the_next_count_window_not_yet_written_are_kept(url: str) -> None:
    # The detector sent window 7's scores messages and crashed before its transaction committed;
    # the anomaly worker wrote its rows (no window row yet). A restart recomputes window 7, so
    # its rows are not orphans to delete: the oldest window kept (now 4, of 2020) bounds them.
    at = datetime(2020, 1, 4, 0, 0, 1, tzinfo=UTC)
    with Store.open(url) as store:
        _count_windows(store)
        with store.transaction() as tx:
            tx.upsert_anomaly_scores(
                [
                    {
                        "stream": "s",
                        "doc_id": "s-7-0",
                        "anomaly_score": 4.0,
                        "anomaly": True,
                        "event_time": at,
                        "window_seq": 7,
                    }
                ]
            )
            tx.insert_alerts(
                [
                    {
                        "kind": "anomaly",
                        "stream": "s",
                        "subject_id": "s-7-0",
                        "score": 4.0,
                        "window_seq": 7,
                        "event_time": at,
                        "summary": "x",
                    }
                ]
            )
        dry = store.prune(before=BEFORE, keep_windows=3, dry_run=True)
        report = store.prune(before=BEFORE, keep_windows=3)
        assert report.deleted == dry.deleted
        assert "s-7-0" in {d["doc_id"] for d in store.documents(limit=None)}
        assert _alert_ids(store, 7)  # the old rule deleted both as orphans


def test_duration_windows_are_kept_by_event_time_as_before(url: str) -> None:
    # Hourly duration windows (seq = t // 1 h): both orders agree, the newest 3 stay; after a
    # change to daily windows (far smaller numbers) the stale hourly windows, highest-numbered,
    # are not kept for it.
    day = timedelta(days=1)
    hourly = [int((T0 + k * HOUR).timestamp() // 3600) for k in range(6)]
    daily = [int((T0 + (k + 1) * day).timestamp() // 86400) for k in range(4)]
    with Store.open(url) as store:
        for k, seq in enumerate(hourly):
            window(store, "s", seq, T0 + k * HOUR, HOUR)
        future = datetime(2100, 1, 1, tzinfo=UTC)
        dry = store.prune(before=future, keep_windows=3, dry_run=True)
        report = store.prune(before=future, keep_windows=3)
        assert report.deleted == dry.deleted
        assert report.deleted["windows"] == 3
        assert _window_seqs(store) == set(hourly[3:])
        for k, seq in enumerate(daily):
            window(store, "s", seq, T0 + (k + 1) * day, day)
        dry = store.prune(before=future, keep_windows=3, dry_run=True)
        report = store.prune(before=future, keep_windows=3)
        assert report.deleted == dry.deleted
        assert _window_seqs(store) == set(daily[1:])
