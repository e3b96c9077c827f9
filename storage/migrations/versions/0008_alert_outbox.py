"""alerts.publish_pending: the alerts topic is sent from the committed rows (an outbox).

A worker that publishes alerts (``kafka.publish_alerts``) sent a window's alerts to
``<prefix>.alerts`` before the transaction that stores them. A crash between the two redid the
window, and a window closed by the idle timer was redone with the documents that arrived
meanwhile: the topic then held alerts the table never stored. Now the transaction stores each
alert with ``publish_pending`` true, the writer sends the pending alerts after the commit and
clears the flag; what a crash leaves pending is sent when a writer starts. A partial index finds
the pending alerts without reading the others.

The alerts stored before this revision are not pending (they were sent before their commit).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

INDEX = "ix_alerts_pending"


def upgrade() -> None:
    op.add_column(
        "alerts",
        sa.Column("publish_pending", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    # each predicate as the dialect writes the queries' condition (schema.alerts)
    op.create_index(
        INDEX,
        "alerts",
        ["id"],
        postgresql_where=sa.text("publish_pending"),
        sqlite_where=sa.text("publish_pending = 1"),
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="alerts")
    with op.batch_alter_table("alerts") as batch:  # SQLite: the table is copied
        batch.drop_column("publish_pending")
