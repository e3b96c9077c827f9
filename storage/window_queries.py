"""The results of each window: its topics (``sparsewatch topics``, :func:`fetch_topics`) and
the closed windows (:func:`fetch_windows`); conventions: :mod:`~sparsewatch.storage.query_parts`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sparsewatch.storage.query_parts import _in, _rows, _text
from sparsewatch.storage.schema import topics, windows


def fetch_topics(
    conn: sa.Connection,
    streams: Sequence[str] | None = None,
    first_window: int | None = None,
    last_window: int | None = None,
    emerging_only: bool = False,
    n_terms: int | None = None,
    limit: int | None = 100,
) -> list[dict[str, Any]]:
    """Topics of each window, newest window first (by its end in event time: window numbers go
    down when ``windows.size`` grows), strongest topic first; ``n_terms`` top terms. Topics
    whose window has no row come last, by window number (newest first) and stream.

    With a ``limit`` (and every topic, not ``emerging_only``), the topics of the newest
    ``limit`` windows are read first (:func:`_topics_of_newest_windows`); only when those fall
    short of ``limit`` (windows without topics among them, or fewer topics in all) is every
    topic joined to its window and sorted, as an ``emerging_only`` listing (the topics'
    ``emerging`` index selects its few rows) and one without a limit always are. No index serves
    an order by a window's end: at a million topics (40 a window) sorting them all cost
    ``--limit 50`` 1.5 s on SQLite, 0.9 s on PostgreSQL; sorting the windows, 0.1 and 0.03 s."""
    t, w = topics.c, windows.c
    rows: list[dict[str, Any]] | None = None
    if limit is not None and not emerging_only:
        of_windows = _window_range(w.stream, w.window_seq, streams, first_window, last_window)
        rows = _topics_of_newest_windows(conn, of_windows, limit)
        if len(rows) < limit:
            rows = None  # not conclusive: sorting them all
    if rows is None:
        conditions = _window_range(t.stream, t.window_seq, streams, first_window, last_window)
        if emerging_only:
            conditions.append(t.emerging.is_(True))
        of_window = (w.stream == t.stream) & (w.window_seq == t.window_seq)
        stmt = (
            sa.select(topics)
            .select_from(topics.outerjoin(windows, of_window))
            .where(*conditions)
            .order_by(
                *newest_window_first(conn, w.end_time, t.window_seq, t.stream),
                t.strength.desc(),
                t.topic_id,
            )
            .limit(limit)
        )
        rows = _rows(conn, stmt)
    if n_terms is not None:
        for row in rows:
            row["terms"] = row["terms"][:n_terms]
    return rows


def _topics_of_newest_windows(
    conn: sa.Connection, of_windows: list[sa.ColumnElement[bool]], limit: int
) -> list[dict[str, Any]]:
    """The first ``limit`` topics, in :func:`fetch_topics`'s order, of the newest ``limit``
    windows matching ``of_windows``: the first ``limit`` topics of all when there are that many
    (a window's topics are consecutive in that order, each window has at most one less than
    ``limit`` before it, and topics without a window come last). The windows are sorted, their
    topics read by the topics' primary key."""
    w, t = windows.c, topics.c
    newest = (
        sa.select(w.stream, w.window_seq, w.end_time)
        .where(*of_windows)
        .order_by(*newest_window_first(conn, w.end_time, w.window_seq, w.stream))
        .limit(limit)
        .subquery("newest")
    )
    n = newest.c
    stmt = (
        sa.select(topics)
        .select_from(newest.join(topics, (t.stream == n.stream) & (t.window_seq == n.window_seq)))
        .order_by(
            *newest_window_first(conn, n.end_time, n.window_seq, n.stream),
            t.strength.desc(),
            t.topic_id,
        )
        .limit(limit)
    )
    return _rows(conn, stmt)


def _window_range(
    stream: sa.ColumnElement[str],
    window_seq: sa.ColumnElement[int],
    streams: Sequence[str] | None,
    first_window: int | None,
    last_window: int | None,
) -> list[sa.ColumnElement[bool]]:
    """The conditions on a row's ``stream`` and ``window_seq`` of :func:`fetch_topics`'s
    filters."""
    conditions = [*_in(stream, streams)]
    if first_window is not None:
        conditions.append(window_seq >= first_window)
    if last_window is not None:
        conditions.append(window_seq <= last_window)
    return conditions


def fetch_windows(
    conn: sa.Connection, streams: Sequence[str] | None = None, limit: int | None = 100
) -> list[dict[str, Any]]:
    """Closed windows, newest first (by their end in event time)."""
    w = windows.c
    stmt = (
        sa.select(windows)
        .where(*_in(w.stream, streams))
        .order_by(*newest_window_first(conn, w.end_time, w.window_seq, w.stream))
        .limit(limit)
    )
    return _rows(conn, stmt)


def newest_window_first(
    conn: sa.Connection, end_time: Any, window_seq: Any, stream: Any
) -> tuple[Any, ...]:
    """Order by a window's end (unknown last: a row without its window), then number, then
    stream: the same on both databases (PostgreSQL puts NULL first in descending order)."""
    return (end_time.is_(None), end_time.desc(), window_seq.desc(), _text(conn, stream))
