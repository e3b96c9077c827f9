"""Read-side queries behind ``sparsewatch alerts|documents|topics|snapshots|dead-letters|status``
and the demo.

Each function takes an open connection and returns plain dictionaries (JSON-ready apart from
datetimes), ordered deterministically so that scripts get stable output, and the same on both
databases: text in code point order (:func:`_text`), rows without a time after those with one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import numpy as np
import sqlalchemy as sa
from sparsewatch.storage.schema import (
    ALERT_KINDS,
    alerts,
    checkpoints,
    dead_letters,
    documents,
    partition_offsets,
    reason_pattern,
    snapshots,
    topics,
    windows,
)
from sparsewatch.storage.serialization import npz_to_arrays

AlertTime = Literal["created", "event"]


@dataclass(frozen=True)
class Snapshot:
    """A stored model snapshot with its arrays."""

    stream: str
    window_seq: int
    model_kind: str
    arrays: dict[str, np.ndarray]
    meta: dict
    vocabulary_version: int
    created_at: datetime


def _rows(conn: sa.Connection, stmt: sa.Executable) -> list[dict[str, Any]]:
    """The rows of ``stmt``, each as a dictionary of its columns."""
    return [dict(r) for r in conn.execute(stmt).mappings()]


def _in(column: sa.ColumnElement[Any], values: Sequence[Any] | None) -> list[Any]:
    return [column.in_(list(values))] if values else []


def _text(conn: sa.Connection, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """``column`` as a sort key in code point order: SQLite's order, and PostgreSQL's under the
    "C" collation (a database's own, such as en_US, orders "a" before "B" and skips "-")."""
    return column.collate("C") if conn.dialect.name == "postgresql" else column


# Python's str.lower() and ICU's lower() differ from the simple lowercase of each character only
# in these two: the full mapping lowers "İ" to "i" + U+0307 (two code points) and "Σ" at the end
# of a word to "ς". Replaced first, they leave the one-for-one simple mapping.
_NOT_SIMPLE = (("\u0130", "i"), ("\u03a3", "\u03c3"))


def fold_case(text: str) -> str:
    """``text`` with each character replaced by its Unicode simple lowercase, one code point for
    one (``İ`` -> ``i``, ``Σ`` -> ``σ`` wherever it stands, ``ẞ`` -> ``ß``; ``ß`` stays, not
    ``ss``): how ``--grep`` and ``--reason`` ignore case, the same on both databases."""
    for old, new in _NOT_SIMPLE:
        text = text.replace(old, new)
    return text.lower()


# Lowercase by the ICU root locale on PostgreSQL: the database's own lower() follows its
# LC_CTYPE (ASCII only under "C", "I" -> "ı" under a Turkish locale).
_PG_FOLD_COLLATION = "und-x-icu"


def _pg_fold_collation(conn: sa.Connection) -> str | None:
    """``_PG_FOLD_COLLATION`` where the server has it (built with ICU) and the database is UTF-8,
    else ``None`` (the database's lower()); asked once per pooled connection."""
    key = "sparsewatch_fold_collation"
    if key not in conn.info:
        query = sa.text(
            "SELECT getdatabaseencoding() = 'UTF8' AND EXISTS "
            "(SELECT 1 FROM pg_collation WHERE collname = :name AND collprovider = 'i')"
        )
        usable = conn.execute(query, {"name": _PG_FOLD_COLLATION}).scalar()
        conn.info[key] = _PG_FOLD_COLLATION if usable else None
    return conn.info[key]


def _contains(conn: sa.Connection, column: sa.ColumnElement[str], text: str | None) -> list[Any]:
    """``column`` contains ``text``, ignoring case as :func:`fold_case` does (SQLite's lower()
    is Python's, registered by the engine); ``%`` and ``_`` in it are plain characters.

    On SQLite :func:`_sqlite_like` comes first: its built-in LIKE, in C, leaves out most rows
    before the Python lower() is called for each (a word no row has: ``alerts --grep`` over
    300,000 summaries 0.53 -> 0.12 s, ``documents --grep`` over 3,000,000 texts 5.1 -> 1.6 s)."""
    if not text:
        return []
    folded: sa.ColumnElement[str] = column
    for old, new in _NOT_SIMPLE:
        folded = sa.func.replace(folded, old, new, type_=sa.Text)
    if conn.dialect.name == "postgresql" and (collation := _pg_fold_collation(conn)):
        folded = folded.collate(collation)
    contains = sa.func.lower(folded, type_=sa.Text).contains(fold_case(text), autoescape=True)
    if conn.dialect.name == "sqlite":
        return [column.like(_sqlite_like(fold_case(text)), escape="/"), contains]
    return [contains]


# The ASCII letters that fold_case() also makes of a character other than their two cases: "i"
# of "İ" (U+0130), "k" of the Kelvin sign (U+212A)
_FOLDED_FROM_ELSEWHERE = "ik"


def _sqlite_like(folded: str) -> str:
    """A LIKE pattern that every text containing ``folded`` (a :func:`fold_case` result) matches
    under SQLite's LIKE, which ignores the case of ASCII letters only: an ASCII character stands
    for itself in either case (``%``, ``_`` and the escape ``/`` escaped), any other (and the
    ASCII letters of :data:`_FOLDED_FROM_ELSEWHERE`) for any one character (``_``). A necessary
    condition only: the exact test follows it."""
    return f"%{''.join(map(_sqlite_like_char, folded))}%"


def _sqlite_like_char(char: str) -> str:
    if not char.isascii() or char in _FOLDED_FROM_ELSEWHERE:
        return "_"
    return "/" + char if char in "%_/" else char


def _between(column: Any, since: datetime | None, until: datetime | None) -> list[Any]:
    conditions = []
    if since is not None:
        conditions.append(column >= since)
    if until is not None:
        conditions.append(column < until)
    return conditions


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
) -> list[dict[str, Any]]:
    """Alerts in ``[since, until)`` of creation (or event) time, newest first (by event time:
    alerts without one last); ``text``: those whose summary contains it, ignoring case."""
    conditions = _alert_conditions(conn, since, until, kinds, streams, min_score, time_field, text)
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
    stmt = (
        sa.select(alerts)
        .where(*conditions)
        .order_by(time_column.desc(), alerts.c.score.desc(), alerts.c.id.desc())
        .limit(limit)
    )
    if grep and limit:
        newest = sa.select(time_column).where(time_column.is_not(None))
        probe = newest.order_by(time_column.desc()).offset(GREP_PROBE_ROWS - 1).limit(1)
        bound = conn.execute(probe).scalar()
        if bound is not None:
            rows = _rows(conn, stmt.where(time_column >= bound))
            if len(rows) >= limit:
                return rows
    return _rows(conn, stmt)


def _alert_conditions(
    conn: sa.Connection,
    since: datetime | None,
    until: datetime | None,
    kinds: Sequence[str] | None,
    streams: Sequence[str] | None,
    min_score: float | None,
    time_field: AlertTime,
    text: str | None = None,
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
    return conditions


@dataclass
class AlertFollower:
    """The alerts matching some filters as they are committed, each returned once, oldest first
    (``sparsewatch alerts --follow``; the filters are :func:`fetch_alerts`'s).

    An alert becomes visible when its transaction commits, which can be after alerts with a
    larger id or a later ``created_at`` (two workers writing at once; ``created_at`` is the
    writer's clock at insert time). So each :meth:`poll` reads the matching alerts with an id
    above the largest seen, and again those created at most ``grace_s`` before the newest seen,
    and returns the ones it has not returned yet. An alert is missed only if it became visible
    with a smaller id than one already seen *and* a ``created_at`` more than ``grace_s`` older
    than the newest seen. "Seen" counts every alert a look found visible, matching or not: what
    a poll reads is then what was committed since the last one (by the indexes of id and
    ``created_at``), however rarely the filters match (anchored on the matching alerts only, a
    poll read every alert above the newest match: the whole table, every look, when none
    matched).
    """

    kinds: Sequence[str] | None = None
    streams: Sequence[str] | None = None
    min_score: float | None = None
    since: datetime | None = None
    time_field: AlertTime = "created"
    text: str | None = None
    grace_s: float = 60.0
    _max_id: int | None = field(default=None, init=False)
    _newest: datetime | None = field(default=None, init=False)
    _seen: dict[int, datetime] = field(default_factory=dict, init=False)
    _started: bool = field(default=False, init=False)

    def start(self, conn: sa.Connection, backlog: int) -> list[dict[str, Any]]:
        """The ``backlog`` newest matching alerts, oldest first; everything visible now counts as
        returned, so :meth:`poll` returns only what is committed after."""
        self._seen, self._started = {}, True
        self._max_id, self._newest = _newest_alert(conn)
        self.poll(conn)
        rows = fetch_alerts(
            conn,
            since=self.since,
            kinds=self.kinds,
            streams=self.streams,
            min_score=self.min_score,
            limit=backlog,
            time_field=self.time_field,
            text=self.text,
        )
        self._remember(rows)
        return sorted(rows, key=lambda r: (r["created_at"], r["id"]))

    def poll(self, conn: sa.Connection) -> list[dict[str, Any]]:
        """The matching alerts committed since the last call (or :meth:`start`), oldest first."""
        if not self._started:
            raise RuntimeError("call start() before poll()")
        top = _newest_alert(conn)  # before the rows, which then include every match it saw
        recent = []
        if self._max_id is not None:
            recent.append(alerts.c.id > self._max_id)
        if self._newest is not None:
            recent.append(alerts.c.created_at >= self._newest - timedelta(seconds=self.grace_s))
        stmt = sa.select(alerts).where(*self._conditions(conn))
        if recent:
            stmt = stmt.where(sa.or_(*recent))
        rows = _rows(conn, stmt)
        fresh = sorted(
            (r for r in rows if r["id"] not in self._seen),
            key=lambda r: (r["created_at"], r["id"]),
        )
        self._remember(rows, top)
        return fresh

    def _conditions(self, conn: sa.Connection) -> list[Any]:
        return _alert_conditions(
            conn,
            self.since,
            None,
            self.kinds,
            self.streams,
            self.min_score,
            self.time_field,
            self.text,
        )

    def _remember(
        self, rows: Sequence[dict[str, Any]], top: tuple[int | None, datetime | None] = (None, None)
    ) -> None:
        """Mark ``rows`` returned, and them and ``top`` (the largest id and latest creation of
        all alerts, :func:`_newest_alert`) seen."""
        self._seen.update((r["id"], r["created_at"]) for r in rows)
        ids = [i for i in (self._max_id, top[0], *(r["id"] for r in rows)) if i is not None]
        times = [
            t for t in (self._newest, top[1], *(r["created_at"] for r in rows)) if t is not None
        ]
        self._max_id = max(ids, default=None)
        self._newest = max(times, default=None)
        if self._newest is not None:  # forget what no later poll can read again
            horizon = self._newest - timedelta(seconds=self.grace_s)
            self._seen = {i: t for i, t in self._seen.items() if t >= horizon}


def _newest_alert(conn: sa.Connection) -> tuple[int | None, datetime | None]:
    """The largest alert id and the latest ``created_at`` of all alerts (two index look-ups:
    one statement of both aggregates read the whole ``created_at`` index on SQLite)."""
    top_id = sa.select(sa.func.max(alerts.c.id)).scalar_subquery()
    top_created = sa.select(sa.func.max(alerts.c.created_at)).scalar_subquery()
    stmt = sa.select(top_id, sa.type_coerce(top_created, alerts.c.created_at.type))
    largest_id, latest = conn.execute(stmt).one()
    return largest_id, latest


def fetch_documents(
    conn: sa.Connection,
    streams: Sequence[str] | None = None,
    window_seq: int | None = None,
    novel_only: bool = False,
    anomalies_only: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    min_score: float | None = None,
    limit: int | None = 100,
    topic: int | None = None,
    text: str | None = None,
) -> list[dict[str, Any]]:
    """Documents by event time (then stream, id; rows without an event time, which an anomaly
    worker before this version created ahead of the detector, last); filters combine with AND.
    A row the detector has not written (yet, or ever: its window was pruned before a lagging
    anomaly worker scored it) has the event time and window of its scores message, no text.
    ``topic``: documents whose dominant topic or announced emerging topic is that
    ``topics.topic_id`` (an emerging_topic alert's ``topic-<id>``); ``text``: documents whose
    text contains it, ignoring case."""
    conditions = [
        *_in(documents.c.stream, streams),
        *_between(documents.c.event_time, since, until),
        *_contains(conn, documents.c.text, text),
    ]
    if window_seq is not None:
        conditions.append(documents.c.window_seq == window_seq)
    if novel_only:
        conditions.append(documents.c.novel.is_(True))
    if anomalies_only:
        conditions.append(documents.c.anomaly.is_(True))
    if min_score is not None:
        conditions.append(documents.c.novelty_score >= min_score)
    if topic is not None:
        conditions.append(
            sa.or_(documents.c.dominant_topic == topic, documents.c.emerging_topic == topic)
        )
    stmt = (
        sa.select(documents)
        .where(*conditions)
        .order_by(
            documents.c.event_time.nulls_last(),
            _text(conn, documents.c.stream),
            _text(conn, documents.c.doc_id),
        )
        .limit(limit)
    )
    return _rows(conn, stmt)


def fetch_topics(
    conn: sa.Connection,
    streams: Sequence[str] | None = None,
    first_window: int | None = None,
    last_window: int | None = None,
    emerging_only: bool = False,
    n_terms: int | None = None,
    limit: int | None = 100,
) -> list[dict[str, Any]]:
    """Topics of each window, newest window first, strongest topic first; ``n_terms`` top terms."""
    conditions = [*_in(topics.c.stream, streams)]
    if first_window is not None:
        conditions.append(topics.c.window_seq >= first_window)
    if last_window is not None:
        conditions.append(topics.c.window_seq <= last_window)
    if emerging_only:
        conditions.append(topics.c.emerging.is_(True))
    stmt = (
        sa.select(topics)
        .where(*conditions)
        .order_by(
            topics.c.window_seq.desc(),
            _text(conn, topics.c.stream),
            topics.c.strength.desc(),
            topics.c.topic_id,
        )
        .limit(limit)
    )
    rows = _rows(conn, stmt)
    if n_terms is not None:
        for row in rows:
            row["terms"] = row["terms"][:n_terms]
    return rows


def fetch_windows(
    conn: sa.Connection, streams: Sequence[str] | None = None, limit: int | None = 100
) -> list[dict[str, Any]]:
    """Closed windows, newest first."""
    stmt = (
        sa.select(windows)
        .where(*_in(windows.c.stream, streams))
        .order_by(windows.c.window_seq.desc(), _text(conn, windows.c.stream))
        .limit(limit)
    )
    return _rows(conn, stmt)


def fetch_snapshots(
    conn: sa.Connection,
    streams: Sequence[str] | None = None,
    model_kinds: Sequence[str] | None = None,
    limit: int | None = 100,
) -> list[dict[str, Any]]:
    """Snapshot descriptions (array shapes, sizes, metadata; no blob), newest window first."""
    columns = [c for c in snapshots.c if c.name != "blob"]
    stmt = (
        sa.select(*columns, sa.func.length(snapshots.c.blob).label("size_bytes"))
        .where(*_in(snapshots.c.stream, streams), *_in(snapshots.c.model_kind, model_kinds))
        .order_by(
            snapshots.c.window_seq.desc(),
            _text(conn, snapshots.c.stream),
            _text(conn, snapshots.c.model_kind),
        )
        .limit(limit)
    )
    return _rows(conn, stmt)


def load_snapshot(
    conn: sa.Connection, stream: str, model_kind: str, window_seq: int | None = None
) -> Snapshot | None:
    """The snapshot of ``stream``/``model_kind`` at ``window_seq`` (when ``None``, the newest:
    the last written, as window numbers go down when ``windows.size`` changes)."""
    conditions = [snapshots.c.stream == stream, snapshots.c.model_kind == model_kind]
    if window_seq is not None:
        conditions.append(snapshots.c.window_seq == window_seq)
    newest = (snapshots.c.created_at.desc(), snapshots.c.window_seq.desc())
    stmt = sa.select(snapshots).where(*conditions).order_by(*newest).limit(1)
    row = conn.execute(stmt).mappings().first()
    if row is None:
        return None
    return Snapshot(
        stream=row["stream"],
        window_seq=int(row["window_seq"]),
        model_kind=row["model_kind"],
        arrays=npz_to_arrays(row["blob"]),
        meta=row["meta"],
        vocabulary_version=int(row["vocabulary_version"]),
        created_at=row["created_at"],
    )


def _dead_letter_conditions(
    conn: sa.Connection,
    since: datetime | None,
    until: datetime | None,
    source_topics: Sequence[str] | None,
    reason: str | None,
) -> list[Any]:
    return [
        *_between(dead_letters.c.created_at, since, until),
        *_in(dead_letters.c.topic, source_topics),
        *_contains(conn, dead_letters.c.reason, reason),
    ]


# What the dead-letter queries return of a row: not the pattern, the summary's grouping key
_DEAD_LETTER_COLUMNS = [c for c in dead_letters.c if c.name != "reason_pattern"]


def fetch_dead_letters(
    conn: sa.Connection,
    since: datetime | None = None,
    until: datetime | None = None,
    source_topics: Sequence[str] | None = None,
    reason: str | None = None,
    limit: int | None = 100,
) -> list[dict[str, Any]]:
    """Dead letters (the messages the workers refused, with the original bytes as ``payload``)
    stored in ``[since, until)``, newest first, then by source topic, partition and offset;
    ``reason``: those whose reason contains this text, ignoring case."""
    stmt = (
        sa.select(*_DEAD_LETTER_COLUMNS)
        .where(*_dead_letter_conditions(conn, since, until, source_topics, reason))
        .order_by(
            dead_letters.c.created_at.desc(),
            _text(conn, dead_letters.c.topic),
            dead_letters.c.partition,
            dead_letters.c.offset,
        )
        .limit(limit)
    )
    return _rows(conn, stmt)


def dead_letter_reasons(
    conn: sa.Connection,
    since: datetime | None = None,
    until: datetime | None = None,
    source_topics: Sequence[str] | None = None,
    reason: str | None = None,
    limit: int | None = 100,
) -> list[dict[str, Any]]:
    """The dead letters counted by reason, with the numbers in a reason written ``N`` (a
    duplicate's first offset, a byte position, a size: :func:`reason_pattern`), most frequent
    first: ``reason`` (that pattern), ``count``, ``first_at`` / ``last_at`` (stored times),
    ``example`` (the newest reason of the pattern) and ``topics`` (the source topics).

    Counted in SQL by the stored pattern (:func:`_counts_by_pattern`) and, for rows an older
    version stored without one, by exact reason (:func:`_counts_by_reason`); the few groups are
    merged here by the pattern of their example."""
    conditions = _dead_letter_conditions(conn, since, until, source_topics, reason)
    groups: dict[str, dict[str, Any]] = {}
    for row in [
        *_counts_by_pattern(conn, conditions, reason),
        *_counts_by_reason(conn, conditions),
    ]:
        pattern = reason_pattern(row["reason"])
        group = groups.setdefault(
            pattern,
            {
                "reason": pattern,
                "count": 0,
                "first_at": row["first_at"],
                "last_at": row["last_at"],
                "example": row["reason"],
                "topics": set(),
            },
        )
        group["count"] += row["count"]
        group["topics"].add(row["topic"])
        group["first_at"] = min(group["first_at"], row["first_at"])
        if (row["last_at"], row["reason"]) > (group["last_at"], group["example"]):
            group["last_at"], group["example"] = row["last_at"], row["reason"]
    rows = sorted(groups.values(), key=lambda g: (-g["count"], g["reason"]))
    for row in rows:
        row["topics"] = sorted(row["topics"])
    return rows if limit is None else rows[:limit]


def _counts_by_pattern(
    conn: sa.Connection, conditions: list[Any], reason: str | None
) -> list[dict[str, Any]]:
    """Per stored pattern and topic of the rows meeting ``conditions``: ``count``,
    ``first_at``, ``last_at`` and as ``reason`` the newest reason (the greatest of those stored
    last), looked up by the index on (reason_pattern, topic, created_at)."""
    d = dead_letters.c
    groups = (
        sa.select(d.reason_pattern, d.topic, *_span())
        .where(*conditions, d.reason_pattern.is_not(None))
        .group_by(d.reason_pattern, d.topic)
        .subquery()
    )
    g = groups.c
    newest = dead_letters.alias("newest").c
    example = (
        sa.select(sa.func.max(_text(conn, newest.reason)))
        .where(
            newest.reason_pattern == g.reason_pattern,
            newest.topic == g.topic,
            newest.created_at == g.last_at,
            *_contains(conn, newest.reason, reason),
        )
        .scalar_subquery()
    )
    stmt = sa.select(example.label("reason"), g.topic, g.count, g.first_at, g.last_at)
    return _rows(conn, stmt)


def _counts_by_reason(conn: sa.Connection, conditions: list[Any]) -> list[dict[str, Any]]:
    """Per exact reason and topic of the rows meeting ``conditions`` that have no stored
    pattern (an older version's): ``count``, ``first_at``, ``last_at``."""
    d = dead_letters.c
    stmt = (
        sa.select(d.reason, d.topic, *_span())
        .where(*conditions, d.reason_pattern.is_(None))
        .group_by(d.reason, d.topic)
    )
    return _rows(conn, stmt)


def _span() -> tuple[sa.ColumnElement[Any], ...]:
    """A group of dead letters' ``count``, ``first_at`` and ``last_at``."""
    created = dead_letters.c.created_at
    return (
        sa.func.count().label("count"),
        sa.func.min(created).label("first_at"),
        sa.func.max(created).label("last_at"),
    )


def _count_if(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def stream_status(
    conn: sa.Connection, streams: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Per stream, in code point order: closed ``windows``, the ``last_window`` and its
    ``last_window_end`` (event time), stored ``documents`` with how many are ``novel``, ``late``
    and ``anomaly_scored`` / ``anomalies``, ``alerts`` by kind, and ``checkpoints`` (the newest
    checkpoint's time per consumer group)."""
    out: dict[str, dict[str, Any]] = {}

    def entry(stream: str) -> dict[str, Any]:
        return out.setdefault(
            stream,
            {
                "stream": stream,
                "windows": 0,
                "last_window": None,
                "last_window_end": None,
                "documents": 0,
                "novel": 0,
                "late": 0,
                "anomaly_scored": 0,
                "anomalies": 0,
                "alerts": dict.fromkeys(ALERT_KINDS, 0),
                "checkpoints": {},
            },
        )

    w = windows.c
    # the last window is the one that ends last: window numbers go down when windows.size
    # changes (max(window_seq) named an older window, shown with the newest one's end)
    rank = sa.func.row_number().over(
        partition_by=w.stream, order_by=(w.end_time.desc(), w.window_seq.desc())
    )
    ranked = (
        sa.select(
            w.stream,
            w.window_seq,
            w.end_time,
            sa.func.count().over(partition_by=w.stream).label("windows"),
            rank.label("rank"),
        )
        .where(*_in(w.stream, streams))
        .subquery()
    )
    r = ranked.c
    for row in conn.execute(
        sa.select(
            r.stream,
            r.windows,
            r.window_seq.label("last_window"),
            r.end_time.label("last_window_end"),
        ).where(r.rank == 1)
    ).mappings():
        entry(row["stream"]).update(row)
    d = documents.c
    for row in conn.execute(
        sa.select(
            d.stream,
            sa.func.count().label("documents"),
            _count_if(d.novel.is_(True)).label("novel"),
            _count_if(d.late.is_(True)).label("late"),
            sa.func.count(d.anomaly_score).label("anomaly_scored"),
            _count_if(d.anomaly.is_(True)).label("anomalies"),
        )
        .where(*_in(d.stream, streams))
        .group_by(d.stream)
    ).mappings():
        entry(row["stream"]).update({k: int(v) if k != "stream" else v for k, v in row.items()})
    a = alerts.c
    for stream, kind, count in conn.execute(
        sa.select(a.stream, a.kind, sa.func.count())
        .where(*_in(a.stream, streams))
        .group_by(a.stream, a.kind)
    ):
        entry(stream)["alerts"][kind] = int(count)
    c = checkpoints.c
    for group_id, stream, created_at in conn.execute(
        sa.select(c.group_id, c.stream, c.created_at).where(*_in(c.stream, streams))
    ):
        entry(stream)["checkpoints"][group_id] = created_at
    return [out[k] for k in sorted(out)]


def stored_offsets(conn: sa.Connection) -> list[dict[str, Any]]:
    """Each consumer group's stored resume offset per topic partition (where a restarted worker
    re-reads from), by group, topic and partition."""
    p = partition_offsets.c
    stmt = sa.select(partition_offsets).order_by(
        _text(conn, p.group_id), _text(conn, p.topic), p.partition
    )
    return _rows(conn, stmt)


def count_dead_letters(conn: sa.Connection) -> int:
    """How many dead letters are stored."""
    return int(conn.execute(sa.select(sa.func.count()).select_from(dead_letters)).scalar_one())
