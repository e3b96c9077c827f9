"""Numeric timestamps that the replay reads as dates before 1980 (:class:`EarlyTimestamps`):
relative times (0, 1, 2.5 seconds into a recording), read as epoch milliseconds or seconds,
become moments of the 1970s, which the replay produced without a word. The first one is kept,
by its column, value, file and line, for one note after the summary
(:meth:`EarlyTimestamps.note`).

A timestamp given as a date (ISO-8601, ``YYYYMMDD``, a Reuters or mail date) is left alone,
whatever its year. The line is drawn at 1980, not later: Reuters-21578, the corpus of 1987 this
project is tried on, is replayed from its own export too, its timestamps epoch milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sparsewatch.consumers.field_mapping import FieldMapping, _pick
from sparsewatch.consumers.messages import RecordError
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.source_records import SourceRecord

EARLIEST_MS = 315_532_800_000  # 1980-01-01T00:00:00Z: a number read as earlier is noted
_NUMBER_TEXT = re.compile(r"\s*-?\d+(?:\.\d*)?\s*")  # the text of a number, as a CSV cell holds it


@dataclass(frozen=True)
class EarlyTimestamp:
    """A record whose numeric timestamp (``value`` in ``column``) was read as ``timestamp_ms``,
    before 1980."""

    source: str
    line: int
    column: str
    value: Any
    timestamp_ms: int


class EarlyTimestamps:
    """Counts the records whose timestamp field (as ``mapping`` picks it) is a number, or its
    text, that reads as a moment before 1980 (:data:`EARLIEST_MS`), and keeps the first; shown
    each record as it is read (``watch`` of
    :func:`~sparsewatch.replay.documents.read_documents`)."""

    def __init__(self, mapping: FieldMapping) -> None:
        self.mapping = mapping
        self.count = 0
        self.first: EarlyTimestamp | None = None

    def __call__(self, record: SourceRecord) -> None:
        """Count ``record`` when its timestamp is a number read as a moment before 1980."""
        column, value = _pick(record.fields, self.mapping.timestamp, "timestamp")
        if column is None or not _is_number(value):
            return
        unit_ms = self.mapping.timestamp_unit_ms
        # (str.strip, as the parser's \s: float() keeps the separators U+001C-U+001F)
        if (float(value.strip()) if isinstance(value, str) else value) * unit_ms >= EARLIEST_MS:
            return  # (most timestamps: read no further; a huge integer is no float)
        try:
            timestamp_ms = parse_timestamp_ms(value, unit_ms)
        except RecordError:
            return  # (the record is rejected for it)
        if timestamp_ms >= EARLIEST_MS:
            return
        if isinstance(value, str) and timestamp_ms != parse_timestamp_ms(
            Decimal(value.strip()), unit_ms
        ):
            return  # the text of a date (YYYYMMDD), not a number
        self.count += 1
        if self.first is None:
            self.first = EarlyTimestamp(record.source, record.line, column, value, timestamp_ms)

    def note(self) -> str | None:
        """The note that says how many records' timestamps were numbers read as moments before
        1980, with the first (its column, value, file and line); ``None`` when none was."""
        first = self.first
        if first is None:
            return None
        unit = "seconds" if self.mapping.timestamp_unit_ms == 1000 else "milliseconds"
        moment = datetime.fromtimestamp(first.timestamp_ms / 1000, tz=UTC)
        records = "1 record has" if self.count == 1 else f"{self.count} records have"
        return (
            f"note: {records} a number for a timestamp that, read as epoch {unit}, falls before "
            f"1980 (first: column '{first.column}' = {_shown(first.value)} at {first.source} "
            f"line {first.line}, read as {_iso(moment)}): relative times are taken as moments "
            "of the 1970s; give absolute times (epoch milliseconds, epoch seconds with "
            "--timestamp-unit s, or ISO-8601)"
        )


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a number, or the text of one (not a bool)."""
    if isinstance(value, str):
        return _NUMBER_TEXT.fullmatch(value) is not None
    return isinstance(value, int | float) and not isinstance(value, bool)


def _iso(moment: datetime) -> str:
    """``moment`` (UTC) in ISO-8601, to the millisecond."""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _shown(value: Any) -> str:
    """``value`` for the note: quoted text, cut to 40 characters, or the number."""
    if isinstance(value, str):
        text = value.strip()
        return repr(text if len(text) <= 40 else text[:37] + "...")
    return repr(value)
