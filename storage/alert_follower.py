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
    larger id (two workers writing at once). Each :meth:`poll` reads the matching alerts that
    may have been committed since the last look and returns those it has not returned yet.
    "Seen" counts every alert a look found visible, matching or not: what a poll reads is then
    what was committed since the last one (by the indexes of id and ``created_at``), however
    rarely the filters match (anchored on the matching alerts only, a poll read every alert
    above the newest match: the whole table, every look, when none matched).

    PostgreSQL: by transaction ids, exactly. Each look notes its snapshot's ``xmax`` (the first
    transaction id not yet taken) and the largest alert id it sees, ``M``. A writer's
    transaction takes its id before its alerts take theirs
    (:meth:`~sparsewatch.storage.store.StoreTx.insert_alerts`), so a transaction whose id is at
    least an earlier look's ``xmax`` began after that look, and its alerts' ids are above that
    look's ``M``. An alert not visible to a look belongs to a transaction running then, whose id
    is at least the look's ``xmin`` (the oldest running): so every alert committed after a look
    has an id above the ``M`` of the latest earlier look whose ``xmax`` is at most that ``xmin``
    (:attr:`_floor`), and the next poll reads the matching alerts above it. However long a
    transaction stays open between its alerts and its commit, none is missed; meanwhile (any
    transaction of the server open that long, of any database) each poll reads again every
    matching alert stored since it began (those returned are not returned again). Until such an
    earlier look exists, right after :meth:`start` while a transaction that was running then is
    still open, a poll reads as on SQLite: an alert of that transaction is missed if, when it
    is committed, a larger id was seen and it was created more than ``grace_s`` before the
    newest seen (``created_at`` is the database server's clock).

    SQLite (its writers take turns: alerts commit in the order of their ids; on both databases
    the rule of the first polls above): a poll reads the matching alerts with an id above the
    largest seen, and again those created at most ``grace_s`` before the newest seen. An alert
    is missed only if it became visible with a smaller id than one already seen *and* a
    ``created_at`` (the writer's clock at insert time) more than ``grace_s`` older than the
    newest seen.
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
    # PostgreSQL: every alert committed after the last look has an id above it (None: not known
    # yet); and the (xmax, largest alert id) of the looks that may set it later
    _floor: int | None = field(default=None, init=False)
    _looks: list[tuple[int, int]] = field(default_factory=list, init=False)

    @contextmanager
    def attempt(self) -> Iterator[None]:
        """A look (:meth:`start` or :meth:`poll` in the block) that counts only if the whole
        block succeeds: when it fails, what the look found counts as unseen again (its read
        transaction's COMMIT can fail after the rows came back, when the server restarts: the
        alerts a retry then read were taken for returned and never printed)."""
        saved = (
            self._max_id,
            self._newest,
            dict(self._seen),
            self._started,
            self._floor,
            list(self._looks),
        )
        try:
            yield
        except BaseException:
            (
                self._max_id,
                self._newest,
                self._seen,
                self._started,
                self._floor,
                self._looks,
            ) = saved
            raise

    def start(self, conn: sa.Connection, backlog: int) -> list[dict[str, Any]]:
        """The ``backlog`` newest matching alerts, oldest first; everything visible now counts as
        returned, so :meth:`poll` returns only what is committed after."""
        self._seen, self._started, self._floor, self._looks = {}, True, None, []
        look = _look(conn)
        self._max_id, self._newest = look.max_id, look.newest
        self._note(look)
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
        look = _look(conn)  # before the rows, which then include every match it saw
        stmt = sa.select(alerts).where(*self._conditions(conn))
        if self._floor is not None:
            stmt = stmt.where(alerts.c.id > self._floor)
        else:
            recent = []
            if self._max_id is not None:
                recent.append(alerts.c.id > self._max_id)
            if self._newest is not None:
                horizon = self._newest - timedelta(seconds=self.grace_s)
                recent.append(alerts.c.created_at >= horizon)
            if recent:
                stmt = stmt.where(sa.or_(*recent))
        rows = _rows(conn, stmt)
        fresh = sorted(
            (r for r in rows if r["id"] not in self._seen),
            key=lambda r: (r["created_at"], r["id"]),
        )
        self._remember(rows, look)
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

    def _note(self, look: _Look) -> None:
        """PostgreSQL: note ``look``'s snapshot, and move :attr:`_floor` up to the largest alert
        id of the latest look whose ``xmax`` is at most ``look``'s ``xmin`` (every transaction
        running at ``look`` began after it, its alerts' ids are above that)."""
        if look.xmin is None or look.xmax is None:
            return
        self._looks.append((look.xmax, look.max_id or 0))
        ended = [top for xmax, top in self._looks if xmax <= look.xmin]
        if ended:
            self._floor = max(self._floor or 0, *ended)
            self._looks = [(xmax, top) for xmax, top in self._looks if xmax > look.xmin]

    def _remember(self, rows: Sequence[dict[str, Any]], look: _Look | None = None) -> None:
        """Mark ``rows`` returned, and them and ``look``'s largest id and latest creation (of
        all alerts) seen."""
        self._seen.update((r["id"], r["created_at"]) for r in rows)
        top = (None, None) if look is None else (look.max_id, look.newest)
        ids = [i for i in (self._max_id, top[0], *(r["id"] for r in rows)) if i is not None]
        times = [
            t for t in (self._newest, top[1], *(r["created_at"] for r in rows)) if t is not None
        ]
        self._max_id = max(ids, default=None)
        self._newest = max(times, default=None)
        if look is not None:
            self._note(look)
        self._forget()

    def _forget(self) -> None:
        """Forget the returned alerts that no later poll can read again: those at or below
        :attr:`_floor` once it is known; before, those created more than ``grace_s`` before the
        newest seen, unless above the largest id of a look that may set the floor."""
        if self._floor is not None:
            floor = self._floor
            self._seen = {i: v for i, v in self._seen.items() if i > floor}
            return
        if self._newest is None:
            return
        horizon = self._newest - timedelta(seconds=self.grace_s)
        above = min((top for _, top in self._looks), default=None)
        self._seen = {
            i: t for i, t in self._seen.items() if t >= horizon or (above is not None and i > above)
        }


@dataclass(frozen=True)
class _Look:
    """What a look saw of all alerts: the largest id and latest ``created_at``; and, on
    PostgreSQL, its snapshot's ``xmin`` (the oldest transaction running) and ``xmax`` (the
    first transaction id not yet taken)."""

    max_id: int | None
    newest: datetime | None
    xmin: int | None = None
    xmax: int | None = None


def _look(conn: sa.Connection) -> _Look:
    """The largest alert id and the latest ``created_at`` of all alerts (two index look-ups:
    one statement of both aggregates read the whole ``created_at`` index on SQLite), and on
    PostgreSQL the bounds of the snapshot they were read in (one statement, one snapshot)."""
    top_id = sa.select(sa.func.max(alerts.c.id)).scalar_subquery()
    top_created = sa.select(sa.func.max(alerts.c.created_at)).scalar_subquery()
    columns: list[Any] = [top_id, sa.type_coerce(top_created, alerts.c.created_at.type)]
    if conn.dialect.name == "postgresql":
        snapshot = sa.func.pg_current_snapshot()
        columns += [
            sa.cast(sa.cast(sa.func.pg_snapshot_xmin(snapshot), sa.Text), sa.BigInteger),
            sa.cast(sa.cast(sa.func.pg_snapshot_xmax(snapshot), sa.Text), sa.BigInteger),
        ]
    row = conn.execute(sa.select(*columns)).one()
    return _Look(*row)
