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
    try:
        script.get_revision(revision)
    except CommandError:
        return False
    return revision != script.get_current_head()


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at (``None`` for an empty database)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Apply the missing migrations up to ``revision`` atomically."""
    config = alembic_config()
    with write_connection(engine) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK_ID})")
        _refuse_unknown_revision(conn, config)
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def _refuse_unknown_revision(conn: sa.Connection, config: Config) -> None:
    """A one-line error when the database is at a revision the packaged migrations do not have
    (a newer sparsewatch wrote it): Alembic's own message named only the revision."""
    current = MigrationContext.configure(conn).get_current_revision()
    if current is None:
        return
    script = ScriptDirectory.from_config(config)
    try:
        script.get_revision(current)
    except CommandError:
        url = conn.engine.url.render_as_string(hide_password=True)
        raise SparsewatchError(
            f"the database {url} has schema revision {current!r}, which this version of "
            f"sparsewatch does not know (its newest is {script.get_current_head()!r}): it was "
            "written by a newer sparsewatch; use that version or another database"
        ) from None
