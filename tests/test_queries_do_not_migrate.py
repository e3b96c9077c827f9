"""The commands that only read never migrate the schema, on real SQLite and PostgreSQL: a database
behind this version's revision is refused in one line naming ``sparsewatch db upgrade`` and left at
its revision. A query migrated it: DDL under the older workers still writing it (revision 0009
rebuilds SQLite's alerts table, seconds on a large one), and for a role that may only read it
failed with the driver's "attempt to write a readonly database" or "must be owner of table
alerts". The commands that write (``db upgrade``, ``db prune``) migrate it as before."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sparsewatch.storage import migrate
from sparsewatch.storage.engine import create_engine

from tests.support.cli import run_cli

OLD = "0008"
QUERIES = [
    ("alerts",),
    ("documents",),
    ("topics",),
    ("snapshots", "list"),
    ("status", "--no-kafka"),
    ("dead-letters",),
]


def _revision(url: str) -> str | None:
    engine = sa.create_engine(url)
    try:
        return migrate.current_revision(engine)
    finally:
        engine.dispose()


@pytest.fixture
def old_database(database_url: str) -> str:
    engine = sa.create_engine(database_url)
    try:
        migrate.upgrade(engine, OLD)
    finally:
        engine.dispose()
    return database_url


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q[0])
def test_a_query_refuses_an_older_schema_and_leaves_it(old_database, monkeypatch, capsys, query):
    code, out, err = run_cli(monkeypatch, capsys, *query, "--database-url", old_database)
    assert code == 2 and out == ""
    assert f"is at schema revision '{OLD}', older than this sparsewatch's" in err
    assert "run 'sparsewatch db upgrade'" in err and len(err.splitlines()) == 1
    assert _revision(old_database) == OLD


def test_a_read_only_sqlite_uri_names_the_upgrade_not_a_write_error(tmp_path, monkeypatch, capsys):
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")  # sparsewatch's: in WAL mode
    migrate.upgrade(engine, OLD)
    engine.dispose()
    url = f"sqlite:///file:{path}?mode=ro&uri=true"
    code, _, err = run_cli(monkeypatch, capsys, "alerts", "--database-url", url)
    assert code == 2 and "run 'sparsewatch db upgrade'" in err
    assert "readonly" not in err


def test_the_commands_that_write_migrate_it(old_database, monkeypatch, capsys):
    args = ("--database-url", old_database)
    code, _, err = run_cli(monkeypatch, capsys, "db", "prune", "--before", "1d", *args)
    assert code == 0, err
    assert _revision(old_database) == migrate.head_revision()
    code, _, err = run_cli(monkeypatch, capsys, "alerts", *args)
    assert code == 0 and err == ""
