"""sparsewatch keeps its schema revision in a table of its own, ``sparsewatch_alembic_version``.

It used Alembic's default ``alembic_version``: in a database shared with another Alembic
application (one PostgreSQL database for several services) every command refused the database
as "written by a newer sparsewatch" (the other application's revision), and where sparsewatch
came first it stamped its revision into the table the other application's ``alembic upgrade``
then could not read. A database of those versions has its revision moved on its next upgrade,
its data untouched."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from sparsewatch.storage import migrate
from sparsewatch.storage.store import MissingDatabaseError, Store

from tests.support.cli import run_cli
from tests.support.store_windows import T0, window

OTHER_REVISION = "ae1027a6acf"


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _scalar(url: str, sql: str) -> object:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar_one()
    finally:
        engine.dispose()


def _other_application(url: str) -> None:
    """Another Alembic application's tables: its ``alembic_version`` and a table of its own."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
        conn.execute(sa.text(f"INSERT INTO alembic_version VALUES ('{OTHER_REVISION}')"))
        conn.execute(sa.text("CREATE TABLE users (id INTEGER PRIMARY KEY)"))
    engine.dispose()


def _legacy_database(url: str, monkeypatch: pytest.MonkeyPatch, revision: str = "head") -> None:
    """A database as sparsewatch before 2026-11-30 set it up (its revision in alembic_version),
    with one window stored."""
    with monkeypatch.context() as patch:
        patch.setattr(migrate, "VERSION_TABLE", migrate.LEGACY_VERSION_TABLE)
        engine = sa.create_engine(url)
        migrate.upgrade(engine, revision)
        engine.dispose()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO windows (stream, window_seq, start_time, end_time, n_documents, "
                "timings, closed_by) VALUES ('s', 7, :t, :t, 3, '{}', 'watermark')"
            ),
            {"t": datetime(2026, 1, 1)},
        )
    engine.dispose()
    assert "sparsewatch_alembic_version" not in _tables(url)


def test_another_applications_version_table_is_left_alone(database_url, monkeypatch, capsys):
    _other_application(database_url)
    # a query: the database has no sparsewatch tables (it was "written by a newer sparsewatch")
    with pytest.raises(MissingDatabaseError, match="has no sparsewatch tables"):
        Store.open(database_url, create=False)
    # the workers (or db upgrade) set sparsewatch up beside the other application
    code, _, err = run_cli(monkeypatch, capsys, "db", "upgrade", "--database-url", database_url)
    assert code == 0, err
    assert {"windows", "documents", "sparsewatch_alembic_version", "users"} <= _tables(database_url)
    assert _scalar(database_url, "SELECT version_num FROM alembic_version") == OTHER_REVISION
    assert _scalar(database_url, "SELECT version_num FROM sparsewatch_alembic_version") == (
        migrate.head_revision()
    )
    code, _, err = run_cli(monkeypatch, capsys, "alerts", "--database-url", database_url)
    assert code == 0 and err == "", err


@pytest.mark.parametrize("revision", ["head", "0005"])
def test_a_database_of_earlier_versions_has_its_revision_moved(
    database_url, monkeypatch, capsys, revision
):
    _legacy_database(database_url, monkeypatch, revision)
    engine = sa.create_engine(database_url)
    expected = migrate.head_revision() if revision == "head" else revision
    assert migrate.revision_state(engine) == (expected, True)
    engine.dispose()
    # a query reads it as it is (its role may not have the right to move the revision) ...
    # (an older revision is refused by a query, which only reads: db upgrade migrates it)
    code, out, err = run_cli(
        monkeypatch, capsys, "status", "--no-kafka", "--database-url", database_url
    )
    if revision == "head":
        assert code == 0 and "windows: 1," in out, err
    else:
        assert code == 2 and "run 'sparsewatch db upgrade'" in err
    assert "sparsewatch_alembic_version" not in _tables(database_url)
    # ... a worker opening it moves it (db upgrade too); the data stays
    Store.open(database_url).dispose()
    tables = _tables(database_url)
    assert "sparsewatch_alembic_version" in tables and "alembic_version" not in tables
    assert _scalar(database_url, "SELECT version_num FROM sparsewatch_alembic_version") == (
        migrate.head_revision()
    )
    assert _scalar(database_url, "SELECT n_documents FROM windows WHERE window_seq = 7") == 3
    engine = sa.create_engine(database_url)
    assert migrate.revision_state(engine) == (migrate.head_revision(), False)
    engine.dispose()
    Store.open(database_url).dispose()  # and opens again as any database


def test_an_unknown_revision_in_the_legacy_table_names_both_possible_writers(database_url):
    """A legacy table beside a table named like sparsewatch's may be another application's."""
    _other_application(database_url)
    engine = sa.create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE windows (id INTEGER PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(Exception, match=r"another application \(in 'alembic_version'\) or a newer"):
        Store.open(database_url)
    assert _scalar(database_url, "SELECT version_num FROM alembic_version") == OTHER_REVISION


def test_a_postgresql_schema_of_its_own_beside_another_applications_tables(postgres_database):
    """The README's advice for a shared PostgreSQL database whose tables collide with
    sparsewatch's names: a schema of its own through the URL's ``options=-csearch_path=...``.
    Everything, the workers' staging-table writes included, stays in that schema."""
    url, _ = postgres_database
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE SCHEMA sw"))
        conn.execute(sa.text("CREATE TABLE public.documents (x INTEGER)"))  # the other one's
    engine.dispose()
    own = sa.engine.make_url(url).update_query_dict({"options": "-csearch_path=sw"})
    with Store.open(own.render_as_string(hide_password=False)) as store:
        window(store, "s", 3, T0, timedelta(hours=1), n=5)
        assert [d["doc_id"] for d in store.documents(limit=None)] == [f"s-3-{i}" for i in range(5)]
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        tables = conn.execute(
            sa.text("SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_schema IN ('public', 'sw')")
        ).all()  # fmt: skip
        assert conn.execute(sa.text("SELECT count(*) FROM public.documents")).scalar_one() == 0
    engine.dispose()
    assert ("public", "documents") in tables and ("sw", "documents") in tables
    assert {t for s, t in tables if s == "public"} == {"documents"}
    assert ("sw", "sparsewatch_alembic_version") in tables
