"""The SQL store on real SQLite and PostgreSQL: migrations, round trips, idempotent windows."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sparsewatch.storage import migrate
from sparsewatch.storage.schema import metadata
from sparsewatch.storage.store import Store

from tests.support.storage import T0, dump, write_window
from tests.support.threads import outcomes_in_threads


def test_migrations_from_empty_match_the_schema(database_url):
    engine = sa.create_engine(database_url)
    assert migrate.current_revision(engine) is None
    store = Store.open(database_url)
    try:
        assert store.revision() == migrate.head_revision()
        with store.engine.connect() as conn:
            diff = compare_metadata(
                MigrationContext.configure(
                    conn, opts={"compare_type": True, "version_table": migrate.VERSION_TABLE}
                ),
                metadata,
            )
        assert diff == []
        store.upgrade()  # a second upgrade is a no-op
        assert store.revision() == migrate.head_revision()
    finally:
        store.dispose()
        engine.dispose()


def test_concurrent_opens_of_an_empty_database_migrate_once(database_url):
    assert outcomes_in_threads(lambda: Store.open(database_url).dispose(), 4) == [None] * 4
    with Store.open(database_url) as store:
        assert store.revision() == migrate.head_revision()


def test_opening_a_new_sqlite_file_waits_for_another_connections_write_lock(tmp_path):
    # Switching a new file to WAL while another connection holds the write lock failed at once
    # with "database is locked" (SQLite skips the busy handler there): the flake of the test
    # above. Store.open now waits until the lock is released.
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    released = threading.Timer(0.5, holder.execute, args=("COMMIT",))
    released.start()
    try:
        with Store.open(f"sqlite:///{path}") as store:
            assert store.revision() == migrate.head_revision()
            with store.reading() as conn:
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        released.join()
        holder.close()


def test_same_window_written_twice_leaves_identical_tables(database_url):
    with Store.open(database_url) as store:
        write_window(store, 0)
        write_window(store, 1)
        before = dump(store)
        write_window(store, 1)
        assert dump(store) == before
        # An older window replayed leaves every result table as it was (the checkpoint and the
        # offsets are the replayed window's, by design: they are replaced).
        write_window(store, 0)
        after = dump(store)
        for table in ("checkpoints", "partition_offsets"):
            del after[table], before[table]
        assert after == before
        assert len(before["documents"]) == 100
        assert len(before["alerts"]) == 2 * 8


def test_rollback_leaves_nothing(database_url):
    with Store.open(database_url) as store:
        write_window(store, 0)
        before = dump(store)
        with pytest.raises(RuntimeError, match="crash"), store.transaction() as tx:
            tx.insert_documents(
                [
                    {
                        "stream": "x",
                        "doc_id": "1",
                        "event_time": T0,
                        "window_seq": 9,
                        "novelty_score": 1.0,
                    }
                ]
            )
            tx.set_partition_offsets("detector", "docs", {0: 999})
            raise RuntimeError("crash")
        assert dump(store) == before
        assert store.partition_offsets("detector", "docs") == {0: 100, 1: 7}


def test_documents_round_trip_and_timezones(database_url):
    plus5 = timezone(timedelta(hours=5))
    with Store.open(database_url) as store:
        write_window(store, 0)
        with store.transaction() as tx:
            tx.insert_documents(
                [
                    {
                        "stream": "tz",
                        "doc_id": "a",
                        "event_time": datetime(2024, 3, 1, 17, 30, 0, 123456, tzinfo=plus5),
                        "window_seq": 0,
                        "novelty_score": 0.5,
                    }
                ]
            )
        doc = store.documents(streams=["tz"])[0]
        assert doc["event_time"] == datetime(2024, 3, 1, 12, 30, 0, 123456, tzinfo=UTC)
        assert doc["event_time"].tzinfo == UTC
        assert doc["novel"] is False and doc["top_atoms"] == [] and doc["labels"] == []
        docs = store.documents(streams=["news"], limit=None)
        assert [d["doc_id"] for d in docs] == [f"news-0-{i}" for i in range(50)]
        assert docs[3]["late"] is True and docs[7]["novel"] is True
        assert docs[0]["dominant_topic"] is None and docs[1]["dominant_topic"] == 1
        assert docs[1]["labels"] == ["earn"] and docs[0]["text"].endswith("ünïcode")
        rng = np.random.default_rng(0)
        assert docs[0]["novelty_score"] == float(np.float32(rng.random()))
        with (
            pytest.raises(sa.exc.StatementError, match="naive datetime"),
            store.transaction() as tx,
        ):
            tx.upsert_window("tz", 0, datetime(2024, 1, 1), T0, 0, None, {}, "idle")


@pytest.mark.parametrize("anomaly_first", [True, False])
def test_anomaly_scores_and_detector_results_merge_in_any_order(database_url, anomaly_first):
    doc = {
        "stream": "s",
        "doc_id": "d",
        "event_time": T0,
        "window_seq": 4,
        "novelty_score": 0.25,
        "novel": True,
        "top_atoms": [3, 1],
        "labels": ["x"],
        "text": "t",
    }
    anomaly = {
        "stream": "s",
        "doc_id": "d",
        "anomaly_score": np.float64(-0.5),
        "anomaly": np.bool_(True),
    }
    with Store.open(database_url) as store:
        for step in ([anomaly], [doc]) if anomaly_first else ([doc], [anomaly]):
            with store.transaction() as tx:
                if "anomaly" in step[0]:
                    tx.upsert_anomaly_scores(step)
                else:
                    tx.insert_documents(step)
        once = dump(store)
        with store.transaction() as tx:  # replays of both change nothing
            tx.insert_documents([{**doc, "novelty_score": 0.99, "novel": False}])
            tx.upsert_anomaly_scores([anomaly])
        assert dump(store) == once
        (row,) = store.documents()
        assert row["novelty_score"] == 0.25 and row["novel"] is True and row["top_atoms"] == [3, 1]
        assert row["anomaly_score"] == -0.5 and row["anomaly"] is True
        with store.transaction() as tx:  # a rescoring replaces the anomaly columns only
            tx.upsert_anomaly_scores([{**anomaly, "anomaly_score": 0.1, "anomaly": False}])
        (row,) = store.documents()
        assert (row["anomaly_score"], row["anomaly"], row["novelty_score"]) == (0.1, False, 0.25)


def test_checkpoints_and_offsets_are_replaced(database_url):
    with Store.open(database_url) as store:
        assert store.load_checkpoint("g", "s") is None
        assert store.partition_offsets("g", "t") == {}
        state = {
            "A": np.arange(12, dtype=np.float32).reshape(3, 4),
            "n": np.array(3),
            "v": np.array(["a", "bé"]),
        }
        with store.transaction() as tx:
            tx.put_checkpoint("g", "s", state, {"window_seq": 1})
            tx.put_checkpoint("g", "other", {"x": np.zeros(2)}, {})
            tx.set_partition_offsets("g", "t", {0: 5, 2: 9})
        first = store.load_checkpoint("g", "s")
        assert (
            first is not None and first.meta == {"window_seq": 1} and first.created_at.tzinfo == UTC
        )
        for name, array in state.items():
            assert first.state[name].dtype == array.dtype
            np.testing.assert_array_equal(first.state[name], array)
        with store.transaction() as tx:
            tx.put_checkpoint("g", "s", {"A": np.ones(2)}, {"window_seq": 2})
            tx.set_partition_offsets("g", "t", {0: 6})
        assert store.load_checkpoint("g", "s").meta == {"window_seq": 2}
        assert set(store.load_checkpoints("g")) == {"s", "other"}
        assert store.load_checkpoints("nobody") == {}
        assert store.partition_offsets("g", "t") == {0: 6, 2: 9}


def test_snapshot_first_write_wins_and_loads_bit_identical(database_url):
    rng = np.random.default_rng(1)
    arrays = {"A": rng.random((30, 5)).astype(np.float32), "terms": np.array(["α", "beta"])}
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.put_snapshot("s", 3, "dictionary", arrays, {"lambda": 0.1}, 2)
            tx.put_snapshot("s", 5, "dictionary", {"A": arrays["A"] * 2}, {}, 3)
            tx.put_snapshot("s", 3, "dictionary", {"A": np.zeros(1)}, {}, 9)
        snap = store.load_snapshot("s", "dictionary", 3)
        assert snap.meta == {"lambda": 0.1} and snap.vocabulary_version == 2
        assert snap.arrays["A"].tobytes() == arrays["A"].tobytes()
        np.testing.assert_array_equal(snap.arrays["terms"], arrays["terms"])
        assert store.load_snapshot("s", "dictionary").window_seq == 5
        assert store.load_snapshot("s", "topics") is None
        listed = store.snapshots()
        assert [s["window_seq"] for s in listed] == [5, 3]
        assert listed[1]["shapes"]["A"] == {"shape": [30, 5], "dtype": "<f4"}


def test_bulk_window_of_a_thousand_documents(database_url):
    with Store.open(database_url) as store:
        written = write_window(store, 0, n=1000)
        stored = store.documents(limit=None)
        assert store.windows()[0]["n_documents"] == 1000
    assert len(stored) == 1000  # every row of the bulk insert, with its own values
    for got, want in zip(stored, written, strict=True):  # both in event-time order
        assert got["doc_id"] == want["doc_id"] and got["event_time"] == want["event_time"]
        assert got["novelty_score"] == float(want["novelty_score"])
        assert got["reconstruction_error"] == want["reconstruction_error"]
        assert (got["novel"], got["late"]) == (want["novel"], want["late"])
        assert got["dominant_topic"] == want["dominant_topic"]
        assert got["top_atoms"] == want["top_atoms"].tolist()
        assert (got["labels"], got["text"]) == (want["labels"], want["text"])


def test_corrupt_checkpoint_is_detected(database_url):
    from sparsewatch.storage.schema import checkpoints

    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.put_checkpoint("g", "s", {"A": np.arange(100.0)}, {})
        with store.transaction() as tx:
            blob = tx.connection.execute(sa.select(checkpoints.c.state)).scalar_one()
            damaged = blob[:-20] + bytes(20)
            tx.connection.execute(sa.update(checkpoints).values(state=damaged))
        with pytest.raises(ValueError, match="corrupt"):
            store.load_checkpoint("g", "s")


def test_duplicate_keys_in_one_batch(database_url):
    doc = {"stream": "s", "doc_id": "d", "event_time": T0, "window_seq": 0, "novelty_score": 0.1}
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.insert_documents([doc, {**doc, "novelty_score": 0.9}])
            tx.upsert_anomaly_scores(
                [
                    {"stream": "s", "doc_id": "d", "anomaly_score": 1.0, "anomaly": True},
                    {"stream": "s", "doc_id": "d", "anomaly_score": 2.0, "anomaly": False},
                ]
            )
        (row,) = store.documents()
        assert (row["novelty_score"], row["anomaly_score"], row["anomaly"]) == (0.1, 2.0, False)


def test_detector_and_anomaly_writers_concurrently_on_the_same_rows(database_url):
    n, rounds = 300, 4
    docs = [
        {
            "stream": "s",
            "doc_id": f"d{i:04d}",
            "event_time": T0,
            "window_seq": r,
            "novelty_score": i,
        }
        for r in range(rounds)
        for i in range(r * n // 2, r * n // 2 + n)  # consecutive batches overlap by half
    ]
    errors: list[BaseException] = []
    with Store.open(database_url) as store:

        def detector() -> None:
            try:
                for r in range(rounds):
                    with store.transaction() as tx:
                        tx.insert_documents(docs[r * n : (r + 1) * n])
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        def anomaly() -> None:
            try:
                for r in reversed(range(rounds)):
                    batch = docs[r * n : (r + 1) * n][::-1]  # the opposite order
                    rows = [
                        {
                            "stream": "s",
                            "doc_id": d["doc_id"],
                            "anomaly_score": 1.0,
                            "anomaly": True,
                        }
                        for d in batch
                    ]
                    with store.transaction() as tx:
                        tx.upsert_anomaly_scores(rows)
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=detector), threading.Thread(target=anomaly)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        rows = store.documents(limit=None)
    assert len(rows) == len({d["doc_id"] for d in docs})
    assert all(r["event_time"] == T0 and r["anomaly"] is True for r in rows)
    assert [r["novelty_score"] for r in sorted(rows, key=lambda r: r["doc_id"])] == [
        float(i) for i in range(len(rows))
    ]


AWKWARD_TEXTS = [
    "tab\there",
    "line\nbreak\r\nand carriage\rreturn",
    "back\\slash \\N \\t \\\\",
    r"\N",
    "",
    "quotes ' \" and a comma, a semicolon;",
    "ünïcode, emoji 📈, CJK 漢字, RTL עברית",
    "x" * 20_000,
]


def _awkward_documents(prefix: str) -> list[dict]:
    return [
        {
            "stream": "awkward\tstream",
            "doc_id": f"{prefix}\n{i}\\",
            "event_time": T0 + timedelta(microseconds=i),
            "window_seq": i,
            "novelty_score": [0.0, -0.0, 1e-300, 1e300, float("nan"), 1 / 3, 2.5, -7.0][i],
            "reconstruction_error": None,
            "novel": bool(i % 2),
            "late": False,
            "dominant_topic": i if i % 3 else None,
            "top_atoms": list(range(i)),
            "labels": [text[:20] for text in AWKWARD_TEXTS[: i + 1]],
            "text": text if i != 4 else None,
        }
        for i, text in enumerate(AWKWARD_TEXTS)
    ]


def _anomaly_rows(docs: list[dict], scale: int) -> list[dict]:
    return [
        {
            "stream": d["stream"],
            "doc_id": d["doc_id"],
            "anomaly_score": i / scale,
            "anomaly": i == 2,
        }
        for i, d in enumerate(docs)
    ]


def test_awkward_values_round_trip_exactly_and_aborted_batches_leave_nothing(database_url):
    """Every value a document row can hold comes back as written (on PostgreSQL the rows travel
    by COPY into a staging table: its text escaping, NULLs and the staging table's emptiness
    after commits and rollbacks are what this checks)."""
    committed, aborted, later = (_awkward_documents(p) for p in ("a", "b", "c"))
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.insert_documents(committed)
        with pytest.raises(RuntimeError, match="abort"), store.transaction() as tx:
            tx.insert_documents(aborted)
            raise RuntimeError("abort")
        with store.transaction() as tx:
            tx.insert_documents(later)
            tx.upsert_anomaly_scores(_anomaly_rows(committed, 7))
        with store.transaction() as tx:  # staging rows of the last commit must be gone
            tx.upsert_anomaly_scores(_anomaly_rows(committed[:3], 5))
        stored = {d["doc_id"]: d for d in store.documents(streams=["awkward\tstream"], limit=None)}
    assert sorted(stored) == sorted(d["doc_id"] for d in committed + later)
    for i, want in enumerate(committed + later):
        got = stored[want["doc_id"]]
        assert got["stream"] == want["stream"] and got["event_time"] == want["event_time"]
        assert got["text"] == want["text"] and got["labels"] == want["labels"]
        assert got["top_atoms"] == want["top_atoms"]
        assert got["dominant_topic"] == want["dominant_topic"]
        score = want["novelty_score"]
        if np.isnan(score):
            assert got["novelty_score"] is None
        else:
            assert got["novelty_score"] == score  # (SQLite keeps no sign of -0.0)
        assert got["reconstruction_error"] is None and got["novel"] is want["novel"]
        if i < len(committed):
            assert (got["anomaly_score"], got["anomaly"]) == (i / (5 if i < 3 else 7), i == 2)
        else:
            assert got["anomaly_score"] is None


def test_a_row_the_copy_refuses_raises_sqlalchemys_error_and_loses_the_transaction(
    postgres_database,
):
    """On PostgreSQL the documents travel by COPY on the driver's own cursor: its errors must
    reach the caller as SQLAlchemy's, like every other statement's (the writer retries
    ``OperationalError``), and leave the transaction rolled back."""
    url, _ = postgres_database
    good = _awkward_documents("good")
    bad = [{**good[0], "doc_id": "nul", "text": "a NUL \x00 byte"}]
    with Store.open(url) as store:
        with pytest.raises(sa.exc.DataError, match="NUL"), store.transaction() as tx:
            tx.insert_documents(good)
            tx.insert_documents(bad)
        assert store.documents(limit=None) == []
        with store.transaction() as tx:
            tx.insert_documents(good)
        assert len(store.documents(limit=None)) == len(good)


def test_pending_alerts_are_read_through_their_partial_index(database_url):
    """The writer's outbox query and the status count read only the pending alerts
    (``ix_alerts_pending``, whose predicate each planner must match to the query's condition),
    not every alert ever raised."""
    from sparsewatch.storage.alert_queries import count_pending_alerts, fetch_pending_alerts

    alert = {"kind": "anomaly", "score": 1.0, "window_seq": 1, "event_time": None, "summary": ""}
    sent = [{**alert, "stream": f"s{i % 5}", "subject_id": str(i)} for i in range(20_000)]
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.insert_alerts(sent)
            new = {**alert, "stream": "s1", "subject_id": "new"}
            tx.insert_alerts([new], publish_to="p.alerts")
        with store.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
            queries: list[tuple[str, Any]] = []

            def record(conn, cursor, statement, parameters, context, executemany):
                queries.append((statement, parameters))

            sa.event.listen(conn, "before_cursor_execute", record)
            rows = fetch_pending_alerts(conn, "p.alerts", ["s1"], ["anomaly"], 0, 500)
            assert [r["subject_id"] for r in rows] == ["new"]
            assert count_pending_alerts(conn) == 1
            sa.event.remove(conn, "before_cursor_execute", record)
            explain = "EXPLAIN QUERY PLAN " if conn.dialect.name == "sqlite" else "EXPLAIN "
            for query, parameters in queries:
                plan = " ".join(str(r) for r in conn.exec_driver_sql(explain + query, parameters))
                assert "ix_alerts_pending" in plan, (query, plan)
