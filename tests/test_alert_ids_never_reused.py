"""An alert's id is never given twice (revision 0009), on real SQLite and PostgreSQL: ``alerts
--follow`` prints the ids above the largest it saw, and the outbox marks alerts sent by id. On
SQLite a plain ``INTEGER PRIMARY KEY`` gave the largest id + 1 again once ``db prune`` had deleted
the alert with the largest id (an orphan a lagging anomaly worker wrote for a pruned window)."""

from __future__ import annotations

import re
from datetime import timedelta

import sqlalchemy as sa
from alembic import command
from sparsewatch.storage import migrate
from sparsewatch.storage.alert_follower import AlertFollower
from sparsewatch.storage.schema import alerts
from sparsewatch.storage.store import Store

from tests.support.store_windows import T0, url, window

__all__ = ["url"]  # the fixture, parametrised over both databases

HOUR = timedelta(hours=1)
TOPIC = "p.alerts"


def _anomaly(subject: str, seq: int) -> dict:
    return {
        "kind": "anomaly",
        "stream": "s",
        "subject_id": subject,
        "score": 2.0,
        "window_seq": seq,
        "event_time": T0 + seq * HOUR,
        "summary": subject,
    }


def _six_windows_three_pruned(store: Store) -> None:
    for k in range(6):
        window(store, "s", k, T0 + k * HOUR, HOUR)
    store.prune(before=T0 + 10 * HOUR, keep_windows=3)


def _orphan_alert_of_the_largest_id(store: Store, publish_to: str | None = None) -> int:
    """An anomaly worker behind scores pruned window 1: its alert has the largest id and is an
    orphan, deleted by the next prune once not pending publication. Its id."""
    with store.transaction() as tx:
        tx.insert_alerts([_anomaly("s-1-0", 1)], publish_to=publish_to)
    (orphan,) = [a["id"] for a in store.alerts(limit=None) if a["subject_id"] == "s-1-0"]
    assert orphan == max(a["id"] for a in store.alerts(limit=None))
    return orphan


def test_a_follower_prints_an_alert_stored_after_the_largest_id_was_pruned(url: str) -> None:
    with Store.open(url) as store:
        _six_windows_three_pruned(store)
        follower = AlertFollower()
        with store.reading() as conn:
            follower.start(conn, backlog=0)
        orphan = _orphan_alert_of_the_largest_id(store)
        with store.reading() as conn:
            assert [a["id"] for a in follower.poll(conn)] == [orphan]
        store.prune(before=T0 + 10 * HOUR, keep_windows=3)  # the orphan goes
        assert orphan not in {a["id"] for a in store.alerts(limit=None)}
        with store.transaction() as tx:
            tx.insert_alerts([_anomaly("s-5-1", 5)])
        with store.reading() as conn:
            printed = [(a["id"], a["subject_id"]) for a in follower.poll(conn)]
        assert len(printed) == 1 and printed[0][1] == "s-5-1" and printed[0][0] > orphan


def test_marking_a_pruned_alert_sent_leaves_a_new_one_pending(url: str) -> None:
    """Two writers' sweeps read the same pending alert; one sends it and marks it sent, prune
    deletes it, another worker stores a new pending alert, the other writer marks the one it
    sent too: the new one stays pending."""
    with Store.open(url) as store:
        _six_windows_three_pruned(store)
        orphan = _orphan_alert_of_the_largest_id(store, publish_to=TOPIC)
        pending = store.pending_alerts(TOPIC, None, ("anomaly",), 0, 100, None)
        assert [row["id"] for row in pending] == [orphan]
        store.prune(before=T0 + 10 * HOUR, keep_windows=3)  # pending: kept
        assert orphan in {a["id"] for a in store.alerts(limit=None)}
        store.mark_alerts_published([orphan])
        store.prune(before=T0 + 10 * HOUR, keep_windows=3)  # sent: gone
        assert orphan not in {a["id"] for a in store.alerts(limit=None)}
        with store.transaction() as tx:
            tx.insert_alerts([_anomaly("s-5-2", 5)], publish_to=TOPIC)
        store.mark_alerts_published([orphan])
        left = store.pending_alerts(TOPIC, None, ("anomaly",), 0, 100, None)
        assert [row["subject_id"] for row in left] == ["s-5-2"]


def test_the_migrated_alerts_table_is_the_schemas(url: str) -> None:
    """From revision 0008 (alerts stored, some pending) to the head: the rows and their ids
    stay, the kind check has the schema's name (0001 stored it as ``ck_alerts_ck_alerts_kind``:
    a later revision dropping it by the schema's name failed on PostgreSQL), and on SQLite the
    table is AUTOINCREMENT, with its partial index."""
    engine = sa.create_engine(url)
    try:
        migrate.upgrade(engine, "0008")
        with engine.begin() as conn:
            for subject, topic in (("a", TOPIC), ("b", None)):
                conn.execute(
                    alerts.insert().values(
                        **_anomaly(subject, 1), created_at=T0, publish_topic=topic
                    )
                )
            before = conn.execute(sa.select(alerts.c.id, alerts.c.subject_id)).all()
            conn.execute(alerts.delete().where(alerts.c.subject_id == "b"))  # the largest id
        migrate.upgrade(engine, "head")
        with engine.connect() as conn:
            checks = {c["name"] for c in sa.inspect(conn).get_check_constraints("alerts")}
            ddl = str(sa.schema.CreateTable(alerts).compile(dialect=conn.dialect))
            assert checks == set(re.findall(r"CONSTRAINT (\w+) CHECK", ddl)) == {"ck_alerts_kind"}
            assert conn.execute(sa.select(alerts.c.id, alerts.c.subject_id)).all() == before[:1]
            if conn.dialect.name == "sqlite":
                (sql,) = conn.exec_driver_sql(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'alerts'"
                ).one()
                assert "AUTOINCREMENT" in sql
                (index,) = conn.exec_driver_sql(
                    "SELECT sql FROM sqlite_master WHERE name = 'ix_alerts_pending'"
                ).one()
                assert index.endswith("WHERE publish_topic IS NOT NULL")
        with Store(engine).transaction() as tx:
            tx.insert_alerts([_anomaly("c", 2)])
        with engine.connect() as conn:
            ids = dict(conn.execute(sa.select(alerts.c.subject_id, alerts.c.id)).all())
        # SQLite's sequence starts from the copied rows' largest id (a deleted larger one,
        # gone before the migration, cannot be known); PostgreSQL's never went back
        assert ids["c"] > ids["a"]
        config = migrate.alembic_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0008")
        with engine.connect() as conn:
            checks = {c["name"] for c in sa.inspect(conn).get_check_constraints("alerts")}
            assert checks == {"ck_alerts_ck_alerts_kind"}  # as 0001 to 0008 stored it
            assert len(conn.execute(sa.select(alerts.c.id)).all()) == 2
    finally:
        engine.dispose()
