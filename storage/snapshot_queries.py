"""The stored model snapshots (``sparsewatch snapshots``): :func:`fetch_snapshots` describes
them, :func:`load_snapshot` reads one with its arrays (:class:`Snapshot`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from sparsewatch.storage.query_parts import _in, _rows, _text
from sparsewatch.storage.schema import snapshots, windows
from sparsewatch.storage.serialization import npz_to_arrays
from sparsewatch.storage.window_queries import newest_window_first


@dataclass(frozen=True)
class Snapshot:
    """A stored model snapshot with its arrays."""

    stream: str
    window_seq: int
    model_kind: str
    arrays: dict[str, np.ndarray]
    meta: dict
    vocabulary_version: int
    created_at: datetime


def fetch_snapshots(
    conn: sa.Connection,
    streams: Sequence[str] | None = None,
    model_kinds: Sequence[str] | None = None,
    limit: int | None = 100,
) -> list[dict[str, Any]]:
    """Snapshot descriptions (array shapes, sizes, metadata; no blob), newest window first (by
    its end in event time: window numbers go down when ``windows.size`` grows)."""
    columns = [c for c in snapshots.c if c.name != "blob"]
    s, w = snapshots.c, windows.c
    of_window = (w.stream == s.stream) & (w.window_seq == s.window_seq)
    stmt = (
        sa.select(*columns, sa.func.length(s.blob).label("size_bytes"))
        .select_from(snapshots.outerjoin(windows, of_window))
        .where(*_in(s.stream, streams), *_in(s.model_kind, model_kinds))
        .order_by(
            *newest_window_first(conn, w.end_time, s.window_seq, s.stream),
            _text(conn, s.model_kind),
        )
        .limit(limit)
    )
    return _rows(conn, stmt)


def load_snapshot(
    conn: sa.Connection, stream: str, model_kind: str, window_seq: int | None = None
) -> Snapshot | None:
    """The snapshot of ``stream``/``model_kind`` at ``window_seq`` (when ``None``, the newest:
    the last written, as window numbers go down when ``windows.size`` changes)."""
    conditions = [snapshots.c.stream == stream, snapshots.c.model_kind == model_kind]
    if window_seq is not None:
        conditions.append(snapshots.c.window_seq == window_seq)
    newest = (snapshots.c.created_at.desc(), snapshots.c.window_seq.desc())
    stmt = sa.select(snapshots).where(*conditions).order_by(*newest).limit(1)
    row = conn.execute(stmt).mappings().first()
    if row is None:
        return None
    return Snapshot(
        stream=row["stream"],
        window_seq=int(row["window_seq"]),
        model_kind=row["model_kind"],
        arrays=npz_to_arrays(row["blob"]),
        meta=row["meta"],
        vocabulary_version=int(row["vocabulary_version"]),
        created_at=row["created_at"],
    )
