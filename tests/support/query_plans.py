"""The query plans (``EXPLAIN``) of the statements a query function runs, and the indexes a table
has."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa


def statement_plans(conn: sa.Connection, query: Callable[[sa.Connection], Any]) -> list[str]:
    """The plans of the SELECT (and WITH ... SELECT) statements ``query`` runs, one text each
    (PostgreSQL's own catalogue lookups left out)."""
    captured: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("SELECT", "WITH")) and (
            "pg_collation" not in statement
        ):
            captured.append((statement, parameters))

    sa.event.listen(conn, "before_cursor_execute", capture)
    try:
        query(conn)
    finally:
        sa.event.remove(conn, "before_cursor_execute", capture)
    explain = "EXPLAIN QUERY PLAN " if conn.dialect.name == "sqlite" else "EXPLAIN "
    return [
        "\n".join(str(r[-1]) for r in conn.exec_driver_sql(explain + sql, params))
        for sql, params in captured
    ]


def query_plan(conn: sa.Connection, query: Callable[[sa.Connection], Any]) -> str:
    """The query plans of the statements ``query`` runs, as one text."""
    return "\n".join(statement_plans(conn, query))


def indexes(engine: sa.Engine, table: str) -> dict[str, list[str]]:
    """The indexes of ``table``: their columns by name."""
    return {i["name"]: i["column_names"] for i in sa.inspect(engine).get_indexes(table)}
