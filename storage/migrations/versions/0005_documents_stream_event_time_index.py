"""An index on documents (stream, event_time): ``sparsewatch documents --stream S``.

The query orders by event time, then stream and id; the index on (stream, window_seq) found the
stream's rows but not in that order, so both databases sorted all of them for the first 50 (SQLite,
3,000,000 documents in 3 streams: 0.3-1.9 s; PostgreSQL read the event-time index and skipped the
other streams' rows, slower the more streams there are). With this index the rows come in order,
also with ``--since``/``--until`` (a range of it).

SQLite has no planner statistics unless ``ANALYZE`` gathers them; without them it prefers this
index, for its order, to (stream, window_seq) for ``documents --stream S --window W`` and reads the
stream up to the window. So on SQLite the upgrade also runs ``ANALYZE`` (seconds on millions of
documents, in the migration's transaction; ``sparsewatch db prune`` and ``db upgrade`` run it
again, and the workers' writers as the documents grow). PostgreSQL's autovacuum keeps its
statistics.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

INDEX = "ix_documents_stream_event_time"


def upgrade() -> None:
    # IF NOT EXISTS: benchmarks/storage.md suggested creating it by hand under this name
    op.create_index(INDEX, "documents", ["stream", "event_time"], if_not_exists=True)
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ANALYZE")


def downgrade() -> None:
    op.drop_index(INDEX, table_name="documents", if_exists=True)
