"""Alembic environment: runs on the connection (and inside the transaction) that
:func:`sparsewatch.storage.migrate.upgrade` hands over, so all revisions apply atomically."""

from __future__ import annotations

from alembic import context
from sparsewatch.storage.migrate import VERSION_TABLE
from sparsewatch.storage.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    version_table=VERSION_TABLE,
)
with context.begin_transaction():
    context.run_migrations()
