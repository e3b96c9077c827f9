"""The alerts behind ``sparsewatch alerts``: :func:`fetch_alerts`, by creation or event time, or
:func:`stream_alerts` for an export read as it is written (conventions:
:mod:`~sparsewatch.storage.query_parts`)."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sparsewatch.storage.query_parts import _between, _in, _rows, _stream_rows
from sparsewatch.storage.schema import alerts
from sparsewatch.storage.text_match import _contains

AlertTime = Literal["created", "event"]


def fetch_alerts(
    conn: sa.Connection,
    since: datetime | None = None,
    until: datetime | None = None,
    kinds: Sequence[str] | None = None,
    streams: Sequence[str] | None = None,
    min_score: float | None = None,
    limit: int | None = 100,
    time_field: AlertTime = "created",
    text: str | None = None,
    min_documents: int | None = None,
) -> list[dict[str, Any]]:
    """Alerts in ``[since, until)`` of creation (or event) time, newest first (by event time:
    alerts without one last); ``text``: those whose summary contains it, ignoring case;
    ``min_documents``: those standing for at least this many documents (``n_documents``; an
    alert without a count stands for one)."""
    conditions = _alert_conditions(
        conn, since, until, kinds, streams, min_score, time_field, text, min_documents
    )
    grep = bool(text)
    if time_field == "created":
        return _newest_alerts(conn, alerts.c.created_at, conditions, limit, grep)
    # event_time DESC NULLS LAST in one query read every alert on PostgreSQL (its index read
    # backwards gives NULLS FIRST): the timed alerts first, then those without a time
    timed = _newest_alerts(
        conn, alerts.c.event_time, [*conditions, alerts.c.event_time.is_not(None)], limit, grep
    )
    if (limit is not None and len(timed) >= limit) or since is not None or until is not None:
        return timed
    left = None if limit is None else limit - len(timed)
    untimed = [*conditions, alerts.c.event_time.is_(None)]
    return timed + _newest_alerts(conn, alerts.c.event_time, untimed, left)


# How many of the newest alerts a --grep looks through first (:func:`_newest_alerts`)
GREP_PROBE_ROWS = 10_000


def _newest_alerts(
    conn: sa.Connection,
    time_column: sa.ColumnElement[Any],
    conditions: list[Any],
    limit: int | None,
    grep: bool = False,
) -> list[dict[str, Any]]:
    """The alerts meeting ``conditions`` by ``time_column``, score and id, all descending (a
    time column without NULLs among them: PostgreSQL reads its index backwards).

    With ``grep`` (a condition no index serves) the newest ``GREP_PROBE_ROWS`` alerts by
    ``time_column`` are searched first, and the whole table only when they hold fewer than
    ``limit`` matches: the same rows, as every alert left out is older than all those read.
    PostgreSQL cannot tell how often a text occurs and read every alert for the newest 50
    matches of a common word (0.45 s of 300,000 alerts)."""
    stmt = _newest_statement(time_column, conditions, limit)
    if grep and limit:
        bound = _probe_bound(conn, time_column)
        if bound is not None:
            rows = _rows(conn, stmt.where(time_column >= bound))
            if len(rows) >= limit:
                return rows
    return _rows(conn, stmt)


def _newest_statement(
    time_column: sa.ColumnElement[Any], conditions: list[Any], limit: int | None
) -> sa.Select[Any]:
    """The query of :func:`_newest_alerts` (without its ``grep`` probe)."""
    return (
        sa.select(alerts)
        .where(*conditions)
        .order_by(time_column.desc(), alerts.c.score.desc(), alerts.c.id.desc())
        .limit(limit)
    )


def _probe_bound(conn: sa.Connection, time_column: sa.ColumnElement[Any]) -> Any:
    """The time of the ``GREP_PROBE_ROWS``-th newest alert by ``time_column`` (``None`` when
    there are fewer): the oldest a ``grep`` probe reads (:func:`_newest_alerts`)."""
    newest = sa.select(time_column).where(time_column.is_not(None))
    probe = newest.order_by(time_column.desc()).offset(GREP_PROBE_ROWS - 1).limit(1)
    return conn.execute(probe).scalar()


def stream_alerts(
    conn: sa.Connection,
    since: datetime | None = None,
    until: datetime | None = None,
    kinds: Sequence[str] | None = None,
    streams: Sequence[str] | None = None,
    min_score: float | None = None,
    limit: int | None = 100,
    time_field: AlertTime = "created",
    text: str | None = None,
    min_documents: int | None = None,
) -> Generator[dict[str, Any], None, None]:
    """The rows of :func:`fetch_alerts` (the same filters), in its order, fetched a batch at a
    time as they are read (:func:`~.query_parts._stream_rows`); close it to stop early."""
    conditions = _alert_conditions(
        conn, since, until, kinds, streams, min_score, time_field, text, min_documents
    )
    grep = bool(text)
    if time_field == "created":
        yield from _stream_newest(conn, alerts.c.created_at, conditions, limit, grep)
        return
    # as fetch_alerts: the timed alerts first, then those without a time
    timed_conditions = [*conditions, alerts.c.event_time.is_not(None)]
    timed = 0
    for row in _stream_newest(conn, alerts.c.event_time, timed_conditions, limit, grep):
        timed += 1
        yield row
    if (limit is not None and timed >= limit) or since is not None or until is not None:
        return
    left = None if limit is None else limit - timed
    untimed = [*conditions, alerts.c.event_time.is_(None)]
    yield from _stream_newest(conn, alerts.c.event_time, untimed, left)


def _stream_newest(
    conn: sa.Connection,
    time_column: sa.ColumnElement[Any],
    conditions: list[Any],
    limit: int | None,
    grep: bool = False,
) -> Generator[dict[str, Any], None, None]:
    """The rows of :func:`_newest_alerts`, streamed. With ``grep`` the probe's matches (the
    newest ``GREP_PROBE_ROWS`` alerts') go out as they are read; when they are fewer than
    ``limit`` the whole table's matches follow from where they end (OFFSET: the probe's are
    its first rows, every alert it left out being older than all those it read)."""
    stmt = _newest_statement(time_column, conditions, limit)
    if grep and limit:
        bound = _probe_bound(conn, time_column)
        if bound is not None:
            sent = 0
            for row in _stream_rows(conn, stmt.where(time_column >= bound)):
                sent += 1
                yield row
            if sent >= limit:
                return
            if sent:
                stmt = stmt.offset(sent).limit(limit - sent)
    yield from _stream_rows(conn, stmt)


def _alert_conditions(
    conn: sa.Connection,
    since: datetime | None,
    until: datetime | None,
    kinds: Sequence[str] | None,
    streams: Sequence[str] | None,
    min_score: float | None,
    time_field: AlertTime,
    text: str | None = None,
    min_documents: int | None = None,
) -> list[Any]:
    time_column = alerts.c.created_at if time_field == "created" else alerts.c.event_time
    conditions = [
        *_between(time_column, since, until),
        *_in(alerts.c.kind, kinds),
        *_in(alerts.c.stream, streams),
        *_contains(conn, alerts.c.summary, text),
    ]
    if min_score is not None:
        conditions.append(alerts.c.score >= min_score)
    if min_documents is not None:
        conditions.append(sa.func.coalesce(alerts.c.n_documents, 1) >= min_documents)
    return conditions


def fetch_pending_alerts(
    conn: sa.Connection,
    topic: str | None,
    streams: Sequence[str] | None,
    kinds: Sequence[str] | None,
    after_id: int,
    limit: int,
    older_than_s: float | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` alerts pending publication to ``topic`` (``publish_topic``; any topic
    when ``None``; of ``streams`` and ``kinds``, stored more than ``older_than_s`` seconds ago,
    any when ``None``) with ``id`` above ``after_id``, by ``id``: a stream's alerts in the order
    they were stored. The partial index ``ix_alerts_pending`` holds only the pending ones.

    The age is by the clock ``created_at`` was taken from: on PostgreSQL the server's
    (:meth:`~.store.StoreTx.insert_alerts`), so a writer whose own clock is off sweeps neither
    early nor late; on SQLite this host's."""
    pending = alerts.c.publish_topic
    conditions = [pending.is_not(None) if topic is None else pending == topic]
    conditions.append(alerts.c.id > after_id)
    if older_than_s is not None:
        if conn.dialect.name == "postgresql":
            now = conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one()
        else:
            now = datetime.now(UTC)
        conditions.append(alerts.c.created_at < now - timedelta(seconds=older_than_s))
    if streams is not None:
        conditions.append(alerts.c.stream.in_(list(streams)))
    if kinds is not None:
        conditions.append(alerts.c.kind.in_(list(kinds)))
    stmt = sa.select(alerts).where(*conditions).order_by(alerts.c.id).limit(limit)
    return _rows(conn, stmt)


def count_pending_alerts(conn: sa.Connection) -> int:
    """How many alerts are pending publication (through ``ix_alerts_pending``)."""
    pending = alerts.c.publish_topic.is_not(None)
    stmt = sa.select(sa.func.count()).select_from(alerts).where(pending)
    return int(conn.execute(stmt).scalar_one())


def fetch_story_alerts(
    conn: sa.Connection, subject: str, streams: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The ``novel_document`` alerts whose subject (the story's lead document) is ``subject``,
    one per stream at most (of ``streams``, default all), by stream."""
    stmt = (
        sa.select(alerts)
        .where(
            alerts.c.kind == "novel_document",
            alerts.c.subject_id == subject,
            *_in(alerts.c.stream, streams),
        )
        .order_by(alerts.c.stream)
    )
    return _rows(conn, stmt)
