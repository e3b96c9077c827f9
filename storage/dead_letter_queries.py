"""The dead letters behind ``sparsewatch dead-letters`` (:func:`fetch_dead_letters`, and
:func:`dead_letter_reasons` for ``--summary``) and ``status`` (:func:`count_dead_letters`);
conventions: :mod:`~sparsewatch.storage.query_parts`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sparsewatch.storage.query_parts import _between, _in, _rows, _text
from sparsewatch.storage.schema import dead_letters, reason_pattern
from sparsewatch.storage.text_match import _contains


def _dead_letter_conditions(
    conn: sa.Connection,
    since: datetime | None,
    until: datetime | None,
    source_topics: Sequence[str] | None,
    reason: str | None,
) -> list[Any]:
    return [
        *_between(dead_letters.c.created_at, since, until),
        *_in(dead_letters.c.topic, source_topics),
        *_contains(conn, dead_letters.c.reason, reason),
    ]


# What the dead-letter queries return of a row: not the pattern, the summary's grouping key
_DEAD_LETTER_COLUMNS = [c for c in dead_letters.c if c.name != "reason_pattern"]


def fetch_dead_letters(
    conn: sa.Connection,
    since: datetime | None = None,
    until: datetime | None = None,
    source_topics: Sequence[str] | None = None,
    reason: str | None = None,
    limit: int | None = 100,
) -> list[dict[str, Any]]:
    """Dead letters (the messages the workers refused, with the original bytes as ``payload``)
    stored in ``[since, until)``, newest first, then by source topic, partition and offset;
    ``reason``: those whose reason contains this text, ignoring case."""
    stmt = (
        sa.select(*_DEAD_LETTER_COLUMNS)
        .where(*_dead_letter_conditions(conn, since, until, source_topics, reason))
        .order_by(
            dead_letters.c.created_at.desc(),
            _text(conn, dead_letters.c.topic),
            dead_letters.c.partition,
            dead_letters.c.offset,
        )
        .limit(limit)
    )
    return _rows(conn, stmt)


def dead_letter_reasons(
    conn: sa.Connection,
    since: datetime | None = None,
    until: datetime | None = None,
    source_topics: Sequence[str] | None = None,
    reason: str | None = None,
    limit: int | None = 100,
) -> list[dict[str, Any]]:
    """The dead letters counted by reason, with the numbers in a reason written ``N`` (a
    duplicate's first offset, a byte position, a size: :func:`reason_pattern`), most frequent
    first: ``reason`` (that pattern), ``count``, ``first_at`` / ``last_at`` (stored times),
    ``example`` (the newest reason of the pattern) and ``topics`` (the source topics).

    Counted in SQL by the stored pattern (:func:`_counts_by_pattern`) and, for rows an older
    version stored without one, by exact reason (:func:`_counts_by_reason`); the few groups are
    merged here by the pattern of their example."""
    conditions = _dead_letter_conditions(conn, since, until, source_topics, reason)
    groups: dict[str, dict[str, Any]] = {}
    for row in [
        *_counts_by_pattern(conn, conditions, reason),
        *_counts_by_reason(conn, conditions),
    ]:
        pattern = reason_pattern(row["reason"])
        group = groups.setdefault(
            pattern,
            {
                "reason": pattern,
                "count": 0,
                "first_at": row["first_at"],
                "last_at": row["last_at"],
                "example": row["reason"],
                "topics": set(),
            },
        )
        group["count"] += row["count"]
        group["topics"].add(row["topic"])
        group["first_at"] = min(group["first_at"], row["first_at"])
        if (row["last_at"], row["reason"]) > (group["last_at"], group["example"]):
            group["last_at"], group["example"] = row["last_at"], row["reason"]
    rows = sorted(groups.values(), key=lambda g: (-g["count"], g["reason"]))
    for row in rows:
        row["topics"] = sorted(row["topics"])
    return rows if limit is None else rows[:limit]


def _counts_by_pattern(
    conn: sa.Connection, conditions: list[Any], reason: str | None
) -> list[dict[str, Any]]:
    """Per stored pattern and topic of the rows meeting ``conditions``: ``count``,
    ``first_at``, ``last_at`` and as ``reason`` the newest reason (the greatest of those stored
    last), looked up by the index on (reason_pattern, topic, created_at)."""
    d = dead_letters.c
    groups = (
        sa.select(d.reason_pattern, d.topic, *_span())
        .where(*conditions, d.reason_pattern.is_not(None))
        .group_by(d.reason_pattern, d.topic)
        .subquery()
    )
    g = groups.c
    newest = dead_letters.alias("newest").c
    example = (
        sa.select(sa.func.max(_text(conn, newest.reason)))
        .where(
            newest.reason_pattern == g.reason_pattern,
            newest.topic == g.topic,
            newest.created_at == g.last_at,
            *_contains(conn, newest.reason, reason),
        )
        .scalar_subquery()
    )
    stmt = sa.select(example.label("reason"), g.topic, g.count, g.first_at, g.last_at)
    return _rows(conn, stmt)


def _counts_by_reason(conn: sa.Connection, conditions: list[Any]) -> list[dict[str, Any]]:
    """Per exact reason and topic of the rows meeting ``conditions`` that have no stored
    pattern (an older version's): ``count``, ``first_at``, ``last_at``."""
    d = dead_letters.c
    stmt = (
        sa.select(d.reason, d.topic, *_span())
        .where(*conditions, d.reason_pattern.is_(None))
        .group_by(d.reason, d.topic)
    )
    return _rows(conn, stmt)


def _span() -> tuple[sa.ColumnElement[Any], ...]:
    """A group of dead letters' ``count``, ``first_at`` and ``last_at``."""
    created = dead_letters.c.created_at
    return (
        sa.func.count().label("count"),
        sa.func.min(created).label("first_at"),
        sa.func.max(created).label("last_at"),
    )


def count_dead_letters(conn: sa.Connection) -> int:
    """How many dead letters are stored."""
    return int(conn.execute(sa.select(sa.func.count()).select_from(dead_letters)).scalar_one())
