"""What the query commands share: time arguments, common options, and the store they open.

Times are ISO-8601 (naive means UTC) or relative (``2h``, ``30m``, ``7d``: that long ago); window
numbers and row limits are 64-bit integers; a query opens the configured database (or
``--database-url``) and creates nothing (:func:`open_store`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import sqlalchemy as sa

from sparsewatch.cli_types import command_config, not_blank, utf8_name
from sparsewatch.config import MAX_INT64
from sparsewatch.errors import SparsewatchError, first_line
from sparsewatch.storage.engine import is_in_memory_sqlite, mask_url
from sparsewatch.storage.store import Store

FORMATS = ("table", "json", "csv")
# Window numbers and row limits are stored or sent as 64-bit integers: larger ones are refused.
WINDOW = click.IntRange(0, MAX_INT64)
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)\s*(?:ago)?\s*$", re.IGNORECASE)
_UNITS = {"s": "seconds", "m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """An aware UTC datetime from ISO-8601 (naive means UTC), ``now``, or a relative time such as
    ``2h``, ``30m``, ``7d`` (that long before ``now``)."""
    now = now or datetime.now(UTC)
    if text.strip().lower() == "now":
        return now
    match = _RELATIVE.match(text)
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        if match:
            amount, unit = float(match.group(1)), _UNITS[match.group(2).lower()]
            return now - timedelta(**{unit: amount})
        parsed = datetime.fromisoformat(value)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"'{text}' is outside the dates from year 1 to 9999 (UTC)") from None
    except ValueError:
        raise ValueError(f"'{text}' is neither ISO-8601 nor relative like 2h, 30m, 7d") from None


class TimeParam(click.ParamType):
    """A click parameter accepting ISO-8601 or relative times."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


TIME = TimeParam()


@contextmanager
def open_store(
    ctx: click.Context, database_url: str | None, create: bool = False, read_only: bool = True
) -> Iterator[Store]:
    """The configured database (or ``--database-url``); errors become one line. Unless
    ``create`` (``db upgrade``), a command creates nothing: a missing SQLite file or a database
    without sparsewatch's tables is an error. A database behind this version's schema is
    migrated for a command that writes (not ``read_only``: ``db upgrade``, ``db prune``,
    ``db forget-group``) and refused for one that only reads (the queries)."""
    # the configuration is read (and a bad one refused) even when --database-url replaces its URL
    config = command_config(ctx)
    database_url = database_url or config.resolved_database_url
    if is_in_memory_sqlite(database_url):  # it would be a new, empty one, gone when we return
        raise SparsewatchError(
            f"{database_url!r} is an in-memory SQLite database, which lives and dies with one "
            "connection: it holds no results to read or keep; give a file (sqlite:///path.db) "
            "or PostgreSQL"
        )
    try:
        store = Store.open(database_url, create=create, read_only=read_only and not create)
    except (sa.exc.SQLAlchemyError, OSError, ValueError) as exc:
        message = f"cannot open database {mask_url(database_url)}: {first_line(exc)}"
        raise SparsewatchError(message) from None
    try:
        yield store
    except sa.exc.SQLAlchemyError as exc:
        raise SparsewatchError(f"database error: {first_line(exc)}") from None
    finally:
        store.dispose()


def check_range(since: datetime | None, until: datetime | None) -> None:
    """A usage error unless ``--since`` is before ``--until`` (an empty range is a mistake)."""
    if since is not None and until is not None and since >= until:
        raise click.BadParameter("--since must be before --until", param_hint="--since")


FORMAT_OPTION = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table for people, json or csv for scripts.",
)
DATABASE_OPTION = click.option(
    "--database-url",
    default=None,
    callback=not_blank,  # "" (a script's unset variable) read the default database instead
    help="Database URL (default: the configuration's database_url or DATA_DIR/sparsewatch.db).",
)
LIMIT_OPTION = click.option(
    "--limit",
    type=click.IntRange(0, MAX_INT64),
    default=50,
    show_default=True,
    help="At most N rows (a note on stderr says when more match).",
)


def one_more(limit: int) -> int:
    """The rows to ask for to tell whether ``limit`` cuts a listing: one more (within int64)."""
    return min(limit + 1, MAX_INT64)


def within_limit(rows: list[dict[str, Any]], limit: int, what: str) -> list[dict[str, Any]]:
    """The first ``limit`` of ``rows`` (asked for with :func:`one_more`), and a note on stderr
    when there were more: a listing cut by the default limit looked complete (the 72 documents
    of a story listed as 50, the newest missing)."""
    if len(rows) <= limit:
        return rows
    click.echo(f"note: {limit} {what} shown, more match: raise --limit", err=True)
    return rows[:limit]


STREAMS_OPTION = click.option(
    "--stream", "streams", multiple=True, callback=utf8_name, help="Only this stream (repeatable)."
)
