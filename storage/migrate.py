"""Alembic, driven from code: :func:`upgrade` to the newest revision, :func:`current_revision`.

No ``alembic.ini`` is needed: the script location is the ``migrations`` folder of this package. The
upgrade runs in ONE transaction on a connection of the caller's engine that first takes a
database-wide lock (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL), so processes
that open an empty database at the same moment apply the migrations exactly once.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sparsewatch.storage.engine import write_connection

from sparsewatch.errors import SparsewatchError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_LOCK_ID = 0x5BA45E
# The table holding the schema revision: sparsewatch's own, so that a database shared with another
# Alembic application keeps that application's ``alembic_version`` (sparsewatch stamped its
# revision there until 2026-11-30, and took another application's revision for a newer
# sparsewatch's). A database of those versions has its revision moved on its next upgrade.
VERSION_TABLE = "sparsewatch_alembic_version"
LEGACY_VERSION_TABLE = "alembic_version"
# a table every revision has: with it, a legacy version table is sparsewatch's
_OWN_TABLE = "windows"


def alembic_config() -> Config:
    """An Alembic configuration pointing at the packaged migrations."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str:
    """The newest revision of the packaged migrations."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found in {MIGRATIONS}")
    return head


def is_older_revision(revision: str | None) -> bool:
    """Whether ``revision`` is one of the packaged migrations' other than the newest (a database
    at it is behind and :func:`upgrade` would change it); ``False`` for ``None`` (an empty
    database) and for a revision the migrations do not know (a newer sparsewatch's)."""
    if revision is None:
        return False
    script = ScriptDirectory.from_config(alembic_config())
    return _is_known(script, revision) and revision != script.get_current_head()


def _is_known(script: ScriptDirectory, revision: str) -> bool:
    """Whether ``revision`` is one of the packaged migrations'."""
    try:
        script.get_revision(revision)
    except CommandError:
        return False
    return True


def revision_state(engine: sa.Engine) -> tuple[str | None, bool]:
    """The revision the database is at (``None`` for a database without sparsewatch's tables)
    and whether it is still in ``alembic_version`` (sparsewatch before 2026-11-30;
    :func:`upgrade` moves it to :data:`VERSION_TABLE`), read on one connection."""
    with engine.connect() as conn:
        stored = _stored_revision(conn)
        if stored is not None:
            return stored, False
        legacy = _legacy_revision(conn)
        return legacy, legacy is not None


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at, wherever it is kept (:func:`revision_state`)."""
    return revision_state(engine)[0]


def _stored_revision(conn: sa.Connection) -> str | None:
    return MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()


def _legacy_revision(conn: sa.Connection) -> str | None:
    """sparsewatch's revision in ``alembic_version``: only beside sparsewatch's tables (another
    application's version table is not sparsewatch's business)."""
    if not sa.inspect(conn).has_table(_OWN_TABLE):
        return None
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Apply the missing migrations up to ``revision`` atomically (a legacy version table moved
    first, in the same transaction)."""
    config = alembic_config()
    with write_connection(engine) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK_ID})")
        _move_legacy_version(conn)
        _refuse_unknown_revision(conn, config)
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def _move_legacy_version(conn: sa.Connection) -> None:
    """sparsewatch's revision from ``alembic_version`` into :data:`VERSION_TABLE`, and the legacy
    table dropped (it held nothing else: Alembic keeps one row per branch head)."""
    legacy = None if _stored_revision(conn) is not None else _legacy_revision(conn)
    if legacy is None:
        return
    script = ScriptDirectory.from_config(alembic_config())
    if not _is_known(script, legacy):
        return  # not a revision of these migrations: refused as such (_refuse_unknown_revision)
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    context.stamp(script, legacy)
    conn.execute(sa.text(f"DROP TABLE {LEGACY_VERSION_TABLE}"))


def _refuse_unknown_revision(conn: sa.Connection, config: Config) -> None:
    """A one-line error when the database is at a revision the packaged migrations do not have
    (a newer sparsewatch wrote it, or, in the legacy table, another application): Alembic's own
    message named only the revision."""
    current = _stored_revision(conn)
    writer = "a newer sparsewatch"
    if current is None:
        current = _legacy_revision(conn)
        # (beside a table named like one of sparsewatch's: both may be another application's)
        writer = f"another application (in {LEGACY_VERSION_TABLE!r}) or {writer}"
    if current is None:
        return
    script = ScriptDirectory.from_config(config)
    if not _is_known(script, current):
        url = conn.engine.url.render_as_string(hide_password=True)
        raise SparsewatchError(
            f"the database {url} has schema revision {current!r}, which this version of "
            f"sparsewatch does not know (its newest is {script.get_current_head()!r}): it was "
            f"written by {writer}; use that version or another database"
        ) from None
