"""Retention: delete old results so that a long-running database stops growing.

A stream's results are deleted window by window: a window whose event-time end is before the
cut-off goes with its documents, alerts, topics and snapshots, all in one transaction per batch of
windows (a worker writing meanwhile waits for one batch, not for the whole pruning). What a
restarted worker needs is never deleted: every stream keeps its newest ``keep_windows`` windows
by event time and its last ``keep_windows`` count windows by window number, the order the detector
closed them (a crashed detector recomputes at most ``windows.checkpoint_every`` windows after its
checkpoint, and their rows must still be there for first-write-wins to hold; after a backfill of
older documents the count windows closed last are not the newest by event time), each (stream,
model kind) keeps its newest ``keep_snapshots`` snapshots, and checkpoints and stored offsets are
not touched. Dead letters have no window: they are deleted by the time they were stored.

On PostgreSQL the documents are locked before they are deleted (:func:`_lock_documents`) so
that pruning never deadlocks with a worker over them (an anomaly worker behind, scoring documents
of a window being pruned): those stored in the window that scored them, window by window and by
id, the order in which the workers lock them; a late document (stored in its own, older window,
but written and scored in the call of a later window, whose order pruning cannot know) only if no
transaction holds it: pruning never waits for one, and one held is left for the next pruning.
A batch that fails all the same on a lock conflict (PostgreSQL's "deadlock detected" or
"could not serialize access", as with a writer that locks rows in some other order) is rolled back
and run again, a few times (:func:`_write_batch`), and counted once.

A consumer group no longer used is forgotten as a whole (:func:`forget_group`): its checkpoints
and stored offsets, the state a restarted worker of that group would resume from.

SQLite's query planner statistics are gathered here too (:func:`gather_statistics`): after a
prune, by ``db upgrade``, and by the workers' writers as the documents grow
(:class:`StatisticsRefresh`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa
from sparsewatch.consumers.retry import with_backoff
from sparsewatch.storage.engine import write_connection
from sparsewatch.storage.schema import (
    alerts,
    checkpoints,
    dead_letters,
    documents,
    metadata,
    partition_offsets,
    partition_owners,
    snapshots,
    topics,
    windows,
)

WINDOW_BATCH = 200
DEAD_LETTER_BATCH = 5_000
ORPHAN_BATCH = 5_000
# Snapshots deleted per statement (one bind parameter each): PostgreSQL takes at most 65,535
# a statement, and earlier prunes may leave tens of thousands.
SNAPSHOT_BATCH = 5_000
_BY_WINDOW = (documents, alerts, topics)
# PostgreSQL's SQLSTATEs of a transaction rolled back over a lock conflict, safe to run again:
# deadlock_detected, serialization_failure
_LOCK_CONFLICTS = frozenset({"40P01", "40001"})
# How long a batch is retried on lock conflicts (waits 0.2, 0.4, 0.8, 1.6 s: five tries)
LOCK_CONFLICT_RETRY_S = 3.0


@dataclass
class PruneReport:
    """Rows deleted (or, in a dry run, that would be) per table."""

    deleted: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("windows", "documents", "alerts", "topics", "snapshots", "dead_letters"), 0
        )
    )
    dry_run: bool = False
    # alerts of a pruned window (or orphans) kept because still pending publication (the
    # outbox, :meth:`~sparsewatch.storage.store.Store.pending_alerts`): a later prune takes them
    # once they are sent
    kept_pending_alerts: int = 0

    def add(self, other: PruneReport) -> None:
        """Add ``other``'s counts (one batch's) to these."""
        for table, n in other.deleted.items():
            self.deleted[table] += n
        self.kept_pending_alerts += other.kept_pending_alerts


class _LockConflictError(Exception):
    """A batch's transaction was rolled back over a lock conflict (:data:`_LOCK_CONFLICTS`); the
    database's error is its ``__cause__``."""


def _is_lock_conflict(exc: sa.exc.DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) in _LOCK_CONFLICTS


def _write_batch(
    engine: sa.Engine,
    report: PruneReport,
    what: str,
    work: Callable[..., object],
) -> None:
    """Run ``work(conn, report=...)`` (counting into the report given) in one write
    transaction, and add what it counted to ``report`` once it committed. A transaction rolled
    back over a lock conflict (a deadlock with a writer that locks rows in another order:
    PostgreSQL aborts one of the two after its ``deadlock_timeout``) is run again, with
    :func:`~sparsewatch.consumers.retry.with_backoff`, for up to :data:`LOCK_CONFLICT_RETRY_S`;
    then, or on any other error, the database's error is raised."""

    def attempt() -> PruneReport:
        counted = PruneReport(dry_run=report.dry_run)
        try:
            with write_connection(engine) as conn, conn.begin():
                work(conn, report=counted)
        except sa.exc.DBAPIError as exc:
            if _is_lock_conflict(exc):
                raise _LockConflictError(str(exc)) from exc
            raise
        return counted

    try:
        counted = with_backoff(
            attempt, what, transient=(_LockConflictError,), max_wait_s=LOCK_CONFLICT_RETRY_S
        )
    except _LockConflictError as conflict:
        assert conflict.__cause__ is not None
        raise conflict.__cause__ from None
    report.add(counted)


def _old_windows(
    conn: sa.Connection, stream: str, before: datetime, keep_windows: int
) -> tuple[list[int], datetime]:
    """``stream``'s windows ending before ``before``, apart from those a restarted detector may
    recompute; and the event time before which a row of a window that has no row
    (:func:`_orphans`) goes: ``before``, or the start of the oldest window kept by either rule
    below, when earlier (the rows of the count window after the last one written, which a
    restart recomputes, are as old as it).

    Two rules keep windows, and a window either keeps stays. The newest ``keep_windows`` by event
    time (window numbers go down when ``windows.size`` changes, and a count window's number is
    unrelated to a duration window's). And the ``keep_windows`` highest-numbered count windows
    (:func:`_last_count_windows`): a count window's number grows in the order the detector
    closed it, but its end is its documents' latest event time, so after a backfill of older
    documents the windows closed last, those a restarted detector recomputes from its
    checkpoint, end before windows closed earlier, and the first rule alone deleted them (their
    anomaly scores were lost and their alerts written again under new ids)."""
    w = windows.c
    newest = (
        sa.select(w.window_seq, w.start_time)
        .where(w.stream == stream)
        .order_by(w.end_time.desc(), w.window_seq.desc())
        .limit(keep_windows)
    )
    rows = [*conn.execute(newest).all(), *_last_count_windows(conn, stream, keep_windows)]
    kept = {int(seq) for seq, _ in rows}
    horizon = min([before, *(start for _, start in rows)])
    old = sa.select(w.window_seq).where(w.stream == stream, w.end_time < before)
    seqs = sorted(int(s) for s in conn.execute(old).scalars() if int(s) not in kept)
    return seqs, horizon


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def _last_count_windows(
    conn: sa.Connection, stream: str, keep_windows: int
) -> list[tuple[int, datetime]]:
    """(window, start) of the count windows among ``stream``'s ``keep_windows`` highest-numbered
    windows (read backwards along the primary key, as cheap as the limit): the last ones the
    detector closed. A duration window is left out, told by its shape (it covers
    ``[seq * size, (seq + 1) * size)`` ms, :mod:`~sparsewatch.consumers.windowing`; a count
    window spans its documents' event times): its numbers follow event time, so the newest by
    event time are its last closed, except after a ``windows.size`` change, when the highest
    numbers are the stale windows of the earlier, shorter size."""
    w = windows.c
    last = (
        sa.select(w.window_seq, w.start_time, w.end_time)
        .where(w.stream == stream)
        .order_by(w.window_seq.desc())
        .limit(keep_windows)
    )
    return [
        (int(seq), start)
        for seq, start, end in conn.execute(last).all()
        if not _is_duration_window(int(seq), start, end)
    ]


def _is_duration_window(seq: int, start: datetime, end: datetime) -> bool:
    """Whether window ``seq`` covering [``start``, ``end``) is a duration window: one starting at
    ``seq`` times its length, in whole milliseconds since the epoch."""
    start_ms, end_ms = (start - _EPOCH) // _MS, (end - _EPOCH) // _MS
    return end_ms > start_ms and start_ms == seq * (end_ms - start_ms)


def _kept_snapshots(conn: sa.Connection, stream: str, keep: int) -> set[tuple[int, str]]:
    """(window, model kind) of ``stream``'s newest ``keep`` snapshots of each model kind, the
    most recently written (window numbers go down when ``windows.size`` changes)."""
    s = snapshots.c
    rows = conn.execute(
        sa.select(s.window_seq, s.model_kind)
        .where(s.stream == stream)
        .order_by(s.model_kind, s.created_at.desc(), s.window_seq.desc())
    ).all()
    kept: set[tuple[int, str]] = set()
    count: dict[str, int] = {}
    for seq, kind in rows:
        if count.get(kind, 0) < keep:
            kept.add((int(seq), kind))
            count[kind] = count.get(kind, 0) + 1
    return kept


def _delete_windows(
    conn: sa.Connection,
    stream: str,
    seqs: Sequence[int],
    kept_snapshots: set[tuple[int, str]],
    report: PruneReport,
) -> None:
    """Delete (or count, in a dry run) the rows of ``stream``'s windows ``seqs``; an alert still
    pending publication stays (:func:`_keep_pending`)."""
    for table in (*_BY_WINDOW, windows):
        where: sa.ColumnElement[bool] = (table.c.stream == stream) & table.c.window_seq.in_(
            list(seqs)
        )
        if table is alerts:  # counted here in a dry run only, else as orphans once deleted
            where = _keep_pending(conn, where, report if report.dry_run else None)
        if table is documents and not report.dry_run:
            where = _lock_documents(conn, where)
        report.deleted[table.name] += _apply(conn, table, where, report.dry_run)
    s = snapshots.c
    found = sa.select(s.window_seq, s.model_kind).where(
        s.stream == stream, s.window_seq.in_(list(seqs))
    )
    _delete_snapshots(conn, stream, conn.execute(found).all(), kept_snapshots, report)


def _delete_snapshots(
    conn: sa.Connection,
    stream: str,
    found: Sequence[sa.Row[int, str]],
    kept_snapshots: set[tuple[int, str]],
    report: PruneReport,
) -> None:
    """Delete (or count) ``stream``'s snapshots ``found`` (window, model kind) but the kept,
    by model kind, at most ``SNAPSHOT_BATCH`` windows a statement. (A list of (window, model
    kind) pairs was a condition PostgreSQL tested pair by pair on every row: 33,000 snapshots
    took 9 s to delete and 18 s to count; a list of windows is looked up in the primary key.)"""
    s = snapshots.c
    by_kind: dict[str, list[int]] = {}
    for seq, kind in found:
        if (int(seq), kind) not in kept_snapshots:
            by_kind.setdefault(kind, []).append(int(seq))
    for kind, seqs in sorted(by_kind.items()):
        for i in range(0, len(seqs), SNAPSHOT_BATCH):
            batch = seqs[i : i + SNAPSHOT_BATCH]
            where = (s.stream == stream) & (s.model_kind == kind) & s.window_seq.in_(batch)
            report.deleted["snapshots"] += _apply(conn, snapshots, where, report.dry_run)


def _keep_pending(
    conn: sa.Connection, where: sa.ColumnElement[bool], report: PruneReport | None
) -> sa.ColumnElement[bool]:
    """The alerts matching ``where`` that may go: those not pending publication. A pending
    alert (``publish_topic`` set: committed, not yet sent to the alerts topic, because the
    topic or the broker was unavailable or the worker crashed before sending it) is the only
    copy of what its writer still has to send, from the row alone; deleting it lost the alert
    for the topic's readers. It goes at a later prune once sent (then an orphan,
    :func:`_orphans`). With ``report``, the pending alerts are counted in its
    :attr:`PruneReport.kept_pending_alerts`."""
    if report is not None:
        pending = where & alerts.c.publish_topic.is_not(None)
        count = sa.select(sa.func.count()).select_from(alerts).where(pending)
        report.kept_pending_alerts += int(conn.execute(count).scalar_one())
    return where & alerts.c.publish_topic.is_(None)


def _lock_documents(conn: sa.Connection, where: sa.ColumnElement[bool]) -> sa.ColumnElement[bool]:
    """PostgreSQL: lock the documents matching ``where`` (of one stream) that can be deleted
    without waiting in an order that differs from the workers'; return the condition of those to
    delete. A worker's transaction locks its documents call by call, one call per window, in
    window order (the windows of one job), each call's by id (:mod:`~.bulk` inserts a call's rows
    in primary-key order). A document stored in the window whose call wrote and scored it (every
    document but a late one) is locked here in that order too: window by window, each by id
    (by id alone, a job of two windows, whose ids interleave, deadlocked). A late document is
    stored in its own, older window, but the detector and the anomaly worker write it in the call
    of the later window that scored it, a window no row records: locked in any order, pruning held
    a late document of window 3 and waited for one of window 7 that an anomaly worker held, which
    waited for the late one (PostgreSQL aborted one of the two after its ``deadlock_timeout``:
    ``db prune`` failed with "deadlock detected", or the worker's transaction was rolled back).
    So a late document is locked only if no transaction holds it (``SKIP LOCKED``), after the
    others, and deleted only then: one held stays, an orphan once its window is gone, deleted by
    a later pruning (:func:`_orphans`). A bare DELETE locked the rows in the order it found them,
    the table's physical order. SQLite needs nothing: a write transaction holds the whole
    database."""
    if conn.dialect.name != "postgresql":
        return where
    d = documents.c
    in_order = where & d.late.is_not(True)
    locked = (
        sa.select(d.doc_id)
        .where(in_order)
        .order_by(d.window_seq, d.stream, d.doc_id)
        .with_for_update()
        .subquery()
    )
    conn.execute(sa.select(sa.func.count()).select_from(locked))
    late = where & d.late.is_(True)
    free = sa.select(d.stream, d.doc_id).where(late).with_for_update(skip_locked=True)
    return in_order | (late & sa.tuple_(d.stream, d.doc_id).in_(free))


def _orphan_snapshots(conn: sa.Connection, stream: str) -> list[sa.Row[int, str]]:
    """``stream``'s snapshots whose window is gone: kept by an earlier prune's
    ``keep_snapshots`` (a snapshot is written with its window, so only pruning leaves them)."""
    s, w = snapshots.c, windows.c
    has_window = sa.exists().where(w.stream == s.stream, w.window_seq == s.window_seq)
    query = sa.select(s.window_seq, s.model_kind).where(s.stream == stream, ~has_window)
    return list(conn.execute(query).all())


def _orphans(table: sa.Table, stream: str, horizon: datetime) -> sa.ColumnElement[bool]:
    """``stream``'s rows of ``table`` (documents, alerts) in a window that has no row, by event
    time before ``horizon``: late documents (and their alerts) are stored in their own window
    by event time, also one that never closed or that was pruned already (or -1, with count
    windows), and an anomaly worker behind writes its alerts and scores of a window pruned
    meanwhile (a row the detector never wrote, with the event time and window of the scores
    message). Such a row before ``horizon`` goes even if the detector's transaction of its
    window, whose scores messages precede it, is still to commit: with time windows only a late
    document is that old, and its row is an orphan itself (with count windows, an out-of-order
    document of that window would be stored again without its anomaly score). A row without an
    event time (written by an anomaly worker that did not store one) stays."""
    w, t = windows.c, table.c
    has_window = sa.exists().where(w.stream == t.stream, w.window_seq == t.window_seq)
    return (t.stream == stream) & (t.event_time < horizon) & ~has_window


def _delete_orphans(engine: sa.Engine, stream: str, horizon: datetime, report: PruneReport) -> None:
    """Delete (or count) ``stream``'s rows in windows that have no row (:func:`_orphans`), in
    batches of keys, in key order: one short write transaction each."""
    for table, key in ((documents, documents.c.doc_id), (alerts, alerts.c.id)):
        where = _orphans(table, stream, horizon)
        if table is alerts:
            with engine.connect() as conn:
                where = _keep_pending(conn, where, report)
        if report.dry_run:
            with engine.connect() as conn:
                report.deleted[table.name] += _apply(conn, table, where, dry_run=True)
            continue
        batches = _OrphanBatch(table, key, where)
        what = f"db prune: {stream}'s {table.name} without a window"
        while True:
            _write_batch(engine, report, what, batches)
            if not batches.committed():
                break


@dataclass
class _OrphanBatch:
    """The batches of :func:`_delete_orphans`: the rows of ``table`` matching ``where``, the next
    ``ORPHAN_BATCH`` keys after the last committed batch's (a late document held by a worker
    stays, :func:`_lock_documents`: taking the first keys again, the batches never ended)."""

    table: sa.Table
    key: sa.Column[Any]
    where: sa.ColumnElement[bool]
    after: Any = None  # the last key of the last committed batch
    found: list[Any] = field(default_factory=list)  # the keys of the batch run last

    def __call__(self, conn: sa.Connection, report: PruneReport) -> None:
        query = sa.select(self.key).where(self.where).order_by(self.key).limit(ORPHAN_BATCH)
        if self.after is not None:
            query = query.where(self.key > self.after)
        self.found = list(conn.execute(query).scalars())
        if self.found:
            # still without a window (a worker may have written one meanwhile)
            gone: sa.ColumnElement[bool] = self.where & self.key.in_(self.found)
            if self.table is documents:
                gone = _lock_documents(conn, gone)
            report.deleted[self.table.name] += _apply(conn, self.table, gone, dry_run=False)

    def committed(self) -> bool:
        """Go on after the batch just committed; whether there are more."""
        if not self.found:
            return False
        self.after = self.found[-1]
        return True


def _apply(
    conn: sa.Connection, table: sa.Table, where: sa.ColumnElement[bool], dry_run: bool
) -> int:
    """Delete the rows of ``table`` matching ``where``; or, in a dry run, count them."""
    if dry_run:
        count = sa.select(sa.func.count()).select_from(table).where(where)
        return int(conn.execute(count).scalar_one())
    return int(conn.execute(sa.delete(table).where(where)).rowcount)


def prune(
    engine: sa.Engine,
    before: datetime | None = None,
    keep_windows: int = 100,
    keep_snapshots: int = 1,
    streams: Sequence[str] | None = None,
    dead_letters_before: datetime | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """Delete the windows of ``streams`` (default: every stream) that ended before ``before``
    (event time) with their rows, keeping each stream's newest ``keep_windows`` windows (by
    event time, and its last closed count windows: :func:`_old_windows`) and newest
    ``keep_snapshots`` snapshots per model kind, and the dead letters stored before
    ``dead_letters_before``; then, on SQLite, gather the planner's statistics
    (:func:`gather_statistics`). With ``dry_run``, count what would go and change nothing."""
    if keep_windows < 1 or keep_snapshots < 0:
        raise ValueError("keep_windows must be >= 1 and keep_snapshots >= 0")
    report = PruneReport(dry_run=dry_run)
    if before is not None:
        with engine.connect() as conn:
            query = sa.select(windows.c.stream).distinct()
            names = sorted(conn.execute(query).scalars())
        for stream in (s for s in names if not streams or s in streams):
            with engine.connect() as conn, conn.begin():
                seqs, horizon = _old_windows(conn, stream, before, keep_windows)
                kept = _kept_snapshots(conn, stream, keep_snapshots)
                orphans = _orphan_snapshots(conn, stream)
            for i in range(0, len(seqs), WINDOW_BATCH):
                delete = partial(_delete_windows, stream=stream, seqs=seqs[i : i + WINDOW_BATCH])
                what = f"db prune: windows {seqs[i]}.. of {stream}"
                _write_batch(engine, report, what, partial(delete, kept_snapshots=kept))
            # kept by an earlier prune, now beyond this one's keep_snapshots: one short write
            # transaction a batch, as the windows'
            for i in range(0, len(orphans), SNAPSHOT_BATCH):
                found = orphans[i : i + SNAPSHOT_BATCH]
                delete = partial(_delete_snapshots, stream=stream, found=found, kept_snapshots=kept)
                _write_batch(engine, report, f"db prune: snapshots of {stream}", delete)
            _delete_orphans(engine, stream, horizon, report)
    if dead_letters_before is not None:
        _prune_dead_letters(engine, dead_letters_before, report)
    if not dry_run:
        gather_statistics(engine)
    return report


def gather_statistics(engine: sa.Engine) -> None:
    """SQLite: ``ANALYZE`` each index of sparsewatch's tables (a table without one: the table),
    one write transaction each (the longest, an index of documents: 0.1-0.16 s per million
    documents; the whole 0.5-0.8 s per million). SQLite keeps no planner statistics otherwise,
    and without them chose poor plans on a large database (``documents --novel`` sorted every
    novel document, 0.3 s, instead of reading them by event time, 17 ms). PostgreSQL: nothing,
    its autovacuum analyses tables as they change. Run by ``sparsewatch db prune`` and
    ``db upgrade``, and by the workers' writers as the documents grow (:class:`StatisticsRefresh`).
    """
    if engine.dialect.name != "sqlite":
        return
    for target in _statistics_targets(engine):
        with write_connection(engine) as conn, conn.begin():
            conn.exec_driver_sql(f'ANALYZE "{target}"')


def _statistics_targets(engine: sa.Engine) -> list[str]:
    """What :func:`gather_statistics` analyses, one at a time: every index of each of
    sparsewatch's tables, or the table itself when it has none (the same statistics as
    ``ANALYZE`` of the table, in shorter write transactions)."""
    names = [t.name for t in metadata.sorted_tables]
    query = sa.text(
        "SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' AND tbl_name IN :names "
        "ORDER BY tbl_name, name"
    ).bindparams(sa.bindparam("names", expanding=True))
    with engine.connect() as conn:
        indexes = conn.execute(query, {"names": names}).all()
    by_table: dict[str, list[str]] = {}
    for table, index in indexes:
        by_table.setdefault(table, []).append(index)
    return [target for name in names for target in by_table.get(name, [name])]


@dataclass(frozen=True)
class StatisticsPolicy:
    """When a worker's writer gathers SQLite's planner statistics (:class:`StatisticsRefresh`):
    first once the documents table holds ``min_rows``, again each time it has grown ``growth``
    times since they were gathered, as long as it holds at most ``max_rows``."""

    min_rows: int = 10_000
    growth: float = 4.0
    max_rows: int = 1_000_000


class StatisticsRefresh:
    """Keeps the SQLite query planner's statistics usable on a database that only the workers
    write (nobody runs ``db prune`` or ``db upgrade``, which gather them too), one
    :meth:`run` between two windows' transactions.

    Without statistics SQLite chose plans 50-200 times slower on a large database
    (``documents --stream S --window W``, ``documents --novel``, ``alerts --by event --kind``).
    Statistics gathered on tens of thousands of documents still gave the right plans on
    millions, but not those of a database of a few windows per stream: so they are gathered
    (:func:`gather_statistics`, exact) when the documents pass :attr:`StatisticsPolicy.min_rows`,
    and again after each :attr:`StatisticsPolicy.growth`-fold growth, up to
    :attr:`StatisticsPolicy.max_rows` documents (0.1-0.16 s of write lock an index, 0.5-0.8 s
    in all, at a million); beyond it they are left as they are, except that a database without
    any (one that grew past it before the workers gathered them) gets them once.
    ``PRAGMA analysis_limit`` is not used: ANALYZE then reads the first rows of each index only,
    so a value of a leading column of few values (novel, stream) seemed to select about that
    many rows, and ``documents --novel`` and ``alerts --by event --kind`` stayed as slow as
    without statistics (limits of 100 to 10,000 on a million documents). ``PRAGMA optimize``
    (SQLite 3.40) analyses only the tables that its own connection's queries read, fully: the
    writer's connection reads none.

    The size of the documents table is read as its largest rowid (a lookup, not a count:
    counting a million documents took 13 ms a window), an upper bound after deletions; the
    size a :meth:`run` saw when it gathered them is remembered, so that a database pruned below
    its largest rowid is not analysed again at every window."""

    def __init__(self, engine: sa.Engine, policy: StatisticsPolicy | None = None) -> None:
        self.engine = engine
        self.policy = policy or StatisticsPolicy()
        self._gathered_at = 0  # the documents' size when this object last gathered statistics

    def run(self) -> bool:
        """Gather the statistics if they are due (SQLite only); whether it did. Raises the
        database's error when gathering them fails (they are due again after another
        :attr:`StatisticsPolicy.growth`-fold growth)."""
        if self.engine.dialect.name != "sqlite":
            return False
        size, analysed = self._sizes()
        if not self._due(size, analysed):
            return False
        self._gathered_at = size
        gather_statistics(self.engine)
        return True

    def _due(self, size: int, analysed: int | None) -> bool:
        policy = self.policy
        since = max(analysed or 0, self._gathered_at)
        if size < max(policy.min_rows, policy.growth * since):
            return False
        return analysed is None or size <= policy.max_rows

    def _sizes(self) -> tuple[int, int | None]:
        """The documents table's size (its largest rowid) and its size in the statistics
        (``None``: it has none)."""
        with self.engine.connect() as conn, conn.begin():
            size = conn.exec_driver_sql("SELECT max(rowid) FROM documents").scalar() or 0
            has_table = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'"
            if conn.exec_driver_sql(has_table).first() is None:
                return int(size), None
            stats = conn.exec_driver_sql(
                "SELECT stat FROM sqlite_stat1 WHERE tbl = 'documents'"
            ).scalars()
            rows = [int(stat.split()[0]) for stat in stats if stat]
        return int(size), max(rows, default=None)


def _prune_dead_letters(engine: sa.Engine, before: datetime, report: PruneReport) -> None:
    """Delete (or count) the dead letters stored before ``before``, ``DEAD_LETTER_BATCH`` at a
    time, one short write transaction each (:func:`_delete_dead_letter_batch`), until a batch
    finds none."""
    old = dead_letters.c.created_at < before
    if report.dry_run:
        with engine.connect() as conn:
            report.deleted["dead_letters"] = _apply(conn, dead_letters, old, dry_run=True)
        return
    delete = _delete_dead_letter_batch(engine.dialect.name, old)
    while True:
        with write_connection(engine) as conn, conn.begin():
            deleted = int(conn.execute(delete).rowcount)
        if not deleted:
            return
        report.deleted["dead_letters"] += deleted


def _delete_dead_letter_batch(dialect: str, old: sa.ColumnElement[bool]) -> sa.Delete:
    """A statement deleting at most ``DEAD_LETTER_BATCH`` dead letters matching ``old``, chosen
    by the database itself: PostgreSQL, by their row versions' ``ctid`` (a TID scan of the rows
    its subquery found); SQLite, by their keys, a row-value ``IN`` a subquery (SQLite 3.15+).
    Its text is the same at every batch: reading the keys first and deleting a literal list of
    them cost PostgreSQL 20 s to plan at 5,000 keys (an OR of each), 0.4 s to run."""
    if dialect == "postgresql":
        ctid: sa.ColumnElement[Any] = sa.literal_column("ctid")
        chosen = sa.select(ctid).select_from(dead_letters).where(old).limit(DEAD_LETTER_BATCH)
        return sa.delete(dead_letters).where(
            ctid == sa.any_(sa.func.array(chosen.scalar_subquery()))
        )
    d = dead_letters.c
    key = sa.tuple_(d.topic, d.partition, d.offset)
    chosen = sa.select(d.topic, d.partition, d.offset).where(old).limit(DEAD_LETTER_BATCH)
    return sa.delete(dead_letters).where(key.in_(chosen))


_GROUP_STATE = (checkpoints, partition_offsets)


def stored_groups(engine: sa.Engine) -> list[str]:
    """The consumer groups the database keeps a checkpoint, a resume offset or a partition's
    owner for."""
    query = sa.union(*(sa.select(t.c.group_id) for t in (*_GROUP_STATE, partition_owners)))
    with engine.connect() as conn:
        return sorted(conn.execute(query).scalars())


def forget_group(engine: sa.Engine, group: str, dry_run: bool = False) -> dict[str, int]:
    """Delete, in one transaction, what the database keeps for consumer group ``group``: its
    checkpoints (one per stream) and its stored resume offsets, counted in the answer, and its
    partitions' owners (revision 0010: a worker of the group still running is fenced off: it
    stores nothing more, and stops once the group keeps assigning it those partitions); results
    (windows, documents, alerts, ...) stay. Returns the rows deleted per table (with
    ``dry_run``, counted only)."""
    with write_connection(engine) as conn, conn.begin():
        _apply(conn, partition_owners, partition_owners.c.group_id == group, dry_run)
        return {t.name: _apply(conn, t, t.c.group_id == group, dry_run) for t in _GROUP_STATE}
