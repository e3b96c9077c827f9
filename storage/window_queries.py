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
    down when ``windows.size`` grows), strongest topic first; ``n_terms`` top terms."""
    conditions = [*_in(topics.c.stream, streams)]
    if first_window is not None:
        conditions.append(topics.c.window_seq >= first_window)
    if last_window is not None:
        conditions.append(topics.c.window_seq <= last_window)
    if emerging_only:
        conditions.append(topics.c.emerging.is_(True))
    w = windows.c
    of_window = (w.stream == topics.c.stream) & (w.window_seq == topics.c.window_seq)
    stmt = (
        sa.select(topics)
        .select_from(topics.outerjoin(windows, of_window))
        .where(*conditions)
        .order_by(
            *newest_window_first(conn, w.end_time, topics.c.window_seq, topics.c.stream),
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
