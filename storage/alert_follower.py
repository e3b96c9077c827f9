"""``sparsewatch alerts --follow``: :class:`AlertFollower`, the matching alerts as they are
committed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sparsewatch.storage.alert_queries import AlertTime, _alert_conditions, fetch_alerts
from sparsewatch.storage.query_parts import _rows
from sparsewatch.storage.schema import alerts


@dataclass
class AlertFollower:
    """The alerts matching some filters as they are committed, each returned once, oldest first
    (``sparsewatch alerts --follow``; the filters are :func:`fetch_alerts`'s).

    An alert becomes visible when its transaction commits, which can be after alerts with a
    larger id or a later ``created_at`` (two workers writing at once; ``created_at`` is the
    writer's clock at insert time). So each :meth:`poll` reads the matching alerts with an id
    above the largest seen, and again those created at most ``grace_s`` before the newest seen,
    and returns the ones it has not returned yet. An alert is missed only if it became visible
    with a smaller id than one already seen *and* a ``created_at`` more than ``grace_s`` older
    than the newest seen. "Seen" counts every alert a look found visible, matching or not: what
    a poll reads is then what was committed since the last one (by the indexes of id and
    ``created_at``), however rarely the filters match (anchored on the matching alerts only, a
    poll read every alert above the newest match: the whole table, every look, when none
    matched).
    """

    kinds: Sequence[str] | None = None
    streams: Sequence[str] | None = None
    min_score: float | None = None
    since: datetime | None = None
    time_field: AlertTime = "created"
    text: str | None = None
    min_documents: int | None = None
    grace_s: float = 60.0
    _max_id: int | None = field(default=None, init=False)
    _newest: datetime | None = field(default=None, init=False)
    _seen: dict[int, datetime] = field(default_factory=dict, init=False)
    _started: bool = field(default=False, init=False)

    @contextmanager
    def attempt(self) -> Iterator[None]:
        """A look (:meth:`start` or :meth:`poll` in the block) that counts only if the whole
        block succeeds: when it fails, what the look found counts as unseen again (its read
        transaction's COMMIT can fail after the rows came back, when the server restarts: the
        alerts a retry then read were taken for returned and never printed)."""
        saved = (self._max_id, self._newest, dict(self._seen), self._started)
        try:
            yield
        except BaseException:
            self._max_id, self._newest, self._seen, self._started = saved
            raise

    def start(self, conn: sa.Connection, backlog: int) -> list[dict[str, Any]]:
        """The ``backlog`` newest matching alerts, oldest first; everything visible now counts as
        returned, so :meth:`poll` returns only what is committed after."""
        self._seen, self._started = {}, True
        self._max_id, self._newest = _newest_alert(conn)
        self.poll(conn)
        rows = fetch_alerts(
            conn,
            since=self.since,
            kinds=self.kinds,
            streams=self.streams,
            min_score=self.min_score,
            limit=backlog,
            time_field=self.time_field,
            text=self.text,
            min_documents=self.min_documents,
        )
        self._remember(rows)
        return sorted(rows, key=lambda r: (r["created_at"], r["id"]))

    def poll(self, conn: sa.Connection) -> list[dict[str, Any]]:
        """The matching alerts committed since the last call (or :meth:`start`), oldest first."""
        if not self._started:
            raise RuntimeError("call start() before poll()")
        top = _newest_alert(conn)  # before the rows, which then include every match it saw
        recent = []
        if self._max_id is not None:
            recent.append(alerts.c.id > self._max_id)
        if self._newest is not None:
            recent.append(alerts.c.created_at >= self._newest - timedelta(seconds=self.grace_s))
        stmt = sa.select(alerts).where(*self._conditions(conn))
        if recent:
            stmt = stmt.where(sa.or_(*recent))
        rows = _rows(conn, stmt)
        fresh = sorted(
            (r for r in rows if r["id"] not in self._seen),
            key=lambda r: (r["created_at"], r["id"]),
        )
        self._remember(rows, top)
        return fresh

    def _conditions(self, conn: sa.Connection) -> list[Any]:
        return _alert_conditions(
            conn,
            self.since,
            None,
            self.kinds,
            self.streams,
            self.min_score,
            self.time_field,
            self.text,
            self.min_documents,
        )

    def _remember(
        self, rows: Sequence[dict[str, Any]], top: tuple[int | None, datetime | None] = (None, None)
    ) -> None:
        """Mark ``rows`` returned, and them and ``top`` (the largest id and latest creation of
        all alerts, :func:`_newest_alert`) seen."""
        self._seen.update((r["id"], r["created_at"]) for r in rows)
        ids = [i for i in (self._max_id, top[0], *(r["id"] for r in rows)) if i is not None]
        times = [
            t for t in (self._newest, top[1], *(r["created_at"] for r in rows)) if t is not None
        ]
        self._max_id = max(ids, default=None)
        self._newest = max(times, default=None)
        if self._newest is not None:  # forget what no later poll can read again
            horizon = self._newest - timedelta(seconds=self.grace_s)
            self._seen = {i: t for i, t in self._seen.items() if t >= horizon}


def _newest_alert(conn: sa.Connection) -> tuple[int | None, datetime | None]:
    """The largest alert id and the latest ``created_at`` of all alerts (two index look-ups:
    one statement of both aggregates read the whole ``created_at`` index on SQLite)."""
    top_id = sa.select(sa.func.max(alerts.c.id)).scalar_subquery()
    top_created = sa.select(sa.func.max(alerts.c.created_at)).scalar_subquery()
    stmt = sa.select(top_id, sa.type_coerce(top_created, alerts.c.created_at.type))
    largest_id, latest = conn.execute(stmt).one()
    return largest_id, latest
