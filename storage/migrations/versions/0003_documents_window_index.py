"""An index on documents.window_seq: ``sparsewatch documents --window W`` without ``--stream``.

The index on (stream, window_seq) serves only a query that names the stream: without one, both
databases read the documents in event-time order up to the window (a million-document database:
0.3 s for a middle window, the whole table for the last).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_documents_window_seq", "documents", ["window_seq"])


def downgrade() -> None:
    op.drop_index("ix_documents_window_seq", table_name="documents")
