"""SQLite's planner statistics on a database that only the workers write.

SQLite keeps no statistics unless ``ANALYZE`` runs, and without them it read
``documents --stream S --window W`` through the (stream, event_time) index, the stream's documents
up to the window (33-216 ms on 3,000,000 documents instead of 1 ms), and ``documents --novel`` and
``alerts --by event --kind`` by poor plans too. Only ``db prune`` and ``db upgrade`` gathered them;
now the workers' writers do, between windows, as the documents grow
(:class:`~sparsewatch.storage.retention.StatisticsRefresh`), and a failure there is logged while
the worker goes on. The thresholds are lowered here (:class:`StatisticsPolicy`) so that a few
thousand documents do.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.writer import Destination, ResultWriter, WriteJob, make_writer
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.document_queries import fetch_documents
from sparsewatch.storage.engine import create_engine
from sparsewatch.storage.retention import StatisticsPolicy, StatisticsRefresh, prune
from sparsewatch.storage.store import Store

from tests.support.storage import document_columns

T0 = datetime(2024, 6, 1, tzinfo=UTC)
STREAMS = ("s0", "s1", "s2")
DOCS = 50  # a window's documents in each stream: a job of 150
WINDOW_INDEX = "ix_documents_stream_window_seq"
EVENT_TIME_INDEX = "ix_documents_stream_event_time"


def _documents(stream: str, seq: int, n: int = DOCS) -> DocumentColumns:
    rng = np.random.default_rng(seq)
    start = T0 + timedelta(hours=seq)
    times = [start + timedelta(seconds=60 * i) for i in range(n)]
    return document_columns(stream, seq, times, rng)


def _job(seq: int) -> WriteJob:
    """A detector's job: window ``seq`` of every stream, its documents and the offsets."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    for stream in STREAMS:
        start = T0 + timedelta(hours=seq)
        window = (stream, seq, start, start + timedelta(hours=1), DOCS, 0.5, {}, "watermark")
        calls += [("upsert_window", window), ("insert_documents", (_documents(stream, seq),))]
    return WriteJob(calls=calls, offsets={0: (seq + 1) * DOCS * len(STREAMS)})


def _destination(bootstrap: str) -> Destination:
    return Destination(bootstrap, "g", "docs", None, "docs.dlq")


def _write_windows(writer_mode: str, url: str, bootstrap: str, windows: int, **policy: Any) -> None:
    """Windows 0..``windows``-1 through a worker's writer, one job each, then close it (which
    waits for its last refresh)."""
    with Store.open(url) as store:
        writer = make_writer(
            writer_mode, store, _destination(bootstrap), "test", StatisticsPolicy(**policy)
        )
        try:
            for seq in range(windows):
                writer.submit(_job(seq)).result()
        finally:
            writer.close()


def _fill(store: Store, first: int, last: int) -> None:
    """Windows ``first``..``last``-1 of every stream, one transaction each, as a worker writes."""
    for seq in range(first, last):
        with store.transaction() as tx:
            for stream in STREAMS:
                tx.insert_documents(_documents(stream, seq))


def _analysed_size(url: str) -> int | None:
    """The documents table's size in SQLite's statistics (``None``: it has none)."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        rows = conn.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = 'documents'").fetchall()
    return max((int(stat.split()[0]) for (stat,) in rows), default=None)


def _window_query_plan(url: str) -> str:
    """The plan of ``documents --stream s1 --window 5`` in a new connection (statistics are read
    when a connection loads the schema)."""
    statements: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append((statement, parameters))

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            sa.event.listen(conn, "before_cursor_execute", capture)
            rows = fetch_documents(conn, streams=["s1"], window_seq=5, limit=20)
            sa.event.remove(conn, "before_cursor_execute", capture)
            assert [r["doc_id"] for r in rows] == [f"s1-5-{i}" for i in range(20)]
            ((statement, parameters),) = statements
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
            return "\n".join(str(r[-1]) for r in plan)
    finally:
        engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'results.db'}"


@pytest.mark.kafka
@pytest.mark.parametrize("writer_mode", ["process", "thread"])
def test_the_writer_gathers_statistics_as_the_documents_grow(
    kafka_bootstrap: str, sqlite_url: str, writer_mode: str
) -> None:
    # 20 jobs of 150 documents: statistics gathered once 1,050 are there (job 7), again at
    # twice that (2,100, job 14), not at every window (3,000 in the end)
    _write_windows(
        writer_mode, sqlite_url, kafka_bootstrap, 20, min_rows=1000, growth=2.0, max_rows=10**6
    )
    assert _analysed_size(sqlite_url) == 2100
    with_statistics = _window_query_plan(sqlite_url)
    assert WINDOW_INDEX in with_statistics, with_statistics
    # the same database without them: the stream's documents in event-time order up to the window
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("DELETE FROM sqlite_stat1")
    without = _window_query_plan(sqlite_url)
    assert EVENT_TIME_INDEX in without and WINDOW_INDEX not in without, without


@pytest.mark.kafka
def test_a_failing_analyze_is_logged_and_the_worker_goes_on(
    kafka_bootstrap: str, sqlite_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # an index whose collation the writer's connections lack: ANALYZE fails on it ("no such
    # collation sequence"), the workers' writes (which never touch that table) do not
    with Store.open(sqlite_url):
        pass
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.create_collation("test_fold", lambda a, b: (a > b) - (a < b))
        conn.execute("CREATE INDEX ix_test_fold ON dead_letters (reason COLLATE test_fold)")
    _write_windows("process", sqlite_url, kafka_bootstrap, 12, min_rows=1000, max_rows=10**6)
    with Store.open(sqlite_url) as store:
        assert len(store.documents(limit=None)) == 12 * 150  # every job after the failure too
        assert store.partition_offsets("g", "docs") == {0: 12 * 150}
    stderr = capfd.readouterr().err
    # tried once, at 1,050 documents (again only at 4 times that)
    assert stderr.count("gathering the query planner's statistics (ANALYZE) failed") == 1, stderr
    assert "no such collation sequence: test_fold" in stderr


@pytest.mark.kafka
def test_a_refresh_that_fails_never_raises(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a read-only connection: ANALYZE cannot write the statistics
    path = tmp_path / "ro.db"
    with Store.open(f"sqlite:///{path}") as store:
        _fill(store, 0, 10)
    with Store.open(f"sqlite:///file:{path}?mode=ro&uri=true", upgrade=False) as store:
        policy = StatisticsPolicy(min_rows=100)
        producer = make_producer(kafka_bootstrap)
        dest = _destination(kafka_bootstrap)
        writer = ResultWriter(store, producer, dest, threading.Event(), policy)
        with caplog.at_level(logging.WARNING):
            writer.refresh_statistics()  # logged, not raised
    assert "readonly database" in caplog.text
    assert _analysed_size(f"sqlite:///{path}") is None


def test_statistics_are_refreshed_by_growth_up_to_max_rows(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        refresh = StatisticsRefresh(
            store.engine, StatisticsPolicy(min_rows=600, growth=2.0, max_rows=2000)
        )
        _fill(store, 0, 3)  # 450 documents
        assert not refresh.run() and _analysed_size(sqlite_url) is None
        _fill(store, 3, 4)  # 600
        assert refresh.run() and _analysed_size(sqlite_url) == 600
        assert not refresh.run()
        _fill(store, 4, 7)  # 1,050: not twice 600
        assert not refresh.run() and _analysed_size(sqlite_url) == 600
        _fill(store, 7, 8)  # 1,200
        assert refresh.run() and _analysed_size(sqlite_url) == 1200
        _fill(store, 8, 20)  # 3,000: twice 1,200, but more than max_rows
        assert not refresh.run() and _analysed_size(sqlite_url) == 1200


def test_a_database_without_statistics_gets_them_once_whatever_its_size(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        _fill(store, 0, 20)  # 3,000 documents, more than max_rows
        refresh = StatisticsRefresh(
            store.engine, StatisticsPolicy(min_rows=600, growth=2.0, max_rows=2000)
        )
        assert refresh.run() and _analysed_size(sqlite_url) == 3000
        assert not refresh.run()


def test_a_pruned_database_is_not_analysed_at_every_window(sqlite_url: str) -> None:
    # the size is read as the largest rowid: after a prune the statistics count fewer documents
    # than that; a writer started then gathers them once, not at every window
    with Store.open(sqlite_url) as store:
        _fill(store, 0, 20)  # 3,000 documents
        with store.transaction() as tx:
            for seq in range(20):
                for stream in STREAMS:
                    start = T0 + timedelta(hours=seq)
                    end = start + timedelta(hours=1)
                    tx.upsert_window(stream, seq, start, end, DOCS, 0.5, {}, "watermark")
        prune(store.engine, before=T0 + timedelta(hours=16), keep_windows=1)  # gathers them
        assert _analysed_size(sqlite_url) == 5 * 150
        refresh = StatisticsRefresh(
            store.engine, StatisticsPolicy(min_rows=100, growth=2.0, max_rows=10**6)
        )
        assert refresh.run()  # 3,000 by the rowid: more than twice 750
        _fill(store, 20, 21)
        assert not refresh.run() and _analysed_size(sqlite_url) == 5 * 150


def test_nothing_is_gathered_on_postgresql(database_url: str) -> None:
    with Store.open(database_url) as store:
        _fill(store, 0, 4)
        refresh = StatisticsRefresh(store.engine, StatisticsPolicy(min_rows=100))
        assert refresh.run() is (store.engine.dialect.name == "sqlite")
