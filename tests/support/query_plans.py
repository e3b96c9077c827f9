"""The query plans (``EXPLAIN``) of the SELECT statements a query function runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa


def query_plan(conn: sa.Connection, query: Callable[[sa.Connection], Any]) -> str:
    """The query plans of the SELECT statements ``query`` runs, as one text."""
    statements: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT") and "pg_collation" not in statement:
            statements.append((statement, parameters))

    sa.event.listen(conn, "before_cursor_execute", capture)
    try:
        query(conn)
    finally:
        sa.event.remove(conn, "before_cursor_execute", capture)
    explain = "EXPLAIN QUERY PLAN " if conn.dialect.name == "sqlite" else "EXPLAIN "
    lines = []
    for statement, parameters in statements:
        lines += [str(r[-1]) for r in conn.exec_driver_sql(explain + statement, parameters)]
    return "\n".join(lines)
