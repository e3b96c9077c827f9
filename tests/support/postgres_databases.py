"""Throw-away PostgreSQL databases on a test server: created with a unique name, dropped when the
test that asked for one ends, so that a developer's long-lived server
(``SPARSEWATCH_TEST_DATABASE_URL``) does not collect a database per test (thousands of them,
gigabytes on disk)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa


def require_postgres_server(admin_url: str | None) -> str:
    """``admin_url`` (the ``postgres_admin_url`` fixture's); without a server the calling test
    fails under CI (``CI`` set: PostgreSQL must be tested there) and is skipped, with the reason,
    elsewhere."""
    if admin_url:
        return admin_url
    if os.environ.get("CI"):
        pytest.fail("SPARSEWATCH_TEST_DATABASE_URL is not set: CI must test PostgreSQL")
    pytest.skip("no PostgreSQL server (set SPARSEWATCH_TEST_DATABASE_URL or run Docker)")


def _admin_execute(admin_url: str, sql: str) -> None:
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(sql))
    finally:
        engine.dispose()


def create_postgres_database(admin_url: str) -> str:
    """Create a uniquely named database on the server of ``admin_url`` and return its URL; the
    caller drops it (:func:`drop_postgres_database`)."""
    name = f"sw_test_{uuid.uuid4().hex[:12]}"
    _admin_execute(admin_url, f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(admin_url).set(database=name)
    return url.render_as_string(hide_password=False)


def drop_postgres_database(admin_url: str, url: str) -> None:
    """Drop the database of ``url``, ending the connections a test left open to it (its workers'
    processes, an undisposed engine)."""
    name = sa.engine.make_url(url).database
    _admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """A fresh database's URL for the ``with`` block; dropped after it."""
    url = create_postgres_database(admin_url)
    try:
        yield url
    finally:
        drop_postgres_database(admin_url, url)
