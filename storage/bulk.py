"""Bulk upserts without SQLAlchemy's per-row parameter machinery.

A window writes about a thousand document rows. SQLAlchemy's ``executemany`` spends more time
building per-row parameter dictionaries than the database spends inserting them, so the hot writes
compile their statement once per dialect and hand the driver pre-processed values directly:

* SQLite: one ``executemany`` of tuples (the column types' own bind processors applied, so values
  are stored exactly as SQLAlchemy would store them);
* PostgreSQL: ONE statement, ``INSERT ... SELECT * FROM unnest(%(col)s::type[], ...) ON CONFLICT
  ...``, with one array parameter per column (a single round trip and a single plan).

The ``ON CONFLICT`` clause is SQLAlchemy's own compilation of the caller's statement. On
PostgreSQL a statement must not upsert the same key twice, so callers pass unique keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

Processor = Callable[[Any], Any] | None
_CACHE: dict[tuple[str, str, tuple[str, ...]], tuple[str, list[str], list[Processor]]] = {}


def _compile(
    dialect: sa.Dialect, stmt: Any, table: sa.Table, names: Sequence[str]
) -> tuple[str, list[str], list[Processor]]:
    compiled = stmt.compile(dialect=dialect, column_keys=list(names))
    if dialect.name == "postgresql":
        quote = dialect.identifier_preparer.quote
        tail = compiled.string[compiled.string.index(" ON CONFLICT") :]
        casts = ", ".join(
            f"%({name})s::{table.c[name].type.compile(dialect=dialect)}[]" for name in names
        )
        columns = ", ".join(quote(name) for name in names)
        sql = f"INSERT INTO {quote(table.name)} ({columns}) SELECT * FROM unnest({casts}){tail}"
        order = list(names)
    else:
        sql = compiled.string
        order = list(compiled.positiontup or ())
        if sorted(order) != sorted(names):
            raise RuntimeError(f"unexpected parameters {order} for columns {list(names)}")
    processors = [
        table.c[name].type.dialect_impl(dialect).bind_processor(dialect) for name in order
    ]
    return sql, order, processors


def bulk_execute(
    conn: sa.Connection, key: str, stmt: Any, table: sa.Table, rows: Sequence[dict[str, Any]]
) -> None:
    """Execute the INSERT ... ON CONFLICT ``stmt`` (of ``table``) for ``rows`` (same keys each).

    ``key`` names the statement for the compilation cache (one statement shape per key).
    """
    if not rows:
        return
    names = tuple(rows[0])
    cache_key = (conn.dialect.name, key, names)
    cached = _CACHE.get(cache_key)
    if cached is None:
        cached = _CACHE[cache_key] = _compile(conn.dialect, stmt, table, names)
    sql, order, processors = cached
    columns = []
    for name, process in zip(order, processors, strict=True):
        values = [row[name] for row in rows]
        columns.append([process(v) for v in values] if process is not None else values)
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(sql, dict(zip(order, columns, strict=True)))
    else:
        conn.exec_driver_sql(sql, list(zip(*columns, strict=True)))
