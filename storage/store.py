"""The storage API the workers call: one SQL transaction per window, idempotent natural-key writes.

A worker does, per closed window::

    with store.transaction() as tx:
        tx.upsert_window(...); tx.insert_documents(rows); tx.insert_alerts(alerts)
        tx.upsert_topics(...); tx.put_snapshot(...)           # results
        tx.put_checkpoint(group, stream, model.get_state(), meta)  # model state
        tx.set_partition_offsets(group, topic, {partition: next_offset})  # consumed offsets
    consumer.commit_offsets(...)  # only after the commit above

and on start ``store.partition_offsets(group, topic)`` (where to seek), then, as each stream
is first seen, ``store.load_checkpoint(group, stream)``.

Idempotency (re-writing a window changes nothing):

* ``documents``: key (stream, doc_id). The detector's columns are written once: an existing row
  keeps them unless they were never written (``late IS NULL``: the detector always writes it; a
  row the anomaly worker created first). ``upsert_anomaly_scores`` sets ``anomaly_score`` /
  ``anomaly``, and, in a row the detector has not written, the event time and window its scores
  message told (so that ``db prune`` can tell how old such a row is).
* ``alerts`` (kind, stream, subject_id), ``snapshots`` (stream, window_seq, model_kind),
  ``dead_letters`` (topic, partition, offset): first write wins.
* ``windows`` (stream, window_seq), ``topics`` (stream, window_seq, topic_id), ``checkpoints``
  (group, stream), ``partition_offsets`` (group, topic, partition): replaced by the latest write; a
  checkpoint rewritten with the same state (SHA-256 digest, checked again on load) and metadata
  keeps its ``created_at``.

Every write is one bulk statement per table and call: :mod:`sparsewatch.storage.bulk` for the
per-document rows, which the detector hands over as columns
(:class:`~sparsewatch.storage.document_columns.DocumentColumns`; SQLite: the driver's
``executemany`` without SQLAlchemy's per-row overhead; PostgreSQL: ``COPY`` into a staging table
and one ``INSERT ... SELECT``); SQLAlchemy's ``executemany`` for the small ones. Values may be
numpy scalars (they are converted to Python numbers); a NaN is stored as NULL, or refused where
the column is NOT NULL (alert scores, topic strengths), alike on both databases; datetimes must
be timezone-aware.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import numpy as np
import sqlalchemy as sa
from sparsewatch.storage import (
    alert_queries,
    dead_letter_queries,
    document_queries,
    retention,
    snapshot_queries,
    status_queries,
    window_queries,
)
from sparsewatch.storage.bulk import bulk_upsert, bulk_upsert_columns
from sparsewatch.storage.document_columns import DocumentColumns
from sparsewatch.storage.engine import (
    create_engine,
    mask_url,
    sqlite_file,
    sqlite_uri_file,
    write_connection,
)
from sparsewatch.storage.schema import (
    alerts,
    checkpoints,
    dead_letters,
    documents,
    partition_offsets,
    partition_owners,
    snapshots,
    topics,
    windows,
)
from sparsewatch.storage.serialization import arrays_to_npz, describe_arrays, npz_to_arrays
from sparsewatch.storage.values import opt_float, opt_int, require_keys, required_float
from sqlalchemy.dialects import postgresql, sqlite

from sparsewatch.errors import SparsewatchError

DETECTOR_COLUMNS = (
    "event_time",
    "window_seq",
    "novelty_score",
    "reconstruction_error",
    "novel",
    "late",
    "dominant_topic",
    "emerging_topic",
    "top_atoms",
    "labels",
    "text",
)


@dataclass(frozen=True)
class Checkpoint:
    """A worker's saved model state for one stream."""

    group: str
    stream: str
    state: dict[str, np.ndarray]
    meta: dict
    created_at: datetime


def _now() -> datetime:
    return datetime.now(UTC)


# The detector columns the anomaly worker also fills, from its scores message, in a row it creates
# (the detector's own values replace them): the document's event time, and the window the
# detector scored it in (for a late document, not its own window).
ANOMALY_CONTEXT_COLUMNS = ("event_time", "window_seq")
# PostgreSQL ends the session of a transaction that holds partition owners' locks
# (:meth:`StoreTx.check_owners`) once it has waited this long for its client between two
# statements: a worker stopped mid-transaction (SIGSTOP, a paused VM) or cut off from the
# database then no longer blocks the new owner's claim until TCP gives up (hours, or never
# for a stopped process on a live host). Its statements follow one another without waits.
OWNER_LOCK_IDLE_TIMEOUT_S = 60.0


def _detector_unwritten() -> sa.ColumnElement[bool]:
    """The existing row's detector columns were never written: ``late`` is NULL (the detector
    always writes it, the anomaly worker never; ``event_time`` no longer tells, the anomaly
    worker stores one)."""
    return documents.c.late.is_(None)


def _keep_detector_columns(insert: Any) -> Any:
    """A document's detector columns are written once: only into a row the anomaly worker
    created first (:func:`_detector_unwritten`)."""
    unwritten = _detector_unwritten()
    return insert.on_conflict_do_update(
        index_elements=["stream", "doc_id"],
        set_={
            c: sa.case((unwritten, insert.excluded[c]), else_=documents.c[c])
            for c in DETECTOR_COLUMNS
        },
    )


def _set_anomaly_columns(insert: Any) -> Any:
    """The anomaly columns are replaced; the event time and window only in a row the detector
    has not written, and only by a value (a score without them keeps those stored)."""
    unwritten = _detector_unwritten()
    context = {
        c: sa.case(
            (unwritten, sa.func.coalesce(insert.excluded[c], documents.c[c])),
            else_=documents.c[c],
        )
        for c in ANOMALY_CONTEXT_COLUMNS
    }
    return insert.on_conflict_do_update(
        index_elements=["stream", "doc_id"],
        set_={**{c: insert.excluded[c] for c in ("anomaly_score", "anomaly")}, **context},
    )


class PartitionsFencedError(SparsewatchError):
    """Partitions of the group's input topic that another member claimed since this worker
    claimed them (:meth:`Store.claim_partitions`): the transaction that found it stored nothing."""

    def __init__(self, group: str, topic: str, partitions: Iterable[int]) -> None:
        self.group = group
        self.topic = topic
        self.partitions = frozenset(int(p) for p in partitions)
        super().__init__(group, topic, sorted(self.partitions))

    def __str__(self) -> str:
        shown = ", ".join(map(str, sorted(self.partitions)))
        return (
            f"partitions {shown} of {self.topic!r} were claimed by another member of group "
            f"{self.group!r} (this worker's session expired, or the group's state was deleted): "
            "nothing of this transaction was stored, and their new owner re-reads them"
        )


class StoreTx:
    """The writes of one SQL transaction (obtain it from :meth:`Store.transaction`)."""

    def __init__(self, conn: sa.Connection) -> None:
        self.connection = conn
        dialect = conn.dialect.name
        # (both dialects' INSERT has the ON CONFLICT clauses and ``excluded`` used here)
        self._insert: Callable[[sa.Table], postgresql.Insert | sqlite.Insert]
        if dialect == "postgresql":
            self._insert = postgresql.insert
        elif dialect == "sqlite":
            self._insert = sqlite.insert
        else:
            raise ValueError(f"unsupported database {dialect!r} (use SQLite or PostgreSQL)")

    def _execute(self, stmt: Any, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.connection.execute(stmt, rows)

    def upsert_window(
        self,
        stream: str,
        window_seq: int,
        start: datetime,
        end: datetime,
        n_documents: int,
        threshold: float | None,
        timings: Mapping[str, float],
        closed_by: str,
    ) -> None:
        """Record a closed window (replaces an earlier record of the same window)."""
        stmt = self._insert(windows)
        values = ("start_time", "end_time", "n_documents", "threshold", "timings", "closed_by")
        stmt = stmt.on_conflict_do_update(
            index_elements=["stream", "window_seq"], set_={c: stmt.excluded[c] for c in values}
        )
        row = {
            "stream": stream,
            "window_seq": int(window_seq),
            "start_time": start,
            "end_time": end,
            "n_documents": int(n_documents),
            "threshold": opt_float(threshold),
            "timings": {str(k): float(v) for k, v in timings.items()},
            "closed_by": closed_by,
        }
        self._execute(stmt, [row])

    def insert_documents(self, rows: DocumentColumns | Iterable[Mapping[str, Any]]) -> None:
        """Write the detector's per-document results (columns, or a dict per document: see
        :meth:`DocumentColumns.from_rows`); a row the detector wrote is never changed."""
        columns = rows if isinstance(rows, DocumentColumns) else DocumentColumns.from_rows(rows)
        bulk_upsert_columns(
            self.connection, "documents", documents, columns.bind(), _keep_detector_columns
        )

    def upsert_anomaly_scores(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Set ``anomaly_score`` and ``anomaly`` of documents, creating the row of a document the
        detector has not written (yet, or ever: its window was pruned before a lagging anomaly
        worker scored it) with the optional ``event_time`` (timezone-aware) and ``window_seq``
        of its scores message, by which ``db prune`` deletes such a row when it is old
        (:func:`~sparsewatch.storage.retention.prune`); the detector's values replace them."""
        params = []
        for r in rows:
            require_keys(r, ("stream", "doc_id", "anomaly_score", "anomaly"), "anomaly score")
            event_time = r.get("event_time")
            if event_time is not None and (
                not isinstance(event_time, datetime) or event_time.utcoffset() is None
            ):
                raise ValueError(
                    f"anomaly score of {r['doc_id']!r}: event_time must be a timezone-aware "
                    f"datetime, got {event_time!r}"
                )
            params.append(
                {
                    "stream": r["stream"],
                    "doc_id": str(r["doc_id"]),
                    "anomaly_score": opt_float(r["anomaly_score"]),
                    "anomaly": bool(r["anomaly"]),
                    "event_time": event_time,
                    "window_seq": opt_int(r.get("window_seq")),
                }
            )
        latest = {(p["stream"], p["doc_id"]): p for p in params}  # the last score of a key wins
        ordered = [latest[k] for k in sorted(latest)]  # key order, as in insert_documents
        bulk_upsert(self.connection, "anomaly", documents, ordered, _set_anomaly_columns)

    def insert_alerts(
        self, rows: Sequence[Mapping[str, Any]], publish_to: str | None = None
    ) -> None:
        """Raise alerts; an alert that exists (same kind, stream, subject) is left as it is.
        With ``publish_to``, an alerts topic, the new ones are pending publication there (the
        writer's outbox: :meth:`Store.pending_alerts`, :meth:`mark_alerts_published`).

        On PostgreSQL ``created_at`` is the database server's clock (``clock_timestamp()``, read
        once a call, as this host's was), not this host's: ``alerts --follow`` compares the
        ``created_at`` of alerts that different hosts wrote
        (:class:`~.alert_follower.AlertFollower`), and missed those of a host whose clock was
        behind. And the transaction takes its id (``pg_current_xact_id()``) before the alerts
        take theirs: the follower tells from the transaction ids in its snapshots which alert
        ids a transaction still to commit may hold. (SQLite: this host's clock; its
        writers take turns, a transaction's alerts commit in the order of their ids.)"""
        keys = ("kind", "stream", "subject_id", "score", "window_seq", "event_time", "summary")
        now = _now()
        if rows and self.connection.dialect.name == "postgresql":
            # the transaction's id first (assigned here if not yet), and the server's clock
            query = sa.select(sa.func.pg_current_xact_id(), sa.func.clock_timestamp())
            now = self.connection.execute(query).one()[1]
        params = []
        for r in rows:
            require_keys(r, keys, "alert")
            params.append(
                {
                    "kind": r["kind"],
                    "stream": r["stream"],
                    "subject_id": str(r["subject_id"]),
                    "score": required_float(
                        r["score"], f"{r['kind']} alert {r['subject_id']!r}: score"
                    ),
                    "window_seq": int(r["window_seq"]),
                    "event_time": r["event_time"],
                    "summary": str(r["summary"]),
                    "terms": r.get("terms"),
                    "n_documents": r.get("n_documents"),
                    "related_ids": r.get("related_ids"),
                    "created_at": now,
                    "publish_topic": publish_to,
                }
            )
        stmt = self._insert(alerts).on_conflict_do_nothing(
            index_elements=["kind", "stream", "subject_id"]
        )
        self._execute(stmt, params)

    def mark_alerts_published(self, ids: Sequence[int]) -> None:
        """The alerts of ``ids`` (``alerts.id``) were sent to the alerts topic: no longer
        pending."""
        if ids:
            self.connection.execute(
                sa.update(alerts)
                .where(alerts.c.id.in_([int(i) for i in ids]))
                .values(publish_topic=None)
            )

    def upsert_topics(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Record the topics of a window (replacing earlier records of the same topics)."""
        keys = ("stream", "window_seq", "topic_id", "terms", "strength", "emerging")
        params = []
        for r in rows:
            require_keys(r, keys, "topic")
            what = f"topic {r['topic_id']} of {r['stream']!r} window {r['window_seq']}: strength"
            params.append(
                {
                    "stream": r["stream"],
                    "window_seq": int(r["window_seq"]),
                    "topic_id": int(r["topic_id"]),
                    "terms": [[str(t), float(w)] for t, w in r["terms"]],
                    "strength": required_float(r["strength"], what),
                    "emerging": bool(r["emerging"]),
                }
            )
        stmt = self._insert(topics)
        stmt = stmt.on_conflict_do_update(
            index_elements=["stream", "window_seq", "topic_id"],
            set_={c: stmt.excluded[c] for c in ("terms", "strength", "emerging")},
        )
        self._execute(stmt, params)

    def put_snapshot(
        self,
        stream: str,
        window_seq: int,
        model_kind: str,
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
        vocabulary_version: int,
    ) -> None:
        """Store a model snapshot (npz); an existing snapshot of the same key is kept."""
        row = {
            "stream": stream,
            "window_seq": int(window_seq),
            "model_kind": model_kind,
            "shapes": describe_arrays(arrays),
            "blob": arrays_to_npz(arrays),
            "meta": dict(meta),
            "vocabulary_version": int(vocabulary_version),
            "created_at": _now(),
        }
        stmt = self._insert(snapshots).on_conflict_do_nothing(
            index_elements=["stream", "window_seq", "model_kind"]
        )
        self._execute(stmt, [row])

    def put_checkpoint(
        self,
        group: str,
        stream: str,
        state: Mapping[str, np.ndarray] | bytes,
        meta: Mapping[str, Any],
    ) -> None:
        """Replace the checkpoint of (group, stream); ``state`` is the arrays or their npz archive
        already made by :func:`arrays_to_npz` (a copy taken while the model may change later)."""
        blob = state if isinstance(state, bytes) else arrays_to_npz(state)
        row = {
            "group_id": group,
            "stream": stream,
            "state": blob,
            "digest": hashlib.sha256(blob).hexdigest(),
            "meta": dict(meta),
            "created_at": _now(),
        }
        stmt = self._insert(checkpoints)
        excluded = stmt.excluded
        same = sa.and_(checkpoints.c.digest == excluded.digest, checkpoints.c.meta == excluded.meta)
        stmt = stmt.on_conflict_do_update(
            index_elements=["group_id", "stream"],
            set_={
                "state": excluded.state,
                "digest": excluded.digest,
                "meta": excluded.meta,
                "created_at": sa.case((same, checkpoints.c.created_at), else_=excluded.created_at),
            },
        )
        self._execute(stmt, [row])

    def set_partition_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Replace the resume offsets (next offset to read) of ``topic``'s partitions."""
        params = [
            {"group_id": group, "topic": topic, "partition": int(p), "next_offset": int(o)}
            for p, o in offsets.items()
        ]
        stmt = self._insert(partition_offsets)
        stmt = stmt.on_conflict_do_update(
            index_elements=["group_id", "topic", "partition"],
            set_={"next_offset": stmt.excluded.next_offset},
        )
        self._execute(stmt, params)

    def set_partition_owners(self, group: str, topic: str, owners: Mapping[int, str]) -> None:
        """Make ``owners``' tokens the owners of ``topic``'s partitions in ``group`` (what
        :meth:`Store.claim_partitions` writes)."""
        now = _now()
        params = [
            {"group_id": group, "topic": topic, "partition": int(p), "owner": t, "claimed_at": now}
            for p, t in sorted(owners.items())
        ]
        stmt = self._insert(partition_owners)
        stmt = stmt.on_conflict_do_update(
            index_elements=["group_id", "topic", "partition"],
            set_={"owner": stmt.excluded.owner, "claimed_at": stmt.excluded.claimed_at},
        )
        self._execute(stmt, params)

    def check_owners(self, group: str, topic: str, owners: Mapping[int, str]) -> None:
        """Lock the owner rows of ``owners``' partitions until the transaction ends and raise
        :class:`PartitionsFencedError` unless each still holds its token of ``owners``
        (:meth:`Store.claim_partitions`). Called first in a worker's transaction: a claim by
        another member then waits for its commit (PostgreSQL: ``FOR UPDATE``; SQLite: the write
        lock taken at ``BEGIN IMMEDIATE``), so that the new owner reads what it stored. On
        PostgreSQL the server ends the transaction's session if it then waits for its client
        longer than :data:`OWNER_LOCK_IDLE_TIMEOUT_S` (a stalled worker holds the claim up no
        longer); the worker's next statement fails as a lost connection, and its retry is
        fenced off if the claim came in between."""
        if not owners:
            return
        if self.connection.dialect.name == "postgresql":
            idle_ms = round(OWNER_LOCK_IDLE_TIMEOUT_S * 1000)
            self.connection.exec_driver_sql(
                f"SET LOCAL idle_in_transaction_session_timeout = {idle_ms}"
            )
        o = partition_owners.c
        stmt = (
            sa.select(o.partition, o.owner)
            .where((o.group_id == group) & (o.topic == topic) & o.partition.in_(list(owners)))
            .order_by(o.partition)
            .with_for_update()
        )
        held = {int(p): owner for p, owner in self.connection.execute(stmt)}
        fenced = {p for p, token in owners.items() if held.get(int(p)) != token}
        if fenced:
            raise PartitionsFencedError(group, topic, fenced)

    def insert_dead_letters(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Record poison messages; a message already recorded is left as it is."""
        now = _now()
        params = []
        for r in rows:
            require_keys(r, ("topic", "partition", "offset", "reason", "payload"), "dead letter")
            params.append(
                {
                    "topic": r["topic"],
                    "partition": int(r["partition"]),
                    "offset": int(r["offset"]),
                    "reason": str(r["reason"]),
                    "payload": bytes(r["payload"] or b""),
                    "created_at": now,
                }
            )
        stmt = self._insert(dead_letters).on_conflict_do_nothing(
            index_elements=["topic", "partition", "offset"]
        )
        self._execute(stmt, params)


def _migrate() -> ModuleType:
    """The Alembic driver (:mod:`sparsewatch.storage.migrate`), imported on first use: importing
    Alembic (with Mako and Pygments) costs about 0.2 s of CPU, and the processes that open a store
    without migrating it (a worker's writer process, every run of it) need none of it."""
    from sparsewatch.storage import migrate

    return migrate


_MISSING_HINT = (
    "sparsewatch's workers set it up when they first run ('sparsewatch db upgrade' sets up an "
    "empty one); check --database-url or the configuration's database_url and data_dir"
)


class MissingDatabaseError(SparsewatchError):
    """A database that :meth:`Store.open` was not allowed to create is missing or empty."""


class OlderSchemaError(SparsewatchError):
    """A database behind this version's schema, which :meth:`Store.open` was not allowed to
    migrate (``read_only``)."""


class Store:
    """A database of sparsewatch results: SQLite (file, WAL) or PostgreSQL."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    @classmethod
    def open(
        cls, url: str, upgrade: bool = True, create: bool = True, read_only: bool = False
    ) -> Store:
        """Connect to ``url``; migrate the schema to the newest revision if it is behind.

        With ``create=False`` (the query commands) nothing is created: a SQLite file that does
        not exist and a database without sparsewatch's tables raise :class:`MissingDatabaseError`
        (a mistyped path used to become a new empty database, and the query an empty answer).
        With ``read_only`` (the commands that only read) a database behind is not migrated but
        refused (:class:`OlderSchemaError`, naming ``sparsewatch db upgrade``): a query changed
        the schema under the workers of the older version still writing it (revision 0009
        rebuilt SQLite's alerts table), and failed without a word on why for a role that may
        only read ("must be owner of table alerts", "attempt to write a readonly database").
        """
        path = sqlite_file(url) or sqlite_uri_file(url)
        if not create and path is not None and not path.exists():
            raise MissingDatabaseError(f"no database at {path}: {_MISSING_HINT}")
        store = cls(create_engine(url))
        if upgrade:
            try:
                current, legacy = _migrate().revision_state(store.engine)
                if current is None and not create:
                    raise MissingDatabaseError(
                        f"the database {mask_url(url)} has no sparsewatch tables: {_MISSING_HINT}"
                    )
                if read_only and _migrate().is_older_revision(current):
                    raise OlderSchemaError(
                        f"the database {mask_url(url)} is at schema revision {current!r}, older "
                        f"than this sparsewatch's {_migrate().head_revision()!r}: run "
                        "'sparsewatch db upgrade' (or start the workers of this version), which "
                        "migrates it; a query only reads"
                    )
                # (a query reads a database whose revision is still in the legacy table as it
                # is: its role may not have the right to move it; the workers do)
                if current != _migrate().head_revision() or (create and legacy):
                    store.upgrade()
            except BaseException:
                store.dispose()
                raise
        return store

    def upgrade(self) -> None:
        """Apply the missing Alembic migrations (``alembic upgrade head``)."""
        _migrate().upgrade(self.engine)

    def missing_write_privilege(self) -> str | None:
        """What the workers' writes need and the database denies, as a sentence, or ``None``.
        On PostgreSQL the per-document rows travel through a temporary staging table
        (:mod:`sparsewatch.storage.bulk`), which needs the database's ``TEMPORARY`` privilege
        (granted to every role by default)."""
        if self.engine.dialect.name != "postgresql":
            return None
        with self.reading() as conn:
            user, database, allowed = conn.execute(
                sa.text(
                    "SELECT current_user, current_database(), "
                    "has_database_privilege(current_database(), 'TEMPORARY')"
                )
            ).one()
        if allowed:
            return None
        return (
            f"the role {user!r} may not create temporary tables in the database {database!r}, "
            "which the workers write documents through "
            f'(GRANT TEMPORARY ON DATABASE "{database}" TO "{user}")'
        )

    def revision(self) -> str | None:
        """The schema revision of the database (``None`` when empty)."""
        return _migrate().current_revision(self.engine)

    @contextmanager
    def transaction(self) -> Iterator[StoreTx]:
        """One SQL transaction: committed when the block ends, rolled back on an exception."""
        with write_connection(self.engine) as conn, conn.begin():
            yield StoreTx(conn)

    def mark_alerts_published(self, ids: Sequence[int]) -> None:
        """:meth:`StoreTx.mark_alerts_published` in a write transaction of its own (the writer's
        outbox, after a window's transaction; not one of the windows' transactions)."""
        with write_connection(self.engine) as conn, conn.begin():
            StoreTx(conn).mark_alerts_published(ids)

    def insert_dead_letters(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Record dead letters in a transaction of their own (the ingest bridge's, which has no
        window to write them with); one already recorded is left as it is."""
        with self.transaction() as tx:
            tx.insert_dead_letters(rows)

    @contextmanager
    def reading(self) -> Iterator[sa.Connection]:
        """A read-only connection in one transaction (a consistent view: its first statement's
        snapshot holds for the others; PostgreSQL's default, READ COMMITTED, took one a
        statement, and SQLite's WAL readers keep theirs)."""
        with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    def load_checkpoint(self, group: str, stream: str) -> Checkpoint | None:
        """The checkpoint of (group, stream), or ``None``."""
        where = (checkpoints.c.group_id == group) & (checkpoints.c.stream == stream)
        found = self._checkpoints(where)
        return found.get(stream)

    def load_checkpoints(self, group: str) -> dict[str, Checkpoint]:
        """Every checkpoint of ``group``, by stream."""
        return self._checkpoints(checkpoints.c.group_id == group)

    def _checkpoints(self, where: Any) -> dict[str, Checkpoint]:
        """The checkpoints matching ``where`` by stream, in the order of the streams (without an
        ORDER BY the order was the plan's, which SQLite's statistics change)."""
        stmt = sa.select(checkpoints).where(where).order_by(checkpoints.c.stream)
        with self.reading() as conn:
            rows = conn.execute(stmt).mappings().all()
        found = {}
        for r in rows:
            if hashlib.sha256(r["state"]).hexdigest() != r["digest"]:
                raise ValueError(f"checkpoint of ({r['group_id']}, {r['stream']}) is corrupt")
            found[r["stream"]] = Checkpoint(
                group=r["group_id"],
                stream=r["stream"],
                state=npz_to_arrays(r["state"]),
                meta=r["meta"],
                created_at=r["created_at"],
            )
        return found

    def stored_dead_letters(
        self, messages: Sequence[tuple[str, int, int, bytes]]
    ) -> set[tuple[str, int, int, bytes]]:
        """Which of ``messages`` (topic, partition, offset, payload) the ``dead_letters`` table
        holds: at those coordinates, with those bytes. One statement whatever their number
        (:func:`_dead_letters_at`); the worker's writer asks before each transaction with dead
        letters."""
        wanted = set(messages)
        if not wanted:
            return set()
        coordinates = sorted({m[:3] for m in wanted})
        with self.reading() as conn:
            rows = conn.execute(_dead_letters_at(conn.dialect.name, coordinates))
            stored = {(str(t), int(p), int(o), bytes(payload)) for t, p, o, payload in rows}
        return stored & wanted

    def claim_partitions(self, group: str, topic: str, partitions: Iterable[int]) -> dict[int, str]:
        """Make this caller the owner of ``topic``'s ``partitions`` in ``group``, in a
        transaction of its own, and return its token for each: a transaction carrying the tokens
        (:meth:`StoreTx.check_owners`) stores nothing once another member has claimed one of
        them since. A worker claims the partitions the group assigns it before it reads their
        resume offsets (revision 0010). Tokens are random, never a counter: one taken before
        ``db forget-group`` deleted the rows is never given again."""
        claimed = {int(p): secrets.token_hex(16) for p in sorted(set(partitions))}
        # (not through :meth:`transaction`, the results' transactions: nothing else goes in it)
        with write_connection(self.engine) as conn, conn.begin():
            StoreTx(conn).set_partition_owners(group, topic, claimed)
        return claimed

    def partition_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The resume offset of each partition of ``topic`` stored for ``group``."""
        stmt = sa.select(partition_offsets.c.partition, partition_offsets.c.next_offset).where(
            (partition_offsets.c.group_id == group) & (partition_offsets.c.topic == topic)
        )
        with self.reading() as conn:
            return {int(p): int(o) for p, o in conn.execute(stmt)}

    # Read side for the query commands and the demo (see sparsewatch.storage.query_parts).
    def alerts(self, **filters: Any) -> list[dict[str, Any]]:
        """Alerts, newest first (filters: :func:`~.alert_queries.fetch_alerts`)."""
        with self.reading() as conn:
            return alert_queries.fetch_alerts(conn, **filters)

    @contextmanager
    def streamed_alerts(self, **filters: Any) -> Iterator[Iterator[dict[str, Any]]]:
        """The rows of :meth:`alerts`, fetched a batch at a time as the block reads them
        (:func:`~.alert_queries.stream_alerts`), all in the one read-only transaction that the
        block lasts (:meth:`reading`: one consistent view, the connection open meanwhile)."""
        with self._streamed(alert_queries.stream_alerts, filters) as rows:
            yield rows

    @contextmanager
    def _streamed(
        self,
        query: Callable[..., Generator[dict[str, Any], None, None]],
        filters: Mapping[str, Any],
    ) -> Iterator[Iterator[dict[str, Any]]]:
        """``query``'s rows in a :meth:`reading` transaction; its cursor closed when the block
        ends, read to the end or not (a reader gone, an error)."""
        with self.reading() as conn:
            rows = query(conn, **filters)
            try:
                yield rows
            finally:
                rows.close()

    def pending_alerts(
        self,
        topic: str | None = None,
        streams: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        after_id: int = 0,
        limit: int = 500,
        older_than_s: float | None = None,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` alerts pending publication to ``topic`` (of ``streams`` and ``kinds``,
        stored more than ``older_than_s`` seconds ago by the database's clock; any when ``None``)
        with ``id`` above ``after_id``, oldest first
        (:func:`~.alert_queries.fetch_pending_alerts`)."""
        with self.reading() as conn:
            return alert_queries.fetch_pending_alerts(
                conn, topic, streams, kinds, after_id, limit, older_than_s
            )

    def story_alerts(
        self, subject: str, streams: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """The novel stories led by document ``subject``
        (:func:`~.alert_queries.fetch_story_alerts`)."""
        with self.reading() as conn:
            return alert_queries.fetch_story_alerts(conn, subject, streams)

    def documents(self, **filters: Any) -> list[dict[str, Any]]:
        """Documents (filters: :func:`~.document_queries.fetch_documents`)."""
        with self.reading() as conn:
            return document_queries.fetch_documents(conn, **filters)

    @contextmanager
    def streamed_documents(self, **filters: Any) -> Iterator[Iterator[dict[str, Any]]]:
        """The rows of :meth:`documents`, fetched a batch at a time as the block reads them
        (:func:`~.document_queries.stream_documents`), in one transaction as
        :meth:`streamed_alerts`."""
        with self._streamed(document_queries.stream_documents, filters) as rows:
            yield rows

    def topics(self, **filters: Any) -> list[dict[str, Any]]:
        """Topics per window (filters: :func:`~.window_queries.fetch_topics`)."""
        with self.reading() as conn:
            return window_queries.fetch_topics(conn, **filters)

    def windows(self, **filters: Any) -> list[dict[str, Any]]:
        """Closed windows (filters: :func:`~.window_queries.fetch_windows`)."""
        with self.reading() as conn:
            return window_queries.fetch_windows(conn, **filters)

    def prune(self, **options: Any) -> retention.PruneReport:
        """Delete old windows' results and old dead letters (:func:`~.retention.prune`)."""
        return retention.prune(self.engine, **options)

    def groups(self) -> list[str]:
        """Groups with a checkpoint or a stored offset (:func:`~.retention.stored_groups`)."""
        return retention.stored_groups(self.engine)

    def checkpoint_metas(self, group: str) -> dict[str, dict[str, Any]]:
        """The metadata of each checkpoint of ``group``, by stream (not the states)."""
        stmt = sa.select(checkpoints.c.stream, checkpoints.c.meta).where(
            checkpoints.c.group_id == group
        )
        with self.reading() as conn:
            return {row.stream: dict(row.meta) for row in conn.execute(stmt)}

    def forget_group(self, group: str, dry_run: bool = False) -> dict[str, int]:
        """Delete a consumer group's checkpoints and offsets (:func:`~.retention.forget_group`)."""
        return retention.forget_group(self.engine, group, dry_run)

    def dead_letters(self, **filters: Any) -> list[dict[str, Any]]:
        """Dead letters, newest first (:func:`~.dead_letter_queries.fetch_dead_letters`)."""
        with self.reading() as conn:
            return dead_letter_queries.fetch_dead_letters(conn, **filters)

    def dead_letter_reasons(self, **filters: Any) -> list[dict[str, Any]]:
        """Dead letters counted by reason (:func:`~.dead_letter_queries.dead_letter_reasons`)."""
        with self.reading() as conn:
            return dead_letter_queries.dead_letter_reasons(conn, **filters)

    def status(self, streams: Sequence[str] | None = None) -> dict[str, Any]:
        """What the workers have stored: ``streams`` (:func:`~.status_queries.stream_status`),
        ``offsets`` (:func:`~.status_queries.stored_offsets`), the number of ``dead_letters``
        (:func:`~.dead_letter_queries.count_dead_letters`) and of ``unsent_alerts``, stored and
        pending publication to the alerts topic
        (:func:`~.alert_queries.count_pending_alerts`)."""
        with self.reading() as conn:
            return {
                "streams": status_queries.stream_status(conn, streams),
                "offsets": status_queries.stored_offsets(conn),
                "dead_letters": dead_letter_queries.count_dead_letters(conn),
                "unsent_alerts": alert_queries.count_pending_alerts(conn),
            }

    def snapshots(self, **filters: Any) -> list[dict[str, Any]]:
        """Snapshot descriptions without blobs (:func:`~.snapshot_queries.fetch_snapshots`)."""
        with self.reading() as conn:
            return snapshot_queries.fetch_snapshots(conn, **filters)

    def load_snapshot(
        self, stream: str, model_kind: str, window_seq: int | None = None
    ) -> snapshot_queries.Snapshot | None:
        """The snapshot at ``window_seq`` (default: the newest) with its arrays, or ``None``."""
        with self.reading() as conn:
            return snapshot_queries.load_snapshot(conn, stream, model_kind, window_seq)

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()


def _dead_letters_at(dialect: str, coordinates: Sequence[tuple[str, int, int]]) -> sa.Select[Any]:
    """The dead letters (topic, partition, offset, payload) at ``coordinates`` (topic, partition,
    offset): the coordinates travel as a constant number of bound parameters, joined to the table
    by its primary key. PostgreSQL: three arrays, ``unnest``-ed into rows; SQLite: one JSON array,
    read by ``json_each``. A list of row values (``(topic, partition, offset) IN (...)``, three
    parameters a key) cost PostgreSQL 0.15 s to plan at 500 keys and 1 s at 5,000 (an OR of each
    key), and SQLite read the whole table for each batch of 500."""
    d = dead_letters.c
    if dialect == "postgresql":
        names, partitions, offsets = (list(column) for column in zip(*coordinates, strict=True))
        keys = (
            sa.func.unnest(
                sa.bindparam("topics", names, type_=postgresql.ARRAY(sa.String)),
                sa.bindparam("partitions", partitions, type_=postgresql.ARRAY(sa.Integer)),
                sa.bindparam("offsets", offsets, type_=postgresql.ARRAY(sa.BigInteger)),
            )
            .table_valued("topic", "partition", "offset")
            .render_derived(name="k")
        )
        key: list[sa.ColumnElement[Any]] = [keys.c.topic, keys.c.partition, keys.c.offset]
    else:
        listed = sa.bindparam("coordinates", json.dumps([list(c) for c in coordinates]), sa.String)
        keys = sa.func.json_each(listed).table_valued("value").alias("k")
        key = [sa.func.json_extract(keys.c.value, f"$[{i}]") for i in range(3)]
    topic, partition, offset = key
    on = (d.topic == topic) & (d.partition == partition) & (d.offset == offset)
    return sa.select(d.topic, d.partition, d.offset, d.payload).select_from(
        keys.join(dead_letters, on)
    )
