"""The query side at scale: ``alerts --by event`` reads the event-time index on
PostgreSQL too, with the same rows in the same order (alerts without an event time last), and an
``alerts --follow`` look reads only what was committed since the last one, however rarely its
filters match, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sparsewatch.storage.store as store_module
import sqlalchemy as sa
from sparsewatch.storage import alert_queries
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.schema import alerts
from sparsewatch.storage.store import Store

from tests.support.query_plans import statement_plans

T0 = datetime(2024, 6, 1, tzinfo=UTC)


def _alerts(first: int, n: int, kind: str = "novel_document") -> list[dict[str, Any]]:
    """``n`` alerts; every 7th without an event time, scores and event times with ties."""
    return [
        {
            "kind": kind,
            "stream": ("news", "wire")[i % 2],
            "subject_id": f"doc-{i}",
            "score": float(i % 5),
            "window_seq": i // 100,
            "event_time": None if i % 7 == 0 else T0 + timedelta(minutes=i // 3),
            "summary": f"story {i} {'zeta alpha' if i % 11 == 0 else 'beta'}",
        }
        for i in range(first, first + n)
    ]


def _fill(store: Store, *batches: list[dict[str, Any]], clock: Any = None) -> None:
    """Insert each batch in a transaction of its own, created an hour after the one before
    when given the store module's ``clock`` (as a live stream's alerts spread over time; on
    PostgreSQL, whose alerts take the server's clock, set afterwards)."""
    postgres = store.engine.dialect.name == "postgresql"
    for n, rows in enumerate(batches):
        if clock is not None:
            clock.setattr(store_module, "_now", lambda n=n: T0 + timedelta(hours=n))
        with store.transaction() as tx:
            tx.insert_alerts(rows)
            if clock is not None and postgres:
                created = alerts.c.created_at
                tx.connection.execute(
                    sa.update(alerts)
                    .where(created > T0 + timedelta(days=365))
                    .values(created_at=T0 + timedelta(hours=n))
                )
    if postgres:  # what autovacuum does on its own
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE alerts")


def _by_event(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` newest event first, those without one last, then by score and id descending."""
    return sorted(
        rows,
        key=lambda r: (
            r["event_time"] is None,
            -(r["event_time"] or T0).timestamp(),
            -r["score"],
            -r["id"],
        ),
    )


def _reads_whole_table(plan: str) -> bool:
    """A full read of the alerts table (not through an index)."""
    lines = [line.strip() for line in plan.splitlines()]
    return any(
        "Seq Scan on alerts" in line or line in ("SCAN alerts", "SCAN TABLE alerts")
        for line in lines
    )


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"limit": 40},
        {"limit": 297},  # the last timed alerts and the first untimed ones
        {"limit": 400},  # more than there are
        {"limit": None},
        {"limit": 0},
        {"kinds": ["anomaly"], "limit": 500},
        {"streams": ["wire"], "min_score": 3.0, "limit": 60},
        {"text": "ZETA", "limit": 500},
        {"since": T0 + timedelta(minutes=20), "limit": 500},
        {"until": T0 + timedelta(minutes=20), "limit": 500},
    ],
)
def test_alerts_by_event_time_keep_their_order_and_rows(database_url, filters) -> None:
    with Store.open(database_url) as store:
        _fill(store, _alerts(0, 200), _alerts(200, 100, kind="anomaly"))
        with store.reading() as conn:
            everything = alert_queries.fetch_alerts(conn, limit=None)
            got = alert_queries.fetch_alerts(conn, time_field="event", **filters)
    expected = _by_event(everything)
    if kinds := filters.get("kinds"):
        expected = [r for r in expected if r["kind"] in kinds]
    if streams := filters.get("streams"):
        expected = [r for r in expected if r["stream"] in streams]
    if (min_score := filters.get("min_score")) is not None:
        expected = [r for r in expected if r["score"] >= min_score]
    if text := filters.get("text"):
        expected = [r for r in expected if text.lower() in r["summary"].lower()]
    if (since := filters.get("since")) is not None:
        expected = [r for r in expected if r["event_time"] is not None and r["event_time"] >= since]
    if (until := filters.get("until")) is not None:
        expected = [r for r in expected if r["event_time"] is not None and r["event_time"] < until]
    limit = filters.get("limit", 100)
    assert got == expected[:limit]


def test_alerts_by_event_time_read_the_event_time_index(database_url) -> None:
    # ORDER BY event_time DESC NULLS LAST: PostgreSQL's index read backwards gives NULLS FIRST,
    # so it read and sorted every alert (0.07 s for the newest 50 of 300,000 alerts; 2 ms now)
    with Store.open(database_url) as store:
        _fill(store, *(_alerts(first, 2000) for first in range(0, 20_000, 2000)))
        with store.reading() as conn:
            plans = statement_plans(
                conn, lambda c: alert_queries.fetch_alerts(c, time_field="event", limit=50)
            )
    assert plans and not any(_reads_whole_table(p) for p in plans), plans


@pytest.mark.parametrize(
    "filters",
    [{"text": "no such words"}, {"kinds": ["emerging_topic"]}, {"text": "zeta"}],
)
def test_a_follow_look_reads_only_the_newly_committed_alerts(
    database_url, filters, monkeypatch
) -> None:
    # The look asked for the matching alerts above the newest *matching* one: with a filter that
    # matches nothing (yet), every look read the whole table (0.35-0.47 s every 2 s on 300,000
    # alerts), and with a rare match everything committed since it
    with Store.open(database_url) as store:
        batches = (_alerts(first, 2000) for first in range(0, 20_000, 2000))
        _fill(store, *batches, clock=monkeypatch)
        follower = AlertFollower(**filters)
        with store.reading() as conn:
            follower.start(conn, 10)
            plans = statement_plans(conn, follower.poll)
    assert plans and not any(_reads_whole_table(p) for p in plans), plans


def test_a_rarely_matching_follow_still_returns_each_new_match_once(database_url) -> None:
    with Store.open(database_url) as store:
        _fill(store, _alerts(0, 50))
        follower = AlertFollower(kinds=["emerging_topic"], text="zeta")
        with store.reading() as conn:
            assert follower.start(conn, 10) == []
        _fill(store, _alerts(50, 50), _alerts(100, 30, kind="emerging_topic"))
        with store.reading() as conn:
            first = follower.poll(conn)
            assert follower.poll(conn) == []
        _fill(store, _alerts(130, 30, kind="emerging_topic"))
        with store.reading() as conn:
            second = follower.poll(conn)
    subjects = [r["subject_id"] for r in first + second]
    assert subjects == [f"doc-{i}" for i in range(100, 160) if i % 11 == 0]


@pytest.mark.parametrize("probe", [1, 7, 120, 10_000])
@pytest.mark.parametrize("time_field", ["created", "event"])
@pytest.mark.parametrize("limit", [1, 5, 30, 200, None])
def test_grep_gives_the_newest_matches_whether_or_not_the_newest_alerts_hold_them(
    database_url, monkeypatch, probe, time_field, limit
) -> None:
    monkeypatch.setattr(alert_queries, "GREP_PROBE_ROWS", probe)
    with Store.open(database_url) as store:
        _fill(store, _alerts(0, 100), _alerts(100, 100, kind="anomaly"), clock=monkeypatch)
        with store.reading() as conn:
            everything = alert_queries.fetch_alerts(conn, limit=None)
            got = alert_queries.fetch_alerts(conn, text="Zeta", time_field=time_field, limit=limit)
    if time_field == "event":
        everything = _by_event(everything)
    expected = [r for r in everything if "zeta" in r["summary"]]
    assert got == expected[:limit]


def _grep_zeta_alpha(conn: sa.Connection) -> list[dict[str, Any]]:
    return alert_queries.fetch_alerts(conn, text="Zeta Alpha", limit=50)


def test_grep_for_a_common_word_reads_only_the_newest_alerts(database_url, monkeypatch) -> None:
    # --grep is no index condition: PostgreSQL, which cannot tell how often a text occurs, read
    # and sorted every alert for the newest 50 matches (0.35-0.45 s of 300,000 alerts; 28 ms now)
    monkeypatch.setattr(alert_queries, "GREP_PROBE_ROWS", 1000)
    with Store.open(database_url) as store:
        batches = (_alerts(first, 2000) for first in range(0, 20_000, 2000))
        _fill(store, *batches, clock=monkeypatch)
        with store.reading() as conn:
            plans = statement_plans(conn, _grep_zeta_alpha)
    assert plans and not any(_reads_whole_table(p) for p in plans), plans
