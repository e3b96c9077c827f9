"""alerts.terms, n_documents, related_ids: why an alert was raised and what it stands for.

A ``novel_document`` alert names the document's terms of largest unexplained mass (the residual of
its l1 code, :mod:`sparsewatch.models.unexplained`): why it scored as novel; it stands for a story,
the novel documents of its window alike to it (:mod:`sparsewatch.models.stories`), counted in
``n_documents`` with the others' ids in ``related_ids``. An ``emerging_topic`` alert names its
topic's top terms with their weights (as its ``topics`` row does) and counts the documents the
topic dominates. Anomaly alerts, and the alerts stored before this revision, have none (NULL).
Adding nullable columns changes no stored row, on either database.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sparsewatch.storage.types import JSONText

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("alerts", sa.Column("terms", JSONText()))
    op.add_column("alerts", sa.Column("n_documents", sa.Integer()))
    op.add_column("alerts", sa.Column("related_ids", JSONText()))


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:  # SQLite: the table is copied
        for column in ("related_ids", "n_documents", "terms"):
            batch.drop_column(column)
