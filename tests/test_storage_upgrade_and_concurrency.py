"""Storage under upgrades with data and under concurrent writers, on real SQLite and PostgreSQL.

* A database set up at revision 0001 or 0002 by the packaged migrations, holding rows of every
  table (extreme values included: the parser's largest event time, ids and streams of non-BMP
  characters at the parser's length limits, infinite and NaN scores, empty arrays), is upgraded
  when the current code opens it, and every query then answers exactly as on a database the
  current code wrote from the start, also after the workers write to it again.
* ``db prune`` locks the documents it deletes in the order the workers' upserts lock theirs: a
  bare DELETE locked them in physical order and deadlocked with an anomaly worker behind that
  scored documents of a window being pruned (PostgreSQL aborted one of the two).
* Tens of thousands of snapshots left by earlier prunes are deleted by window lists per model
  kind, in seconds on PostgreSQL (a list of (window, model kind) pairs took half a minute).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from sparsewatch.consumers.messages import (
    MAX_EPOCH_MS,
    MAX_ID_CHARS,
    MAX_STREAM_CHARS,
    parse_document,
)
from sparsewatch.storage import migrate, schema
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.engine import create_engine
from sparsewatch.storage.serialization import arrays_to_npz
from sparsewatch.storage.store import Store, StoreTx

from tests.support.postgres_databases import create_postgres_database, drop_postgres_database

LONGEST = parse_document(
    json.dumps(
        {
            "id": "\U0001f600" * MAX_ID_CHARS,
            "stream": "\U00010348" * MAX_STREAM_CHARS,
            "text": "Zürich \U0001f600 tab\there\r\nback\\slash",
            "timestamp": MAX_EPOCH_MS - 1,
        }
    ).encode()
)
FIRST = parse_document(b'{"id": "first", "text": "x", "timestamp": "1970-01-01T00:00:00Z"}')
T0 = datetime(2199, 12, 1, tzinfo=UTC)
GROUP = "g" * 191 + ".detector"  # the longest group id the configuration allows, as stored


def _documents() -> list[dict[str, Any]]:
    """Detector rows: the parser's extremes, a NaN and infinite scores, a late document."""
    return [
        {
            "stream": LONGEST.stream,
            "doc_id": LONGEST.id,
            "event_time": LONGEST.event_time,
            "window_seq": 2**62,
            "novelty_score": math.inf,
            "reconstruction_error": -math.inf,
            "novel": True,
            "dominant_topic": 2**31 - 1,
            "top_atoms": [2**31 - 1, 0],
            "labels": ["l\U0001f600"],
            "text": LONGEST.text,
        },
        {
            "stream": FIRST.stream,
            "doc_id": FIRST.id,
            "event_time": FIRST.event_time,
            "window_seq": -1,
            "novelty_score": math.nan,
            "reconstruction_error": math.nan,
            "late": True,
            "text": FIRST.text,
        },
        {
            "stream": "s",
            "doc_id": "old",
            "event_time": T0 - timedelta(days=30),
            "window_seq": 1,
            "novelty_score": 0.25,
            "dominant_topic": 3,
            "text": "an old story",
        },
    ]


def _write_results(tx: StoreTx) -> None:
    """Every table but documents (the detector's, written by the caller), with extremes."""
    tx.upsert_window(
        LONGEST.stream,
        2**62,
        LONGEST.event_time,
        LONGEST.event_time + timedelta(days=1),
        1,
        math.inf,
        {"score": 0.5, "nan": math.nan, "inf": math.inf},
        "watermark",
    )
    for seq, days in ((1, 30), (2, 2)):
        start = T0 - timedelta(days=days)
        tx.upsert_window("s", seq, start, start + timedelta(hours=1), 1, math.nan, {}, "idle")
    tx.upsert_anomaly_scores(
        [
            {
                "stream": LONGEST.stream,
                "doc_id": LONGEST.id,
                "anomaly_score": -math.inf,
                "anomaly": True,
            },
            {"stream": "s", "doc_id": "ahead", "anomaly_score": math.nan, "anomaly": False},
            {
                "stream": "s",
                "doc_id": "scored",
                "anomaly_score": 2.5,
                "anomaly": True,
                "event_time": T0 - timedelta(days=40),
                "window_seq": 0,
            },
        ]
    )
    _insert_alerts_as_stored(
        tx,
        [
            {
                "kind": "novel_document",
                "stream": LONGEST.stream,
                "subject_id": LONGEST.id,
                "score": math.inf,
                "window_seq": 2**62,
                "event_time": LONGEST.event_time,
                "summary": "novel \U0001f600",
            },
            {
                "kind": "emerging_topic",
                "stream": "s",
                "subject_id": "topic-3",
                "score": -math.inf,
                "window_seq": 1,
                "event_time": None,
                "summary": "ZÜRICH",
            },
        ],
    )
    tx.upsert_topics(
        [
            {
                "stream": "s",
                "window_seq": 1,
                "topic_id": 3,
                "terms": [("zürich", math.nan), ("\U0001f600", math.inf)],
                "strength": math.inf,
                "emerging": True,
            }
        ]
    )
    empty = {
        "A": np.zeros((0, 4)),
        "terms": np.array([], dtype="<U1"),
        "codes": np.zeros((3, 0), dtype=np.float32),
        "lam": np.array(math.nan),
    }
    tx.put_snapshot("s", 1, "dictionary", empty, {"note": "\U0001f600", "x": math.inf}, 2**31 - 1)
    tx.put_checkpoint(GROUP, LONGEST.stream, {}, {"lambda": math.nan})
    tx.put_checkpoint(GROUP, "s", {"W": np.arange(6, dtype=np.float32).reshape(2, 3)}, {})
    tx.set_partition_offsets(GROUP, "t" * 249, {0: 42, 2**31 - 1: 2**63 - 1})
    _insert_dead_letters_as_stored(
        tx,
        [
            {
                "topic": "t" * 249,
                "partition": 2**31 - 1,
                "offset": 2**63 - 1,
                "reason": "not UTF-8 (byte 0 of the message) \U0001f600",
                "payload": b"\xff\x00",
            }
        ],
    )


def _insert_alerts_as_stored(tx: StoreTx, rows: list[dict[str, Any]]) -> None:
    """The alerts through the current code's write, or into an alerts table of a revision
    before 0008 (no publish_topic; before 0007 no terms, n_documents, related_ids either) as
    that version wrote them."""
    conn = tx.connection
    present = {c["name"] for c in sa.inspect(conn).get_columns("alerts")}
    if "publish_topic" in present:
        tx.insert_alerts(rows)
        return
    columns = (sa.Column(c.name, c.type) for c in schema.alerts.c if c.name in present)
    table = sa.Table("alerts", sa.MetaData(), *columns)
    now = datetime.now(UTC)  # one time for the call's alerts, as insert_alerts writes them
    stored = [{k: v for k, v in {**r, "created_at": now}.items() if k in present} for r in rows]
    conn.execute(sa.insert(table), stored)


def _insert_dead_letters_as_stored(tx: StoreTx, rows: list[dict[str, Any]]) -> None:
    """The dead letters through the current code's write, or into a dead_letters table of a
    revision before 0006 (no reason_pattern) as that version wrote them."""
    conn = tx.connection
    present = {c["name"] for c in sa.inspect(conn).get_columns("dead_letters")}
    if "reason_pattern" in present:
        tx.insert_dead_letters(rows)
        return
    table = sa.Table(
        "dead_letters",
        sa.MetaData(),
        *(sa.Column(c.name, c.type) for c in schema.dead_letters.c if c.name in present),
    )
    conn.execute(sa.insert(table), [{**r, "created_at": datetime.now(UTC)} for r in rows])


def _write_documents(tx: StoreTx) -> None:
    """The detector's rows through the current code's write."""
    tx.insert_documents(_documents())


def _insert_documents_as_stored(tx: StoreTx) -> None:
    """The detector's rows into a documents table of an older revision: the current code's
    values and column types, the columns that revision has."""
    conn = tx.connection
    present = {c["name"] for c in sa.inspect(conn).get_columns("documents")}
    table = sa.Table(
        "documents",
        sa.MetaData(),
        *(sa.Column(c.name, c.type) for c in schema.documents.c if c.name in present),
    )
    rows = DocumentColumns.from_rows(_documents()).rows()
    conn.execute(sa.insert(table), [{k: v for k, v in r.items() if k in present} for r in rows])


def _plain(value: Any) -> Any:
    """``value`` without the writers' clock (``created_at``, ``first_at``, ``last_at``), arrays
    as (shape, dtype, values), dataclasses as dicts: comparable between two databases."""
    if isinstance(value, dict):
        clock = ("created_at", "first_at", "last_at")
        return {k: _plain(v) for k, v in value.items() if k not in clock}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return (value.shape, value.dtype.str, value.tolist())
    if hasattr(value, "__dataclass_fields__"):
        return _plain({name: getattr(value, name) for name in value.__dataclass_fields__})
    return value


def _everything(store: Store) -> str:
    """What the queries answer, as text (``repr``: NaN equals NaN)."""
    status = store.status()
    for entry in status["streams"]:
        entry["checkpoints"] = sorted(entry["checkpoints"])  # group -> the writer's clock
    found = {
        "documents": store.documents(limit=None),
        "novel": store.documents(novel_only=True, limit=None),
        "anomalies": store.documents(anomalies_only=True, limit=None),
        "min_score": store.documents(min_score=0.2, limit=None),
        "window": store.documents(window_seq=2**62, limit=None),
        "topic": store.documents(topic=3, limit=None),
        "grep": store.documents(text="zÜRICH", limit=None),
        "since": store.documents(since=LONGEST.event_time, limit=None),
        "alerts": store.alerts(limit=None),
        "alerts_by_event": store.alerts(limit=None, time_field="event", min_score=0.0),
        "alerts_grep": store.alerts(text="zürich", limit=None),
        "topics": store.topics(limit=None),
        "windows": store.windows(limit=None),
        "snapshots": store.snapshots(limit=None),
        "snapshot": store.load_snapshot("s", "dictionary"),
        "checkpoints": store.load_checkpoints(GROUP),
        "offsets": store.partition_offsets(GROUP, "t" * 249),
        "dead_letters": store.dead_letters(limit=None),
        "reasons": store.dead_letter_reasons(),
        "status": status,
        "groups": store.groups(),
    }
    return repr(_plain(found))


def _another_database(url: str, request: pytest.FixtureRequest) -> str:
    """A second fresh database on the same server as ``url`` (a SQLite file beside it), dropped
    when the test ends."""
    if url.startswith("sqlite"):
        return url.replace("sparsewatch.db", "current.db")
    admin_url = request.getfixturevalue("postgres_admin_url")
    another = create_postgres_database(admin_url)
    request.addfinalizer(lambda: drop_postgres_database(admin_url, another))
    return another


def _write_again(store: Store) -> None:
    """The workers after the upgrade: a replayed window (changes nothing), a new document of an
    announced emerging topic, the anomaly score of a document the detector wrote before."""
    new = {
        "stream": "s",
        "doc_id": "new",
        "event_time": T0 - timedelta(days=2),
        "window_seq": 2,
        "novelty_score": 0.75,
        "novel": True,
        "dominant_topic": 4,
        "emerging_topic": 3,
        "text": "a new story",
    }
    with store.transaction() as tx:
        tx.insert_documents([*_documents(), new])
        tx.upsert_anomaly_scores(
            [{"stream": "s", "doc_id": "old", "anomaly_score": 0.5, "anomaly": False}]
        )
        _write_results(tx)


@pytest.mark.parametrize("revision", ["0001", "0002", "0007"])
def test_an_upgraded_database_answers_as_one_the_current_code_wrote(
    database_url: str, request: pytest.FixtureRequest, revision: str
) -> None:
    current_url = _another_database(database_url, request)
    with Store.open(current_url) as store, store.transaction() as tx:
        _write_documents(tx)
        _write_results(tx)
    engine = create_engine(database_url)
    try:
        migrate.upgrade(engine, revision)
        with Store(engine).transaction() as tx:
            _insert_documents_as_stored(tx)
            _write_results(tx)
        assert migrate.current_revision(engine) == revision
    finally:
        engine.dispose()
    with Store.open(database_url) as upgraded, Store.open(current_url) as current:
        assert upgraded.revision() == migrate.head_revision()
        expected = _everything(current)
        assert "\U0001f600" * MAX_ID_CHARS in expected and "inf" in expected
        assert _everything(upgraded) == expected
        for store in (upgraded, current):
            _write_again(store)
        assert _everything(upgraded) == _everything(current)
        cut = {
            "before": T0,
            "keep_windows": 1,
            "dead_letters_before": datetime(2300, 1, 1, tzinfo=UTC),
        }
        assert upgraded.prune(**cut) == current.prune(**cut)
        assert _everything(upgraded) == _everything(current)


# Lock-order cases: the windows (sequence number, hours before T0 it starts; the newest is kept),
# the documents (id, window) in the order they are stored, the document another transaction holds
# while the pruning starts, and the anomaly worker's calls (the ids of one window each).
LOCK_CASES = {
    "window": ([(1, 30), (2, 1)], [("d2", 1), ("d3", 1), ("d1", 1)], "d3", [["d1", "d2"]]),
    "two windows": (
        [(1, 30), (2, 20), (3, 1)],
        [("x", 2), ("xx", 2), ("y", 1)],
        "xx",
        [["y"], ["x"]],
    ),
    "window without row": ([(5, 1)], [("d2", 1), ("d3", 1), ("d1", 1)], "d3", [["d1", "d2"]]),
}


def _wait_for_lock_waits(engine: sa.Engine, count: int) -> None:
    """Until ``count`` sessions of the database wait for a lock (at most 30 s)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(query).scalar_one() >= count:
                return
        time.sleep(0.02)
    raise AssertionError(f"{count} sessions never waited for a lock")


def _in_thread(action: Callable[[], None], outcomes: dict[str, str], name: str) -> threading.Thread:
    def run() -> None:
        try:
            action()
            outcomes[name] = "done"
        except Exception as exc:  # the outcome is asserted
            outcomes[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("case", LOCK_CASES.values(), ids=LOCK_CASES.keys())
def test_prune_and_a_lagging_anomaly_worker_do_not_deadlock(
    postgres_database: tuple[str, str], case: tuple
) -> None:
    """``db prune`` deletes documents while an anomaly worker behind scores some of them in one
    transaction. A third session holds one document until both wait, so that the pruning has
    locked what it finds before it and the worker what comes first in its order. The pruning
    deleted in the table's order and the worker upserted in key order: PostgreSQL found a
    deadlock and aborted one of them. Two windows: the worker's transaction upserts window by
    window, so the pruning locks window 1's "y" before window 2's "x" (by id alone it also
    deadlocked)."""
    windows, stored, held, calls = case
    url, _ = postgres_database
    window_of = dict(stored)
    with Store.open(url) as store:
        with store.transaction() as tx:
            for seq, hours in windows:
                start = T0 - timedelta(hours=hours)
                tx.upsert_window("s", seq, start, start + timedelta(minutes=30), 1, 0.5, {}, "idle")
        for doc_id, seq in stored:  # one transaction each: stored in this order
            with store.transaction() as tx:
                start = T0 - timedelta(hours=dict(windows).get(seq, 40))
                row = {"stream": "s", "doc_id": doc_id, "event_time": start, "window_seq": seq}
                tx.insert_documents([row | {"novelty_score": 0.5, "text": doc_id}])

        def score() -> None:
            with store.transaction() as tx:
                for ids in calls:
                    score = {"anomaly_score": 1.0, "anomaly": True}
                    tx.upsert_anomaly_scores(
                        [
                            {"stream": "s", "doc_id": i, "window_seq": window_of[i]} | score
                            for i in ids
                        ]
                    )

        outcomes: dict[str, str] = {}
        with store.engine.connect() as holder, holder.begin():
            holder.execute(
                sa.text("SELECT 1 FROM documents WHERE doc_id = :id FOR UPDATE"), {"id": held}
            )
            pruning = _in_thread(lambda: store.prune(before=T0, keep_windows=1), outcomes, "prune")
            _wait_for_lock_waits(store.engine, 1)
            scoring = _in_thread(score, outcomes, "anomaly worker")
            _wait_for_lock_waits(store.engine, 2)
        for thread in (pruning, scoring):
            thread.join(timeout=60)
        assert outcomes == {"prune": "done", "anomaly worker": "done"}
        scored = {i for ids in calls for i in ids}
        # the pruning went first: the detector's rows are gone, the worker's scores stored again
        found = {d["doc_id"]: d for d in store.documents(limit=None)}
        assert set(found) == scored
        assert all(d["anomaly_score"] == 1.0 and d["late"] is None for d in found.values())
        assert [w["window_seq"] for w in store.windows()] == [max(seq for seq, _ in windows)]


def test_tens_of_thousands_of_leftover_snapshots_are_pruned_in_seconds(
    postgres_database: tuple[str, str],
) -> None:
    """Snapshots an earlier prune kept beyond their windows went by a list of (window, model
    kind) pairs, which PostgreSQL tested pair by pair on every row: 33,000 took 27 s to count
    and delete (quadratic: a list of 5,000 pairs a statement), now about 3 s."""
    url, _ = postgres_database
    n = 33_000
    with Store.open(url) as store:
        with store.transaction() as tx:  # the stream's one window, newer than every snapshot
            tx.upsert_window("s", n, T0, T0 + timedelta(hours=1), 0, None, {}, "idle")
        blob = arrays_to_npz({"A": np.ones(1)})
        rows = [
            {
                "stream": "s",
                "window_seq": seq,
                "model_kind": kind,
                "shapes": {},
                "blob": blob,
                "meta": {},
                "vocabulary_version": 1,
                "created_at": T0 - timedelta(seconds=n - seq),
            }
            for seq in range(n // 2)
            for kind in ("dictionary", "topics")
        ]
        with store.engine.begin() as conn:
            conn.execute(sa.insert(schema.snapshots), rows)
        started = time.perf_counter()
        dry = store.prune(before=T0, keep_windows=1, keep_snapshots=2, dry_run=True)
        report = store.prune(before=T0, keep_windows=1, keep_snapshots=2)
        took = time.perf_counter() - started
        assert dry.deleted["snapshots"] == report.deleted["snapshots"] == n - 4
        assert [s["window_seq"] for s in store.snapshots(limit=None)] == [n // 2 - 1] * 2 + [
            n // 2 - 2
        ] * 2
    assert took < 15, f"pruning {n} leftover snapshots took {took:.1f} s"
