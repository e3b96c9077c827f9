"""alerts.publish_topic: the alerts topic is sent from the committed rows (an outbox).

A worker that publishes alerts (``kafka.publish_alerts``) sent a window's alerts to
``<prefix>.alerts`` before the transaction that stores them. A crash between the two redid the
window, and a window closed by the idle timer was redone with the documents that arrived
meanwhile: the topic then held alerts the table never stored. Now the transaction stores each
alert with the alerts topic it is for in ``publish_topic``, the writer sends the pending alerts
after the commit and clears the column; what a crash leaves pending is sent when a writer of that
topic starts. The topic, not a flag, says which writer sends it: pipelines of other prefixes may
share the database. A partial index finds the pending alerts without reading the others.

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
    op.add_column("alerts", sa.Column("publish_topic", sa.String(249)))
    pending = sa.text("publish_topic IS NOT NULL")
    op.create_index(
        INDEX, "alerts", ["publish_topic", "id"], postgresql_where=pending, sqlite_where=pending
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="alerts")
    with op.batch_alter_table("alerts") as batch:  # SQLite: the table is copied
        batch.drop_column("publish_topic")
