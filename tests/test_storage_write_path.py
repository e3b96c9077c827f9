"""The storage write path, on real SQLite and PostgreSQL.

* One transaction may write a document twice: a job of the write-behind writer holds every window
  a batch closed (a catch-up closes many), and the same id can fall in two of them (an id sent
  again after ``windows.dedup_documents`` later documents; an anomaly worker's scores of both
  windows). On PostgreSQL the rows travel through a session's staging table, which kept the
  previous call's rows until the commit: the second call's ``INSERT ... SELECT`` then held the id
  twice and PostgreSQL refused it ("ON CONFLICT DO UPDATE command cannot affect row a second
  time"), a permanent error that stopped the worker on every restart; and every later call of a
  transaction wrote all the earlier calls' rows again. Both databases now keep the detector's
  first write and the anomaly worker's last score, as across transactions.
* :meth:`Store.reading` is one consistent view on PostgreSQL too (its default isolation, READ
  COMMITTED, gave each statement its own snapshot: ``sparsewatch status`` counted a window's
  documents but not the window when the window committed between its statements).
* ``postgres://`` URLs (libpq's other spelling, the one Heroku, Fly.io and others hand out) open
  PostgreSQL with the shipped driver, as ``postgresql://`` does; they were refused as an
  unsupported database.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.schema import documents, windows
from sparsewatch.storage.store import Store

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def _doc(doc_id: str, seq: int, score: float) -> dict[str, Any]:
    return {
        "stream": "s",
        "doc_id": doc_id,
        "event_time": T0 + timedelta(hours=seq),
        "window_seq": seq,
        "novelty_score": score,
        "text": f"{doc_id} in window {seq}",
    }


def _score(doc_id: str, score: float) -> dict[str, Any]:
    return {"stream": "s", "doc_id": doc_id, "anomaly_score": score, "anomaly": score > 1}


def _stored(store: Store) -> list[tuple[Any, ...]]:
    d = documents.c
    query = sa.select(d.doc_id, d.window_seq, d.novelty_score, d.text, d.anomaly_score)
    with store.reading() as conn:
        return [tuple(r) for r in conn.execute(query.order_by(d.doc_id))]


def _window(tx: Any, seq: int) -> None:
    start = T0 + timedelta(hours=seq)
    tx.upsert_window("s", seq, start, start + timedelta(hours=1), 1, None, {}, "watermark")


def test_a_document_written_twice_in_one_transaction(database_url: str) -> None:
    """Two windows of one job holding the same id, and an anomaly worker's scores of it in
    both: the detector's first write and the last score are kept, on both databases."""
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.insert_documents([_doc("a", 1, 0.1), _doc("b", 1, 0.2)])
            tx.insert_documents(DocumentColumns.from_rows([_doc("b", 2, 0.3), _doc("c", 2, 0.4)]))
            tx.upsert_anomaly_scores([_score("a", 0.5), _score("x", 0.6)])
            tx.upsert_anomaly_scores([_score("a", 2.5), _score("y", 0.7)])
        assert _stored(store) == [
            ("a", 1, 0.1, "a in window 1", 2.5),
            ("b", 1, 0.2, "b in window 1", None),
            ("c", 2, 0.4, "c in window 2", None),
            ("x", None, None, None, 0.6),
            ("y", None, None, None, 0.7),
        ]
        with store.transaction() as tx:  # a later call writes its own rows only
            tx.upsert_anomaly_scores([_score("b", 3.0)])
            d = documents.c
            tx.connection.execute(sa.update(documents).where(d.doc_id == "b").values(anomaly=None))
            tx.upsert_anomaly_scores([_score("c", 4.0)])  # did not set "b" again
        with store.reading() as conn:
            flags = conn.execute(sa.select(d.doc_id, d.anomaly).order_by(d.doc_id)).all()
        assert [tuple(f) for f in flags] == [
            ("a", True),
            ("b", None),
            ("c", True),
            ("x", False),
            ("y", False),
        ]


def test_a_read_is_one_snapshot(database_url: str) -> None:
    """A window committed while a reading transaction is open is not seen by its later
    statements (the first one's view holds throughout)."""
    count = sa.select(sa.func.count()).select_from(windows)
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            _window(tx, 1)
        with store.reading() as conn:
            assert conn.execute(count).scalar_one() == 1
            with store.transaction() as tx:
                _window(tx, 2)
            assert conn.execute(count).scalar_one() == 1
        with store.reading() as conn:
            assert conn.execute(count).scalar_one() == 2


def test_postgres_scheme_opens_postgresql(postgres_database: tuple[str, str]) -> None:
    """``postgres://`` is the database ``postgresql+psycopg://`` names (libpq takes both)."""
    url, _ = postgres_database
    with Store.open(url) as store, store.transaction() as tx:
        _window(tx, 7)
    libpq = sa.engine.make_url(url).set(drivername="postgres").render_as_string(False)
    assert libpq.startswith("postgres://")
    with Store.open(libpq, create=False) as store:
        assert store.engine.dialect.name == "postgresql"
        assert [w["window_seq"] for w in store.windows()] == [7]
