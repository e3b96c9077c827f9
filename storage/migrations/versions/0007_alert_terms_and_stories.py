"""alerts.terms: the terms that explain an alert, as ``[term, weight]`` pairs.

A ``novel_document`` alert names the document's terms of largest unexplained mass (the residual of
its l1 code, :mod:`sparsewatch.models.unexplained`): why it scored as novel. An ``emerging_topic``
alert names its topic's top terms with their weights (as its ``topics`` row does). Anomaly alerts,
and the alerts stored before this revision, have none (NULL). Adding a nullable column changes no
stored row, on either database.

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


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:  # SQLite: the table is copied
        batch.drop_column("terms")
