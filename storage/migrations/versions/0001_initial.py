"""Initial schema: documents, windows, alerts, topics, snapshots, checkpoints, offsets, DLQ.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sparsewatch.storage.types import JSONText, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

STREAM = sa.String(200)


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("stream", STREAM, nullable=False),
        sa.Column("doc_id", sa.Text(), nullable=False),
        sa.Column("event_time", UTCDateTime()),
        sa.Column("window_seq", sa.BigInteger()),
        sa.Column("novelty_score", sa.Double()),
        sa.Column("reconstruction_error", sa.Double()),
        sa.Column("novel", sa.Boolean()),
        sa.Column("late", sa.Boolean()),
        sa.Column("dominant_topic", sa.Integer()),
        sa.Column("top_atoms", JSONText()),
        sa.Column("labels", JSONText()),
        sa.Column("text", sa.Text()),
        sa.Column("anomaly_score", sa.Double()),
        sa.Column("anomaly", sa.Boolean()),
        sa.PrimaryKeyConstraint("stream", "doc_id", name="pk_documents"),
    )
    op.create_index("ix_documents_stream_window_seq", "documents", ["stream", "window_seq"])
    op.create_index("ix_documents_novel_stream", "documents", ["novel", "stream"])
    op.create_index("ix_documents_event_time", "documents", ["event_time"])

    op.create_table(
        "windows",
        sa.Column("stream", STREAM, nullable=False),
        sa.Column("window_seq", sa.BigInteger(), nullable=False),
        sa.Column("start_time", UTCDateTime(), nullable=False),
        sa.Column("end_time", UTCDateTime(), nullable=False),
        sa.Column("n_documents", sa.Integer(), nullable=False),
        sa.Column("threshold", sa.Double()),
        sa.Column("timings", JSONText(), nullable=False),
        sa.Column("closed_by", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("stream", "window_seq", name="pk_windows"),
    )
    op.create_index("ix_windows_start_time", "windows", ["start_time"])

    op.create_table(
        "alerts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("stream", STREAM, nullable=False),
        sa.Column("subject_id", sa.Text(), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("window_seq", sa.BigInteger(), nullable=False),
        sa.Column("event_time", UTCDateTime()),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_alerts"),
        sa.UniqueConstraint(
            "kind", "stream", "subject_id", name="uq_alerts_kind_stream_subject_id"
        ),
        sa.CheckConstraint(
            "kind IN ('novel_document', 'anomaly', 'emerging_topic')", name="ck_alerts_kind"
        ),
    )
    op.create_index("ix_alerts_created_at", "alerts", ["created_at"])
    op.create_index("ix_alerts_kind_created_at", "alerts", ["kind", "created_at"])
    op.create_index("ix_alerts_stream_created_at", "alerts", ["stream", "created_at"])
    op.create_index("ix_alerts_score", "alerts", ["score"])
    op.create_index("ix_alerts_event_time", "alerts", ["event_time"])

    op.create_table(
        "topics",
        sa.Column("stream", STREAM, nullable=False),
        sa.Column("window_seq", sa.BigInteger(), nullable=False),
        sa.Column("topic_id", sa.Integer(), nullable=False),
        sa.Column("terms", JSONText(), nullable=False),
        sa.Column("strength", sa.Double(), nullable=False),
        sa.Column("emerging", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("stream", "window_seq", "topic_id", name="pk_topics"),
    )
    op.create_index("ix_topics_emerging_stream", "topics", ["emerging", "stream"])

    op.create_table(
        "snapshots",
        sa.Column("stream", STREAM, nullable=False),
        sa.Column("window_seq", sa.BigInteger(), nullable=False),
        sa.Column("model_kind", sa.String(64), nullable=False),
        sa.Column("shapes", JSONText(), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.Column("meta", JSONText(), nullable=False),
        sa.Column("vocabulary_version", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("stream", "window_seq", "model_kind", name="pk_snapshots"),
    )

    op.create_table(
        "checkpoints",
        sa.Column("group_id", sa.String(200), nullable=False),
        sa.Column("stream", STREAM, nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("meta", JSONText(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "stream", name="pk_checkpoints"),
    )
    if op.get_bind().dialect.name == "postgresql":
        # Rewritten every window: skip TOAST's pglz compression (measured: ~110 -> ~40 ms for a
        # 2 MB state); blobs are still moved out of line.
        op.execute("ALTER TABLE checkpoints ALTER COLUMN state SET STORAGE EXTERNAL")

    op.create_table(
        "partition_offsets",
        sa.Column("group_id", sa.String(200), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "topic", "partition", name="pk_partition_offsets"),
    )

    op.create_table(
        "dead_letters",
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition", "offset", name="pk_dead_letters"),
    )
    op.create_index("ix_dead_letters_created_at", "dead_letters", ["created_at"])


def downgrade() -> None:
    for table in (
        "dead_letters",
        "partition_offsets",
        "checkpoints",
        "snapshots",
        "topics",
        "alerts",
        "windows",
        "documents",
    ):
        op.drop_table(table)
