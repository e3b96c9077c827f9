"""Throw-away PostgreSQL databases for the benchmarks: created with a unique name on the server of
an admin URL, dropped when the run that asked for one is done with it (also when it fails or is
interrupted), so that a server the benchmarks run against often (``SPARSEWATCH_TEST_DATABASE_URL``)
does not collect a database of about 100 MB per run.

A benchmark run as ``python benchmarks/X.py`` has ``benchmarks/`` first on ``sys.path``:
``from postgres_databases import postgres_database``. (The tests have their own copy,
``tests/support/postgres_databases.py``.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa


def _admin_execute(admin_url: str, sql: str) -> None:
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(sql))
    finally:
        engine.dispose()


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the server of ``admin_url`` for the ``with`` block;
    dropped when the block ends, however it ends (an error, Ctrl-C), ending the connections still
    open to it (a worker's process that outlived an interrupted run, an undisposed engine)."""
    name = f"sw_bench_{uuid.uuid4().hex[:10]}"
    url = sa.engine.make_url(admin_url).set(database=name)
    try:  # an interrupt right after CREATE DATABASE still drops it
        _admin_execute(admin_url, f'CREATE DATABASE "{name}"')
        yield url.render_as_string(hide_password=False)
    finally:
        _admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
