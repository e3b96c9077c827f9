"""What ``sparsewatch status`` shows of the workers' progress: :func:`stream_status` per stream
and :func:`stored_offsets` per consumer group (conventions:
:mod:`~sparsewatch.storage.query_parts`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sparsewatch.storage.query_parts import _in, _rows, _text
from sparsewatch.storage.schema import (
    ALERT_KINDS,
    alerts,
    checkpoints,
    documents,
    partition_offsets,
    windows,
)


def _count_if(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def stream_status(
    conn: sa.Connection, streams: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Per stream, in code point order: closed ``windows``, the ``last_window`` and its
    ``last_window_end`` (event time), stored ``documents`` with how many are ``novel``, ``late``
    and ``anomaly_scored`` / ``anomalies``, ``alerts`` by kind, and ``checkpoints`` (the newest
    checkpoint's time per consumer group)."""
    out: dict[str, dict[str, Any]] = {}

    def entry(stream: str) -> dict[str, Any]:
        return out.setdefault(
            stream,
            {
                "stream": stream,
                "windows": 0,
                "last_window": None,
                "last_window_end": None,
                "documents": 0,
                "novel": 0,
                "late": 0,
                "anomaly_scored": 0,
                "anomalies": 0,
                "alerts": dict.fromkeys(ALERT_KINDS, 0),
                "checkpoints": {},
            },
        )

    w = windows.c
    # the last window is the one that ends last: window numbers go down when windows.size
    # changes (max(window_seq) named an older window, shown with the newest one's end)
    rank = sa.func.row_number().over(
        partition_by=w.stream, order_by=(w.end_time.desc(), w.window_seq.desc())
    )
    ranked = (
        sa.select(
            w.stream,
            w.window_seq,
            w.end_time,
            sa.func.count().over(partition_by=w.stream).label("windows"),
            rank.label("rank"),
        )
        .where(*_in(w.stream, streams))
        .subquery()
    )
    r = ranked.c
    for row in conn.execute(
        sa.select(
            r.stream,
            r.windows,
            r.window_seq.label("last_window"),
            r.end_time.label("last_window_end"),
        ).where(r.rank == 1)
    ).mappings():
        entry(row["stream"]).update(row)
    d = documents.c
    for row in conn.execute(
        sa.select(
            d.stream,
            sa.func.count().label("documents"),
            _count_if(d.novel.is_(True)).label("novel"),
            _count_if(d.late.is_(True)).label("late"),
            sa.func.count(d.anomaly_score).label("anomaly_scored"),
            _count_if(d.anomaly.is_(True)).label("anomalies"),
        )
        .where(*_in(d.stream, streams))
        .group_by(d.stream)
    ).mappings():
        entry(row["stream"]).update({k: int(v) if k != "stream" else v for k, v in row.items()})
    a = alerts.c
    for stream, kind, count in conn.execute(
        sa.select(a.stream, a.kind, sa.func.count())
        .where(*_in(a.stream, streams))
        .group_by(a.stream, a.kind)
    ):
        entry(stream)["alerts"][kind] = int(count)
    c = checkpoints.c
    for group_id, stream, created_at in conn.execute(
        sa.select(c.group_id, c.stream, c.created_at).where(*_in(c.stream, streams))
    ):
        entry(stream)["checkpoints"][group_id] = created_at
    return [out[k] for k in sorted(out)]


def stored_offsets(conn: sa.Connection) -> list[dict[str, Any]]:
    """Each consumer group's stored resume offset per topic partition (where a restarted worker
    re-reads from), by group, topic and partition."""
    p = partition_offsets.c
    stmt = sa.select(partition_offsets).order_by(
        _text(conn, p.group_id), _text(conn, p.topic), p.partition
    )
    return _rows(conn, stmt)
