"""``sparsewatch dead-letters``: the messages the workers and the ingest bridge refused, from the
results database.

Every refused message (bad JSON, wrong types, a duplicate, a stream on a second partition, ...) is
stored with its reason, its source topic, partition and offset, and its original bytes: by a
worker in the same transaction as the window it arrived with, by ``sparsewatch ingest`` before
the Kafka transaction of its batch. The command lists them newest first, or counts
them by reason (``--summary``), so an operator sees what goes wrong without a Kafka client. JSON
and CSV carry the exact bytes (``payload_base64``) to re-send a repaired message.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

import click

from sparsewatch.cli_types import utf8_name, utf8_text
from sparsewatch.query_options import (
    DATABASE_OPTION,
    FORMAT_OPTION,
    LIMIT_OPTION,
    TIME,
    check_range,
    one_more,
    open_store,
    within_limit,
)
from sparsewatch.query_output import TableColumn, emit, printable, shorten, show_time

DEAD_LETTER_COLUMNS = (
    "created_at",
    "topic",
    "partition",
    "offset",
    "reason",
    "payload_bytes",
    "payload_utf8",
    "payload_base64",
)
REASON_COLUMNS = ("reason", "count", "first_at", "last_at", "topics", "example")


def _with_payload_views(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its payload as size, UTF-8 text (``None`` if it is not UTF-8) and base64,
    plus the table's ``source`` and ``preview`` cells (control characters escaped)."""
    payload = bytes(row["payload"])
    try:
        text: str | None = payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    preview = f"<{len(payload)} bytes, not UTF-8>" if text is None else shorten(50)(printable(text))
    return {
        **row,
        "payload_bytes": len(payload),
        "payload_utf8": text,
        "payload_base64": base64.b64encode(payload).decode("ascii"),
        "source": f"{row['topic']}:{row['partition']}:{row['offset']}",
        "preview": preview,
    }


@click.command("dead-letters")
@click.option("--since", type=TIME, default=None, help="Stored from this time (ISO-8601 or 2h).")
@click.option("--until", type=TIME, default=None, help="Stored before this time.")
@click.option(
    "--topic",
    "source_topics",
    multiple=True,
    callback=utf8_name,
    help="Only messages refused on this topic (repeatable; <prefix>.docs: the detector's, "
    "<prefix>.scores: the anomaly worker's, an ingest source topic: the bridge's).",
)
@click.option(
    "--reason",
    default=None,
    callback=utf8_text,
    help="Only reasons containing this text (any case).",
)
@click.option(
    "--summary",
    is_flag=True,
    help="Count them by reason (numbers in a reason read as N), most frequent first.",
)
@LIMIT_OPTION
@FORMAT_OPTION
@DATABASE_OPTION
@click.pass_context
def dead_letters(
    ctx: click.Context,
    since: datetime | None,
    until: datetime | None,
    source_topics: tuple[str, ...],
    reason: str | None,
    summary: bool,
    limit: int,
    fmt: str,
    database_url: str | None,
) -> None:
    """Refused messages with their reasons and original bytes, newest first (--summary: counts
    by reason)."""
    check_range(since, until)
    filters = {
        "since": since,
        "until": until,
        "source_topics": source_topics,
        "reason": reason,
        "limit": one_more(limit),
    }
    with open_store(ctx, database_url) as store:
        if summary:
            rows = within_limit(store.dead_letter_reasons(**filters), limit, "reasons")
        else:
            found = within_limit(store.dead_letters(**filters), limit, "dead letters")
            rows = [_with_payload_views(r) for r in found]
    if summary:
        view: list[TableColumn] = [
            ("count", "count", str),
            ("first", "first_at", show_time),
            ("last", "last_at", show_time),
            ("topics", "topics", ", ".join),
            ("reason", "reason", shorten(80)),
        ]
        emit(rows, fmt, REASON_COLUMNS, view, "dead-letter reasons")
        return
    view = [
        ("stored", "created_at", show_time),
        ("source", "source", str),
        ("reason", "reason", shorten(60)),
        ("payload", "preview", str),
    ]
    emit(rows, fmt, DEAD_LETTER_COLUMNS, view, "dead letters")
