"""``alerts --follow`` on PostgreSQL misses no alert committed out of order: ``created_at`` is the
database server's clock, not the writing host's, and an alert whose transaction stays open past
the follower's ``grace_s`` between its insert and its commit is still returned (the follower
tracks transaction ids, :class:`~sparsewatch.storage.alert_follower.AlertFollower`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import sparsewatch.storage.store as store_module
import sqlalchemy as sa
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.store import Store, StoreTx


def _alert(subject: str) -> dict:
    return {
        "kind": "anomaly",
        "stream": "s",
        "subject_id": subject,
        "score": 1.0,
        "window_seq": 1,
        "event_time": None,
        "summary": subject,
    }


@contextmanager
def _open_transaction(store: Store) -> Iterator[StoreTx]:
    """A writer's transaction, committed when the block ends (a worker's, held open)."""
    with store.engine.connect() as conn, conn.begin():
        yield StoreTx(conn)


def _subjects(rows: list[dict]) -> list[str]:
    return [r["subject_id"] for r in rows]


def _started(store: Store, follower: AlertFollower, timeout: float = 30.0) -> None:
    """Start ``follower``, then poll until it tracks transaction ids: until every transaction of
    the server that was running at its start has ended (other databases' too), a poll reads as
    on SQLite, by ``created_at``."""
    with store.reading() as conn:
        assert follower.start(conn, 10) == []
    deadline = time.monotonic() + timeout
    while getattr(follower, "_floor", 0) is None:
        assert time.monotonic() < deadline, "a transaction of the server stayed open"
        time.sleep(0.05)
        with store.reading() as conn:
            assert follower.poll(conn) == []


def test_created_at_is_the_database_servers_clock(
    postgres_database: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = postgres_database
    monkeypatch.setattr(store_module, "_now", lambda: datetime.now(UTC) - timedelta(hours=1))
    with Store.open(url) as store:
        with store.transaction() as tx:
            tx.insert_alerts([_alert("a"), _alert("b")])
        with store.engine.connect() as conn:
            server_now = conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one()
        created = [r["created_at"] for r in store.alerts()]
    assert all(timedelta(0) <= server_now - t < timedelta(seconds=30) for t in created), created
    assert all(t.tzinfo is UTC for t in created)


def test_an_alert_of_a_host_whose_clock_is_behind_is_not_missed(
    postgres_database: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow writer's host clock is 90 s behind: its alert, the smaller id, committed after a
    later one was seen, looked 90 s older than it, past the 60 s grace."""
    url, _ = postgres_database
    with Store.open(url) as store:
        follower = AlertFollower(grace_s=60.0)
        _started(store, follower)
        behind = datetime.now
        monkeypatch.setattr(store_module, "_now", lambda: behind(UTC) - timedelta(seconds=90))
        with _open_transaction(store) as slow:
            slow.insert_alerts([_alert("A-slow")])
            monkeypatch.undo()
            with store.transaction() as fast:
                fast.insert_alerts([_alert("B-fast")])
            with store.reading() as conn:
                assert _subjects(follower.poll(conn)) == ["B-fast"]
        with store.reading() as conn:
            assert _subjects(follower.poll(conn)) == ["A-slow"]
            assert follower.poll(conn) == []


def test_an_alert_whose_transaction_stays_open_past_the_grace_is_not_missed(
    postgres_database: tuple[str, str],
) -> None:
    """A writer's transaction stays open longer than ``grace_s`` between its alerts and its
    commit (a slow window, a pause): by ``created_at`` alone, its alert, with a smaller id and
    an older ``created_at`` than one already seen, was never returned."""
    url, _ = postgres_database
    with Store.open(url) as store:
        follower = AlertFollower(grace_s=0.2)
        _started(store, follower)
        with _open_transaction(store) as slow:
            slow.insert_alerts([_alert("A-slow")])
            time.sleep(0.6)
            with store.transaction() as fast:
                fast.insert_alerts([_alert("B-fast")])
            for _ in range(3):  # polls while the slow transaction stays open
                with store.reading() as conn:
                    got = _subjects(follower.poll(conn))
                assert got in ([], ["B-fast"])
                time.sleep(0.3)
        with store.reading() as conn:
            assert _subjects(follower.poll(conn)) == ["A-slow"]
        with _open_transaction(store) as later:  # the floor moves on once it committed
            later.insert_alerts([_alert("C")])
        with store.reading() as conn:
            assert _subjects(follower.poll(conn)) == ["C"]
            assert follower.poll(conn) == []


def test_the_writers_sweep_ages_pending_alerts_by_the_database_servers_clock(
    postgres_database: tuple[str, str],
) -> None:
    """The writer sends the alerts pending for more than 30 s (left by a writer that stopped):
    their age by the clock ``created_at`` was taken from, the server's, not the sweeping host's."""
    url, _ = postgres_database
    with Store.open(url) as store:
        with store.transaction() as tx:
            tx.insert_alerts([_alert("old"), _alert("new")], publish_to="sw.alerts")
        with store.engine.begin() as conn:
            for subject, age_s in (("old", 40), ("new", 20)):
                conn.execute(
                    sa.text(
                        "UPDATE alerts SET created_at = clock_timestamp() - make_interval("
                        "secs => :age) WHERE subject_id = :subject"
                    ),
                    {"age": age_s, "subject": subject},
                )
        assert _subjects(store.pending_alerts("sw.alerts", older_than_s=30.0)) == ["old"]
        assert _subjects(store.pending_alerts("sw.alerts")) == ["old", "new"]
