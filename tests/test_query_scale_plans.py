"""The query commands on a large database: each typical query reads through an index, not the
whole table (``benchmarks/query_scale.py`` times them on a million documents), on SQLite and
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import sqlalchemy as sa
from alembic import command
from sparsewatch.storage import migrate
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.document_queries import fetch_documents
from sparsewatch.storage.store import Store

from tests.support.query_plans import indexes, query_plan
from tests.support.storage import document_columns

T0 = datetime(2024, 5, 1, tzinfo=UTC)
STREAMS = ("news", "tweets", "wire")


def _documents(stream: str, seq: int, n: int, rng: np.random.Generator) -> DocumentColumns:
    start = T0 + timedelta(hours=seq)
    times = [start + timedelta(seconds=10 * i) for i in range(n)]
    return document_columns(stream, seq, times, rng)


def _fill(store: Store, windows: int, docs: int) -> None:
    rng = np.random.default_rng(5)
    for seq in range(windows):
        with store.transaction() as tx:
            for stream in STREAMS:
                tx.insert_documents(_documents(stream, seq, docs, rng))
    if store.engine.dialect.name == "postgresql":  # what autovacuum does on its own
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")


def test_documents_of_one_window_of_every_stream_are_read_by_its_index(database_url) -> None:
    # Without --stream, the (stream, window_seq) index did not apply: both databases read the
    # documents in event-time order up to the window (0.3 s on a million documents, the whole
    # table for the last window); revision 0003's index on window_seq reads only the window.
    with Store.open(database_url) as store:
        _fill(store, windows=40, docs=100)
        with store.reading() as conn:
            plan = query_plan(conn, lambda c: fetch_documents(c, window_seq=30, limit=50))
            rows = fetch_documents(conn, window_seq=30, limit=None)
    assert "ix_documents_window_seq" in plan, plan
    assert len(rows) == 300 and {r["window_seq"] for r in rows} == {30}
    assert [r["event_time"] for r in rows] == sorted(r["event_time"] for r in rows)


def test_revision_0003_upgrades_from_0002_and_downgrades(database_url) -> None:
    engine = sa.create_engine(database_url)
    try:
        migrate.upgrade(engine, "0002")
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO documents (stream, doc_id, window_seq, text) "
                    "VALUES ('news', 'old', 3, 'an old story')"
                )
            )
        assert "ix_documents_window_seq" not in indexes(engine, "documents")
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == migrate.head_revision()
        assert indexes(engine, "documents")["ix_documents_window_seq"] == ["window_seq"]
        config = migrate.alembic_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0002")
        assert migrate.current_revision(engine) == "0002"
        assert "ix_documents_window_seq" not in indexes(engine, "documents")
    finally:
        engine.dispose()
    with Store.open(database_url) as store:  # opening migrates to the newest revision again
        assert store.revision() == migrate.head_revision()
        [row] = store.documents(window_seq=3, limit=None)
    assert (row["doc_id"], row["text"]) == ("old", "an old story")
