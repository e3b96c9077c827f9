"""The documents behind ``sparsewatch documents``: :func:`fetch_documents`, or
:func:`stream_documents` for an export read as it is written (conventions:
:mod:`~sparsewatch.storage.query_parts`)."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sparsewatch.storage.query_parts import _between, _in, _rows, _stream_rows, _text
from sparsewatch.storage.schema import documents
from sparsewatch.storage.text_match import _contains


def fetch_documents(conn: sa.Connection, **filters: Any) -> list[dict[str, Any]]:
    """The documents matching ``filters`` (:func:`_documents_statement`'s), in its order."""
    return _rows(conn, _documents_statement(conn, **filters))


def stream_documents(conn: sa.Connection, **filters: Any) -> Generator[dict[str, Any], None, None]:
    """The rows of :func:`fetch_documents` (the same ``filters``), in its order, fetched a batch
    at a time as they are read (:func:`~.query_parts._stream_rows`)."""
    return _stream_rows(conn, _documents_statement(conn, **filters))


def _documents_statement(
    conn: sa.Connection,
    streams: Sequence[str] | None = None,
    window_seq: int | None = None,
    novel_only: bool = False,
    anomalies_only: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    min_score: float | None = None,
    limit: int | None = 100,
    topic: int | None = None,
    text: str | None = None,
    ids: Sequence[str] | None = None,
) -> sa.Select[Any]:
    """Documents by event time (then stream, id; rows without an event time, which an anomaly
    worker before this version created ahead of the detector, last); filters combine with AND.
    A row the detector has not written (yet, or ever: its window was pruned before a lagging
    anomaly worker scored it) has the event time and window of its scores message, no text.
    ``topic``: documents whose dominant topic or announced emerging topic is that
    ``topics.topic_id`` (an emerging_topic alert's ``topic-<id>``); ``text``: documents whose
    text contains it, ignoring case; ``ids``: documents of these ids."""
    conditions = [
        *_in(documents.c.stream, streams),
        *_in(documents.c.doc_id, ids),
        *_between(documents.c.event_time, since, until),
        *_contains(conn, documents.c.text, text),
    ]
    if window_seq is not None:
        conditions.append(documents.c.window_seq == window_seq)
    if novel_only:
        conditions.append(documents.c.novel.is_(True))
    if anomalies_only:
        conditions.append(documents.c.anomaly.is_(True))
    if min_score is not None:
        conditions.append(documents.c.novelty_score >= min_score)
    if topic is not None:
        conditions.append(
            sa.or_(documents.c.dominant_topic == topic, documents.c.emerging_topic == topic)
        )
    return (
        sa.select(documents)
        .where(*conditions)
        .order_by(
            documents.c.event_time.nulls_last(),
            _text(conn, documents.c.stream),
            _text(conn, documents.c.doc_id),
        )
        .limit(limit)
    )
