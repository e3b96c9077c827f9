"""NaN in the nullable score columns becomes NULL, as the current code writes a missing score.

Before the storage audit of 2026-11-24 (commit 694d63b) PostgreSQL stored NaN where the code
had no score (late documents read before the detector's warm-up ended: their novelty score and
reconstruction error), while SQLite, which has no NaN, stored NULL. On an upgraded PostgreSQL
database those rows then answered differently from rows the current code writes: NaN sorts above
every number there, so ``sparsewatch documents --min-score X`` listed them, and they came back as
``nan`` instead of ``None``. SQLite holds no NaN: nothing to do there. The NOT NULL score columns
(``alerts.score``, ``topics.strength``) never took NaN from the code: left as they are.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

NULLABLE_SCORES = {
    "documents": ("novelty_score", "reconstruction_error", "anomaly_score"),
    "windows": ("threshold",),
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in NULLABLE_SCORES.items():
        for column in columns:  # (PostgreSQL's NaN equals NaN)
            op.execute(f"UPDATE {table} SET {column} = NULL WHERE {column} = 'NaN'::float8")


def downgrade() -> None:
    """Nothing to undo: the older code reads NULL as a missing score too."""
