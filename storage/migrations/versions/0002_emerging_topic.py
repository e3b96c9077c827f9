"""documents.emerging_topic: the announced emerging topic a document belongs to.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("documents", sa.Column("emerging_topic", sa.Integer()))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:  # SQLite: the table is copied
        batch.drop_column("emerging_topic")
