"""What the read-side queries share: a statement's rows as dictionaries (:func:`_rows`, or
fetched a batch at a time: :func:`_stream_rows`), the conditions of a list of values
(:func:`_in`) and of a time range (:func:`_between`), and the sort key of text (:func:`_text`).

Each query (:mod:`~sparsewatch.storage.alert_queries`,
:mod:`~sparsewatch.storage.document_queries`, :mod:`~sparsewatch.storage.window_queries`,
:mod:`~sparsewatch.storage.snapshot_queries`, :mod:`~sparsewatch.storage.dead_letter_queries`,
:mod:`~sparsewatch.storage.status_queries`) takes an open connection and returns plain
dictionaries (JSON-ready apart from datetimes), ordered deterministically so that scripts get
stable output, and the same on both databases: text in code point order (:func:`_text`), rows
without a time after those with one.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa


def _rows(conn: sa.Connection, stmt: sa.Executable) -> list[dict[str, Any]]:
    """The rows of ``stmt``, each as a dictionary of its columns."""
    return [dict(r) for r in conn.execute(stmt).mappings()]


# How many rows a streamed query (:func:`_stream_rows`) fetches at a time
STREAM_BATCH_ROWS = 1000


def _stream_rows(conn: sa.Connection, stmt: sa.Executable) -> Generator[dict[str, Any], None, None]:
    """The rows of ``stmt`` as :func:`_rows` gives them, fetched :data:`STREAM_BATCH_ROWS` at a
    time as they are read: a server-side cursor on PostgreSQL (inside the connection's
    transaction, so in its snapshot), SQLite's own cursor stepped row by row. An export of a
    million rows held them all as dictionaries at once. The cursor stays open until the rows
    are read or the iterator is closed (``close()``, as :class:`~.store.Store`'s streamed
    queries do when their block ends)."""
    options = {"stream_results": True, "yield_per": STREAM_BATCH_ROWS}
    with conn.execute(stmt, execution_options=options) as result:
        for row in result.mappings():
            yield dict(row)


def _in(column: sa.ColumnElement[Any], values: Sequence[Any] | None) -> list[Any]:
    return [column.in_(list(values))] if values else []


def _between(column: Any, since: datetime | None, until: datetime | None) -> list[Any]:
    conditions = []
    if since is not None:
        conditions.append(column >= since)
    if until is not None:
        conditions.append(column < until)
    return conditions


def _text(conn: sa.Connection, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """``column`` as a sort key in code point order: SQLite's order, and PostgreSQL's under the
    "C" collation (a database's own, such as en_US, orders "a" before "B" and skips "-")."""
    return column.collate("C") if conn.dialect.name == "postgresql" else column
