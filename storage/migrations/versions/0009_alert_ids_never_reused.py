"""alerts: an id is never given twice on SQLite; the kind check named as the schema names it.

An alert's ``id`` orders ``alerts --follow`` (it prints the ids above the largest it saw) and names
the rows the alerts outbox marks sent. SQLite's plain ``INTEGER PRIMARY KEY`` gives a new row the
largest id + 1, so once ``db prune`` deleted the alert with the largest id (an orphan a lagging
anomaly worker wrote for a pruned window), the next alert took its id again: a follower that had
printed the deleted one skipped the new one, and a writer sending the deleted one marked the new
one sent, which then never went to the alerts topic. ``AUTOINCREMENT`` (a rebuild of the table on
SQLite) never gives an id twice, as PostgreSQL's sequence never did.

Revision 0001 named the check of ``kind`` ``ck_alerts_kind`` under the schema's naming convention,
which stored it as ``ck_alerts_ck_alerts_kind``; it is renamed to the schema's ``ck_alerts_kind``
so that a revision changing the kinds can drop it by that name on both databases.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

KINDS = "kind IN ('novel_document', 'anomaly', 'emerging_topic')"
STORED_NAME = "ck_alerts_ck_alerts_kind"
NAME = "ck_alerts_kind"


def upgrade() -> None:
    _rebuild(autoincrement=True, old=STORED_NAME, new=NAME)


def downgrade() -> None:
    _rebuild(autoincrement=False, old=NAME, new=STORED_NAME)


def _rebuild(autoincrement: bool, old: str, new: str) -> None:
    """On PostgreSQL a rename; on SQLite the table is copied (its indexes with it), as
    ``AUTOINCREMENT`` is part of the table's definition."""
    if op.get_bind().dialect.name != "sqlite":
        op.execute(f"ALTER TABLE alerts RENAME CONSTRAINT {old} TO {new}")
        return
    with op.batch_alter_table(
        "alerts", recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
    ) as batch:
        batch.drop_constraint(op.f(old), type_="check")  # op.f: the name as given, no convention
        batch.create_check_constraint(op.f(new), KINDS)
