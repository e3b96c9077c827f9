"""The SQL schema (SQLAlchemy Core): what the workers write and the query commands read.

Every table has a natural primary key, so writes are idempotent upserts (see
:mod:`sparsewatch.storage.store`); alerts carry a surrogate ``id`` for stable ordering and a unique
natural key. The Alembic migrations in ``storage/migrations`` create exactly this schema (a test
compares them).
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sparsewatch.storage.types import JSONText, UTCDateTime
from sqlalchemy.engine.default import DefaultExecutionContext

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)

STREAM = sa.String(200)
DOC_ID = sa.Text()

ALERT_KINDS = ("novel_document", "anomaly", "emerging_topic")

documents = sa.Table(
    "documents",
    metadata,
    sa.Column("stream", STREAM, primary_key=True),
    sa.Column("doc_id", DOC_ID, primary_key=True),
    # Detector columns: NULL until the detector writes the row (the anomaly worker may come first).
    sa.Column("event_time", UTCDateTime()),
    sa.Column("window_seq", sa.BigInteger),
    sa.Column("novelty_score", sa.Double),
    sa.Column("reconstruction_error", sa.Double),
    sa.Column("novel", sa.Boolean),
    sa.Column("late", sa.Boolean),
    sa.Column("dominant_topic", sa.Integer),
    # the emerging topic (topics.topic_id of its window) the document belongs to, when one was
    # announced by an emerging_topic alert of that window
    sa.Column("emerging_topic", sa.Integer),
    sa.Column("top_atoms", JSONText()),
    sa.Column("labels", JSONText()),
    sa.Column("text", sa.Text),
    # Anomaly worker columns.
    sa.Column("anomaly_score", sa.Double),
    sa.Column("anomaly", sa.Boolean),
    sa.Index(None, "stream", "window_seq"),
    sa.Index(None, "window_seq"),  # documents --window without --stream (revision 0003)
    sa.Index(None, "novel", "stream"),
    sa.Index(None, "event_time"),
    sa.Index(None, "stream", "event_time"),  # documents --stream S in event-time order (0005)
)

windows = sa.Table(
    "windows",
    metadata,
    sa.Column("stream", STREAM, primary_key=True),
    sa.Column("window_seq", sa.BigInteger, primary_key=True),
    sa.Column("start_time", UTCDateTime(), nullable=False),
    sa.Column("end_time", UTCDateTime(), nullable=False),
    sa.Column("n_documents", sa.Integer, nullable=False),
    sa.Column("threshold", sa.Double),
    sa.Column("timings", JSONText(), nullable=False),
    sa.Column("closed_by", sa.String(32), nullable=False),
    sa.Index(None, "start_time"),
)

alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("stream", STREAM, nullable=False),
    sa.Column("subject_id", DOC_ID, nullable=False),
    sa.Column("score", sa.Double, nullable=False),
    sa.Column("window_seq", sa.BigInteger, nullable=False),
    sa.Column("event_time", UTCDateTime()),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    # revision 0007; NULL for anomalies and for alerts stored before it: [term, weight] pairs (a
    # novel document's unexplained terms, an emerging topic's top terms), the documents the
    # alert stands for (a novel story's, those an emerging topic dominates) and the ids of a
    # novel story's other documents
    sa.Column("terms", JSONText()),
    sa.Column("n_documents", sa.Integer),
    sa.Column("related_ids", JSONText()),
    # revision 0008: the alerts topic of the worker that stored it (kafka.publish_alerts) while it
    # is not yet sent there; the writer sends it after the commit and clears this (an outbox: the
    # topic carries only committed alerts). NULL once sent, without a topic, and for alerts
    # stored before the revision.
    sa.Column("publish_topic", sa.String(249)),
    sa.UniqueConstraint("kind", "stream", "subject_id"),
    sa.CheckConstraint(f"kind IN {ALERT_KINDS!r}", name="kind"),
    sa.Index(None, "created_at"),
    sa.Index(None, "kind", "created_at"),
    sa.Index(None, "stream", "created_at"),
    sa.Index(None, "score"),
    sa.Index(None, "event_time"),
    # the outbox's pending alerts only: a handful at any time, among millions sent
    sa.Index(
        "ix_alerts_pending",
        "publish_topic",
        "id",
        postgresql_where=sa.text("publish_topic IS NOT NULL"),
        sqlite_where=sa.text("publish_topic IS NOT NULL"),
    ),
    # revision 0009: SQLite never gives an id twice (a plain INTEGER PRIMARY KEY took the largest
    # + 1 again once ``db prune`` deleted the largest): ``--follow`` and the outbox go by id
    sqlite_autoincrement=True,
)

topics = sa.Table(
    "topics",
    metadata,
    sa.Column("stream", STREAM, primary_key=True),
    sa.Column("window_seq", sa.BigInteger, primary_key=True),
    sa.Column("topic_id", sa.Integer, primary_key=True),
    sa.Column("terms", JSONText(), nullable=False),
    sa.Column("strength", sa.Double, nullable=False),
    sa.Column("emerging", sa.Boolean, nullable=False),
    sa.Index(None, "emerging", "stream"),
)

snapshots = sa.Table(
    "snapshots",
    metadata,
    sa.Column("stream", STREAM, primary_key=True),
    sa.Column("window_seq", sa.BigInteger, primary_key=True),
    sa.Column("model_kind", sa.String(64), primary_key=True),
    sa.Column("shapes", JSONText(), nullable=False),
    sa.Column("blob", sa.LargeBinary, nullable=False),
    sa.Column("meta", JSONText(), nullable=False),
    sa.Column("vocabulary_version", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("group_id", sa.String(200), primary_key=True),
    sa.Column("stream", STREAM, primary_key=True),
    sa.Column("state", sa.LargeBinary, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("meta", JSONText(), nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
)

partition_offsets = sa.Table(
    "partition_offsets",
    metadata,
    sa.Column("group_id", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
)

# Which member of the group owns each partition (revision 0010): a worker claims its partitions
# when the group assigns them, with a token of its own, and each of its transactions stores
# nothing unless the tokens of the partitions it writes for are still its own. A member whose
# partitions the group gave to another (its session expired) is fenced off: it cannot rewind
# the new owner's checkpoints and resume offsets with its own older ones.
partition_owners = sa.Table(
    "partition_owners",
    metadata,
    sa.Column("group_id", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("owner", sa.String(64), nullable=False),
    sa.Column("claimed_at", UTCDateTime(), nullable=False),
)

_NUMBER = re.compile(r"(?<![\w-])\d+(?!\w)")  # not the 8 of "UTF-8"


def reason_pattern(reason: str) -> str:
    """``reason`` with its numbers written ``N``: what ``sparsewatch dead-letters --summary``
    counts by, stored with each dead letter (``dead_letters.reason_pattern``): a change to it
    needs a migration that computes the column again."""
    return _NUMBER.sub("N", reason)


def _reason_pattern_default(context: DefaultExecutionContext) -> str:
    return reason_pattern(context.get_current_parameters()["reason"])


dead_letters = sa.Table(
    "dead_letters",
    metadata,
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("offset", sa.BigInteger, primary_key=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("payload", sa.LargeBinary, nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    # reason_pattern(reason), computed on insert (revision 0006): the summary groups by it through
    # its index instead of reading every reason; NULL in rows an older version wrote (the summary
    # groups those by reason and merges them as it did before)
    sa.Column("reason_pattern", sa.Text, default=_reason_pattern_default),
    sa.Index(None, "created_at"),
    sa.Index(None, "reason_pattern", "topic", "created_at"),
)
