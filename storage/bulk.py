"""Bulk upserts without SQLAlchemy's per-row parameter machinery.

A window writes about a thousand document rows. SQLAlchemy's ``executemany`` spends more time
building per-row parameter dictionaries than the database spends inserting them, so the hot writes
compile their statement once per dialect and column set, apply the column types' own bind
processors column by column (values are stored exactly as SQLAlchemy would store them), and hand
the driver plain rows:

* SQLite: a tuple per row to ``executemany`` of ``INSERT ... VALUES ... ON CONFLICT ...``.
* PostgreSQL: ``COPY`` into a session-private staging table (``CREATE TEMPORARY TABLE ... ON
  COMMIT DELETE ROWS``: empty at every commit and rollback, invisible to other sessions; emptied
  before each call's rows too, as a transaction may write a table more than once), then one
  ``INSERT ... SELECT ... ORDER BY <primary key> ON CONFLICT ...``. psycopg formats COPY rows in C;
  its pipelined ``executemany`` ran a Python generator step per row, and the server planned and
  executed one statement per row. The ``ORDER BY`` keeps the rows' lock order (concurrent writers
  of the same rows lock them in one order).

Measured (``benchmarks/storage_write.py``, 1,000 documents): the SQLite path about 1.8x faster than
SQLAlchemy's ``executemany`` of the same statement; on PostgreSQL the COPY path against psycopg's
pipelined ``executemany`` in ``benchmarks/storage.md``. A single ``INSERT ... SELECT FROM
unnest(arrays)`` was tried on PostgreSQL earlier and was slower (psycopg escapes text arrays in
Python).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

Processor = Callable[[Any], Any] | None
Conflict = Callable[[Any], Any]
"""Adds the ON CONFLICT clause to a dialect's ``insert(table)`` (VALUES or from a SELECT)."""


@dataclass(frozen=True)
class _Staging:
    """PostgreSQL: the statements that fill a bulk upsert's staging table."""

    create: str
    clear: str
    copy: str


@dataclass(frozen=True)
class _Plan:
    """A compiled bulk upsert of one table and column set on one dialect."""

    order: list[str]  # the columns, in the order the rows are handed to the driver
    processors: list[Processor]
    sql: str  # SQLite: the INSERT with parameters; PostgreSQL: the INSERT ... SELECT
    staging: _Staging | None = None  # PostgreSQL only


_CACHE: dict[tuple[str, str, tuple[str, ...]], _Plan] = {}


def _processors(dialect: sa.Dialect, table: sa.Table, order: Sequence[str]) -> list[Processor]:
    return [table.c[name].type.dialect_impl(dialect).bind_processor(dialect) for name in order]


def _sqlite_plan(
    dialect: sa.Dialect, table: sa.Table, names: Sequence[str], conflict: Conflict
) -> _Plan:
    compiled = conflict(sqlite.insert(table)).compile(dialect=dialect, column_keys=list(names))
    order = list(compiled.positiontup) if compiled.positional else list(names)
    if sorted(order) != sorted(names):
        raise RuntimeError(f"unexpected parameters {order} for columns {list(names)}")
    return _Plan(order, _processors(dialect, table, order), compiled.string)


def _postgresql_plan(
    dialect: sa.Dialect, key: str, table: sa.Table, names: Sequence[str], conflict: Conflict
) -> _Plan:
    quote = dialect.identifier_preparer.quote
    digest = hashlib.sha256(",".join(names).encode()).hexdigest()[:10]
    staging = f"sw_staging_{key}_{digest}"
    columns = ", ".join(quote(n) for n in names)
    staged = sa.table(staging, *(sa.column(n) for n in names))
    keys = [staged.c[c.name] for c in table.primary_key.columns if c.name in names]
    select = sa.select(*(staged.c[n] for n in names)).order_by(*keys)
    stmt = conflict(postgresql.insert(table).from_select(list(names), select))
    compiled = stmt.compile(dialect=dialect)
    if compiled.params:
        raise RuntimeError(f"the bulk upsert of {table.name} has parameters: {compiled.params}")
    return _Plan(
        order=list(names),
        processors=_processors(dialect, table, names),
        sql=compiled.string,
        staging=_Staging(
            # Same column types as the table, no constraints: the INSERT checks those.
            create=(
                f"CREATE TEMPORARY TABLE IF NOT EXISTS {staging} ON COMMIT DELETE ROWS AS "
                f"SELECT {columns} FROM {quote(table.name)} WITH NO DATA"
            ),
            # The rows of an earlier call in this transaction (a job of several windows) would be
            # written again with these, and PostgreSQL refuses an INSERT that holds one key twice.
            clear=f"DELETE FROM {staging}",
            copy=f"COPY {staging} ({columns}) FROM STDIN",
        ),
    )


def bulk_upsert(
    conn: sa.Connection,
    key: str,
    table: sa.Table,
    rows: Sequence[dict[str, Any]],
    conflict: Conflict,
) -> None:
    """Insert ``rows`` (all with the same keys, no two with the same primary key) into ``table``
    (see :func:`bulk_upsert_columns`)."""
    if rows:
        columns = {name: [row[name] for row in rows] for name in rows[0]}
        bulk_upsert_columns(conn, key, table, columns, conflict)


def bulk_upsert_columns(
    conn: sa.Connection,
    key: str,
    table: sa.Table,
    columns: Mapping[str, Sequence[Any]],
    conflict: Conflict,
) -> None:
    """Insert the rows of ``columns`` (name to values, all of one length, no two rows with the
    same primary key) into ``table`` in the connection's transaction, resolving conflicts with
    existing rows by ``conflict``; ``key`` (an identifier) names the statement shape for the
    compilation cache."""
    names = tuple(columns)
    if not names or not len(columns[names[0]]):
        return
    dialect = conn.dialect
    cache_key = (dialect.name, key, names)
    plan = _CACHE.get(cache_key)
    if plan is None:
        if dialect.name == "postgresql":
            plan = _postgresql_plan(dialect, key, table, names, conflict)
        elif dialect.name == "sqlite":
            plan = _sqlite_plan(dialect, table, names, conflict)
        else:
            raise ValueError(f"unsupported database {dialect.name!r}")
        _CACHE[cache_key] = plan
    bound = []
    for name, process in zip(plan.order, plan.processors, strict=True):
        values = columns[name]
        bound.append([process(v) for v in values] if process is not None else values)
    if plan.staging is None:
        conn.exec_driver_sql(plan.sql, list(zip(*bound, strict=True)))
        return
    conn.exec_driver_sql(plan.staging.create)
    conn.exec_driver_sql(plan.staging.clear)
    _copy_rows(conn, plan.staging.copy, zip(*bound, strict=True))
    conn.exec_driver_sql(plan.sql)


def _copy_rows(conn: sa.Connection, copy_sql: str, rows: Iterable[tuple[Any, ...]]) -> None:
    """``COPY`` the rows into the staging table on the connection's own DBAPI connection (in its
    transaction); a driver error is raised as SQLAlchemy's wrapper of it, as every other
    statement's (:data:`sparsewatch.consumers.retry.TRANSIENT_DB_ERRORS` retries an outage)."""
    dbapi = conn.dialect.loaded_dbapi
    driver = conn.connection.driver_connection
    assert driver is not None, "an open connection holds its driver's"
    cursor = driver.cursor()
    try:
        with cursor.copy(copy_sql) as copy:
            for row in rows:
                copy.write_row(row)
    except dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(
            copy_sql, None, exc, dbapi.Error, dialect=conn.dialect
        ) from exc
    finally:
        cursor.close()
