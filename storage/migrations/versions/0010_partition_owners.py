"""partition_owners: a worker whose partitions went to another member stores nothing more.

A worker that lost its partitions without a revocation (its session expired: a long stall, a
network partition from the broker but not from the database) went on writing: the transaction in
flight, and those of the windows it computed before it learnt of the loss, replaced the new
owner's checkpoints and resume offsets with older ones (last write wins), and a restart of the
new owner re-read from there. Now a worker claims each partition the group assigns it, with a
token of its own, in a transaction of its own before it reads the resume offsets; each of its
transactions first locks the rows of the partitions it writes for and stores nothing once one
of them names another owner (:meth:`sparsewatch.storage.store.StoreTx.check_owners`).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sparsewatch.storage.types import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "partition_owners",
        sa.Column("group_id", sa.String(200), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("claimed_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "topic", "partition", name="pk_partition_owners"),
    )


def downgrade() -> None:
    op.drop_table("partition_owners")
