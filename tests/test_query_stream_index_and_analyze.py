"""The query speed on a large database: ``documents --stream S``
reads the index on documents (stream, event_time) (revision 0005) instead of sorting every
document of the stream, and on SQLite ``db prune`` and ``db upgrade`` gather the planner's
statistics (``ANALYZE``), without which SQLite chose poor plans (``documents --novel``,
``alerts --by event --kind``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from alembic import command
from sparsewatch.storage import migrate
from sparsewatch.storage.alert_queries import fetch_alerts
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.document_queries import fetch_documents
from sparsewatch.storage.engine import sqlite_file
from sparsewatch.storage.store import Store

from tests.support.cli import run_cli
from tests.support.query_plans import indexes, query_plan
from tests.support.storage import document_columns

T0 = datetime(2024, 5, 1, tzinfo=UTC)
STREAMS = ("news", "tweets", "wire")
INDEX = "ix_documents_stream_event_time"


def _documents(stream: str, seq: int, n: int, rng: np.random.Generator) -> DocumentColumns:
    start = T0 + timedelta(hours=seq)
    times = [start + timedelta(seconds=30 * (i // 2)) for i in range(n)]  # ties
    return document_columns(stream, seq, times, rng)


def _fill(store: Store, windows: int, docs: int) -> None:
    """``windows`` windows of ``docs`` documents in each of three streams, and one window of a
    small stream ("rare") in the middle; statistics on PostgreSQL, as its autovacuum gathers."""
    rng = np.random.default_rng(5)
    for seq in range(windows):
        with store.transaction() as tx:
            for stream in STREAMS:
                tx.insert_documents(_documents(stream, seq, docs, rng))
            if seq == windows // 2:
                tx.insert_documents(_documents("rare", seq, docs, rng))
    if store.engine.dialect.name == "postgresql":
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")


def _statistics(url: str) -> dict[str, str]:
    """SQLite's planner statistics of the documents table's indexes (``sqlite_stat1``)."""
    path = sqlite_file(url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
            return {}
        rows = conn.execute("SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'documents'")
        return {idx: stat for idx, stat in rows if idx is not None}


_SINCE, _UNTIL = T0 + timedelta(hours=10), T0 + timedelta(hours=12)
STREAM_QUERIES: dict[str, Callable[[sa.Connection], list[dict[str, Any]]]] = {
    "--stream rare": lambda c: fetch_documents(c, streams=["rare"], limit=50),
    "--stream rare --since --until": lambda c: fetch_documents(
        c, streams=["rare"], since=T0, until=T0 + timedelta(days=30), limit=50
    ),
    "--stream news": lambda c: fetch_documents(c, streams=["news"], limit=50),
    "--stream news --since --until": lambda c: fetch_documents(
        c, streams=["news"], since=_SINCE, until=_UNTIL, limit=50
    ),
    "--stream news, all": lambda c: fetch_documents(c, streams=["news"], limit=None),
}


def test_documents_of_one_stream_are_read_in_order_by_the_stream_event_time_index(
    database_url: str,
) -> None:
    # The (stream, window_seq) index found the stream's rows but not in event-time order: SQLite
    # sorted all of them for the first 50 (0.3-1.9 s of 1,000,000); PostgreSQL read every stream
    # in event-time order, skipping the others' (157 ms for a stream of 1,000 documents among
    # 1,000,000). The rows are the same with the index and without it.
    with Store.open(database_url) as store:
        _fill(store, windows=40, docs=100)
        with store.reading() as conn:
            plans = {name: query_plan(conn, query) for name, query in STREAM_QUERIES.items()}
            with_index = {name: query(conn) for name, query in STREAM_QUERIES.items()}
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP INDEX {INDEX}")
        store.engine.dispose()
        with store.reading() as conn:
            without = {name: query(conn) for name, query in STREAM_QUERIES.items()}
    used = {"--stream rare", "--stream rare --since --until"}
    if store.engine.dialect.name == "sqlite":  # no statistics: every stream by the index
        used |= {"--stream news", "--stream news --since --until"}
    for name in used:
        assert INDEX in plans[name], (name, plans[name])
    assert with_index == without
    assert len(with_index["--stream rare"]) == 50
    assert len(with_index["--stream news, all"]) == 4000
    assert len(with_index["--stream news --since --until"]) == 50


def test_revision_0005_upgrades_a_database_at_0004_with_data_and_downgrades(
    database_url: str,
) -> None:
    engine = sa.create_engine(database_url)
    try:
        migrate.upgrade(engine, "0004")
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO documents (stream, doc_id, event_time, window_seq, text) "
                    "VALUES ('news', 'old', '2024-05-01 10:00:00', 3, 'an old story')"
                )
            )
        assert INDEX not in indexes(engine, "documents")
        migrate.upgrade(engine, "0005")
        assert migrate.current_revision(engine) == "0005"
        assert indexes(engine, "documents")[INDEX] == ["stream", "event_time"]
        if engine.dialect.name == "sqlite":  # the upgrade gathered statistics for its plans
            assert _statistics(database_url)[INDEX] == "1 1 1"
        config = migrate.alembic_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0004")
        assert migrate.current_revision(engine) == "0004"
        assert INDEX not in indexes(engine, "documents")
        with engine.begin() as conn:  # created by hand, as benchmarks/storage.md suggested
            conn.exec_driver_sql(f"CREATE INDEX {INDEX} ON documents (stream, event_time)")
        migrate.upgrade(engine, "0005")
        assert migrate.current_revision(engine) == "0005"
    finally:
        engine.dispose()
    with Store.open(database_url) as store:
        [row] = store.documents(streams=["news"], limit=None)
    assert (row["doc_id"], row["text"]) == ("old", "an old story")


def _sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'stats.db'}"


def _novel_plan(url: str) -> str:
    with Store.open(url) as store, store.reading() as conn:
        return query_plan(conn, lambda c: fetch_documents(c, novel_only=True, limit=50))


def _unanalysed_database(tmp_path: Path) -> str:
    """A SQLite database with documents and no statistics of them (the upgrade analysed it
    empty)."""
    url = _sqlite_url(tmp_path)
    with Store.open(url) as store:
        _fill(store, windows=40, docs=100)
    assert _statistics(url) == {}
    # without statistics the novel documents are all read by the (novel, stream) index and
    # sorted; with them, the documents by event time until 50 novel ones are found
    assert "ix_documents_novel_stream" in _novel_plan(url)
    return url


def test_db_prune_gathers_sqlite_statistics(monkeypatch, capsys, tmp_path: Path) -> None:
    url = _unanalysed_database(tmp_path)
    args = ("db", "prune", "--before", "2000-01-01", "--database-url", url)
    code, _, err = run_cli(monkeypatch, capsys, *args, "--dry-run")
    assert code == 0, err
    assert _statistics(url) == {}  # a dry run changes nothing
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert out.startswith("deleted 0 windows")
    assert _statistics(url)["ix_documents_stream_event_time"].startswith("12100 ")
    assert "USING INDEX ix_documents_event_time" in _novel_plan(url)


def test_db_upgrade_gathers_sqlite_statistics(monkeypatch, capsys, tmp_path: Path) -> None:
    url = _unanalysed_database(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, "db", "upgrade", "--database-url", url)
    assert code == 0, err
    assert out.endswith(f"is at revision {migrate.head_revision()}\n")
    assert _statistics(url)["ix_documents_novel_stream"].startswith("12100 ")
    assert "USING INDEX ix_documents_event_time" in _novel_plan(url)


def test_sqlite_statistics_of_a_database_66x_smaller_give_no_worse_plans(tmp_path: Path) -> None:
    # Statistics are gathered only by db prune / db upgrade / the migration, so a database may
    # have grown much since: SQLite's planner compares rows per key (sqlite_stat1), which stay in
    # proportion as a database grows (3,000,000 documents with the statistics of 30,000 of 20
    # windows a stream: the same plans and times as fresh ones, benchmarks/query_scale.py data).
    # Those of a younger database (a few windows, a few alerts) may leave a plan as it is
    # without statistics, never one worse.
    url = _sqlite_url(tmp_path)
    named = {
        **STREAM_QUERIES,
        "--stream news --window 30": lambda c: fetch_documents(
            c, streams=["news"], window_seq=30, limit=50
        ),
        "--novel": lambda c: fetch_documents(c, novel_only=True, limit=50),
        "--window 30": lambda c: fetch_documents(c, window_seq=30, limit=50),
        "alerts --by event --kind anomaly": lambda c: fetch_alerts(
            c, time_field="event", kinds=["anomaly"], limit=50
        ),
    }
    plans: dict[str, dict[str, str]] = {}
    with Store.open(url) as store:
        _fill(store, windows=30, docs=5)
        _add_alerts(store)
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
        assert _statistics(url)[INDEX].startswith("455 ")
        _fill(store, windows=200, docs=50)
        _add_alerts(store)
        for when, sql in (
            ("stale", ""),
            ("fresh", "ANALYZE"),
            ("none", "DELETE FROM sqlite_stat1"),
        ):
            if sql:
                with store.engine.begin() as conn:
                    conn.exec_driver_sql(sql)
            store.engine.dispose()
            with store.reading() as conn:
                plans[when] = {name: query_plan(conn, query) for name, query in named.items()}
    for name in named:
        assert plans["stale"][name] in (plans["fresh"][name], plans["none"][name]), name
        if not name.startswith("alerts"):
            assert plans["stale"][name] == plans["fresh"][name], name
    assert (
        "ix_documents_stream_window_seq (stream=? AND window_seq=?)"
        in plans["stale"]["--stream news --window 30"]
    )
    assert "ix_documents_stream_event_time (stream=?)" in plans["none"]["--stream news --window 30"]


def _add_alerts(store: Store) -> None:
    """An anomaly and a novel_document alert for every 10th document not yet alerted."""
    with store.reading() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT stream, doc_id, window_seq, event_time FROM documents "
                "WHERE doc_id NOT IN (SELECT subject_id FROM alerts) AND abs(random()) % 10 = 0"
            )
        ).all()
    alerts = [
        {
            "kind": kind,
            "stream": stream,
            "subject_id": doc_id,
            "score": 1.0,
            "window_seq": seq,
            "event_time": datetime.fromisoformat(str(time)).replace(tzinfo=UTC),
            "summary": "s",
        }
        for stream, doc_id, seq, time in rows
        for kind in ("anomaly", "novel_document")
    ]
    with store.transaction() as tx:
        tx.insert_alerts(alerts)
