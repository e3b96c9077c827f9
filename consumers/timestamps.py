"""Event times of source records: :func:`parse_timestamp_ms` reads a record's timestamp field
(epoch milliseconds or seconds, ISO-8601, a Reuters-21578 date, an RFC 2822 mail date or a
tweet's ``created_at``) as epoch milliseconds, and says why it cannot with a
:class:`~sparsewatch.consumers.messages.RecordError`, the error every step from a source record to
a document message raises (the corpus readers of :mod:`sparsewatch.replay.readers`, the field
mapping of :mod:`sparsewatch.consumers.field_mapping`, the ingest bridge).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import parsedate_tz
from typing import Any

from sparsewatch.consumers.messages import MAX_EPOCH_MS, MIN_EPOCH_MS, RecordError

_REUTERS_DATE = re.compile(
    r"^\s*(\d{1,2})-([A-Za-z]{3})-(\d{4})\s+(\d{1,2}):(\d{2}):(\d{2})(\.\d+)?"
)
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}
_EPOCH_MS_TEXT = re.compile(r"\s*(-?\d+)(?:\.\d*)?\s*")
# ISO-8601's basic date (``20260101``, as CSV exports such as GDELT's write dates): as epoch
# milliseconds it would be a moment of 1970-01-01 or -02, and the detector's message format
# reads the same text as the date
_BASIC_DATE = re.compile(r"\s*(\d{4})(\d{2})(\d{2})\s*")
# A zone after a date: a name for UTC, an offset (``+HHMM``, ``+HH:MM``, ``+HH``, ``+H``), or
# both (``GMT+0100``, JavaScript's ``Date`` text; ``UTC-05``; ``GMT+1``: one hour east, as mail
# and web pages mean it, not POSIX's ``Etc/GMT+1``), or an offset then its name (``-0500 EST``)
_ZONE = re.compile(
    r"(?P<utc>UTC|UT|GMT|Z)?(?:(?P<sign>[+-])(?P<hours>\d{2}):?(?P<minutes>\d{2})"
    r"|(?P<sign_h>[+-])(?P<hours_h>\d{1,2}))?(?P<label>[A-Z]{1,5})?",
    re.IGNORECASE,
)
# RFC 822's zone names with their offsets (hours); the Reuters dates refuse them
_MAIL_ZONES = {"AST": -4, "ADT": -3, "EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7}
_MAIL_ZONES |= {"MDT": -6, "PST": -8, "PDT": -7}
_COMMENT = re.compile(r"\([^()]*\)")  # RFC 2822 comment: "-0500 (EST)"
_WEEKDAYS = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"}
_WEEKDAYS |= {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
_MONTH_WORDS = {m.lower() for m in _MONTH_NAMES} | {
    "january", "february", "march", "april", "june", "july", "august", "september",
    "october", "november", "december",
}  # fmt: skip
_CLOCK = re.compile(r"\d{1,2}[:.]\d{2}(?:[:.]\d{2})?")
_DASHED_DATE = re.compile(r"\d{1,2}-[A-Za-z]+-\d{2,4}")  # RFC 850: 10-Oct-18
# An ISO-8601 date and time without its zone, for one fromisoformat does not read after it: a
# name (``2026-11-28 12:00:00 UTC``, as BigQuery exports write it), an offset and a name (Go's
# ``2026-11-28 12:00:00.123456789 +0000 UTC``)
_ISO_LOCAL = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?(?=[\sA-Za-z+-])"
)


def parse_timestamp_ms(value: Any, unit_ms: int = 1) -> int:
    """Epoch milliseconds from epoch ms (a number, or its decimal text such as ``1700000000000``
    or ``1700000000000.0``, the way a CSV file holds numbers), ISO-8601 (naive = UTC; a zone
    name may follow, as in ``2026-11-28 12:00:00 UTC``), a Reuters date like ``26-FEB-1987
    15:01:01.79``, or an RFC 2822 date or a tweet's ``created_at`` (``Wed Oct 10 20:19:24 +0000
    2018``); a RecordError otherwise. A fraction of a
    millisecond is cut off, from a number and from its text alike. With ``unit_ms`` = 1000 a
    number (or its text) counts epoch seconds, fractions to the millisecond.

    >>> parse_timestamp_ms("2026-01-01T00:00:00Z"), parse_timestamp_ms("1767225600000.0")
    (1767225600000, 1767225600000)
    >>> parse_timestamp_ms("26-FEB-1987 15:01:01.79")
    541350061790
    >>> parse_timestamp_ms("2026-01-01 00:00:00 UTC")  # BigQuery's exports
    1767225600000
    >>> parse_timestamp_ms("Wed Oct 10 20:19:24 +0000 2018")  # a tweet's created_at
    1539202764000
    >>> parse_timestamp_ms(1767225600.25, unit_ms=1000), parse_timestamp_ms("1767225600", 1000)
    (1767225600250, 1767225600000)

    Eight digits of text starting with a year of 1970..2199 are a date (ISO-8601's basic form,
    as the message format reads it; a RecordError if it is none), not epoch milliseconds of
    1970-01-01; a number stays one:

    >>> parse_timestamp_ms("20260101"), parse_timestamp_ms(20260101)
    (1767225600000, 20260101)
    >>> parse_timestamp_ms("yesterday")
    Traceback (most recent call last):
    ...
    sparsewatch.consumers.messages.RecordError: bad timestamp 'yesterday'
    (not ISO-8601 or epoch ms)
    """
    if isinstance(value, bool) or value is None:
        raise RecordError(f"bad timestamp {value!r}")
    if isinstance(value, str) and unit_ms == 1 and (day := _basic_date_ms(value)) is not None:
        return day
    if isinstance(value, str) and (number := _EPOCH_MS_TEXT.fullmatch(value)):
        whole = number.group(1)
        if len(whole.lstrip("-").lstrip("0")) > len(str(MAX_EPOCH_MS)):
            raise RecordError(f"timestamp {_shown(value)} is outside 1970..2200")
        value = int(whole) if unit_ms == 1 else Decimal(value.strip())  # exact fractions
    if isinstance(value, int | float | Decimal):
        if isinstance(value, float) and not math.isfinite(value):
            raise RecordError(f"bad timestamp {value!r}")
        try:
            if unit_ms == 1:
                ms = int(value)
            elif isinstance(value, float):  # 1767225600.999 * 1000 is 1767225600998.9998
                ms = math.floor(round(value * unit_ms, 3))
            else:
                ms = math.floor(value * unit_ms)
        except OverflowError:  # 1e306 seconds: infinite milliseconds
            raise RecordError(f"timestamp {_shown(value)} is outside 1970..2200") from None
    elif isinstance(value, str):
        ms = _parse_date_text(value)
    else:
        raise RecordError(f"bad timestamp of type {type(value).__name__}")
    if not MIN_EPOCH_MS <= ms < MAX_EPOCH_MS:
        raise RecordError(f"timestamp {_shown(value)} is outside 1970..2200")
    return ms


def _basic_date_ms(text: str) -> int | None:
    """Epoch ms of ``text`` as an ISO-8601 basic date (``YYYYMMDD``) of 1970..2199, else None;
    a RecordError for eight such digits that are no calendar date."""
    match = _BASIC_DATE.fullmatch(text)
    if match is None or not 1970 <= int(match.group(1)) < 2200:
        return None
    try:
        year, month, day_of_month = (int(part) for part in match.groups())
        day = datetime(year, month, day_of_month, tzinfo=UTC)
    except ValueError as exc:  # 20260229: as epoch milliseconds, a moment of 1970 again
        raise RecordError(f"bad timestamp {text.strip()!r} (a YYYYMMDD date? {exc})") from None
    return _epoch_ms(day)


def _shown(value: Any) -> str:
    """``value`` for a message: its repr cut to 40 characters, a huge integer by its size."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"of about {math.ceil(value.bit_length() * math.log10(2))} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _parse_date_text(value: str) -> int:
    text = value.strip()
    match = _REUTERS_DATE.match(text)
    if match and match.group(2).upper() in _MONTHS:
        day, mon, year, hh, mm, ss, frac = match.groups()
        offset_s = _zone_offset_s(text[match.end() :], value)
        try:
            moment = datetime(
                int(year), _MONTHS[mon.upper()], int(day), int(hh), int(mm), int(ss), tzinfo=UTC
            )
        except ValueError as exc:
            raise RecordError(f"bad timestamp {value[:40]!r} ({exc})") from None
        ms = _epoch_ms(moment) + (int(frac[1:4].ljust(3, "0")) if frac else 0)
        return ms - offset_s * 1000
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed: datetime | None = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None:
        parsed = _iso_date_with_zone(text, value) or _mail_date(value)
    elif parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return _epoch_ms(parsed)


def _iso_date_with_zone(text: str, value: str) -> datetime | None:
    """An ISO-8601 date and time followed by a zone that :func:`_zone_offset_s` reads, as after
    a Reuters date (``UTC``, ``GMT``, ``UT``, an offset, both, or an offset and its name: ``-0500
    EST``); a RecordError for another zone (``CET``, ``PST``); ``None`` when ``text`` does not
    start with such a date (its zone name was the reason the date was refused)."""
    match = _ISO_LOCAL.match(text)
    if match is None:
        return None
    try:
        moment = datetime.fromisoformat(match.group())
    except ValueError:  # 2026-13-01
        return None
    offset = _zone_offset_s(text[match.end() :], value)
    try:
        return moment.replace(tzinfo=UTC) - timedelta(seconds=offset)
    except OverflowError as exc:  # 0001-01-01 00:00 UTC+01
        raise RecordError(f"bad timestamp {value[:40]!r} ({exc})") from None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _epoch_ms(moment: datetime) -> int:
    """Epoch milliseconds of an aware ``moment``, a fraction of a millisecond cut off in exact
    arithmetic, as the detector's parser does (``round(timestamp() * 1000)`` put 23:59:59.9996
    into the next day, and a Reuters ``.9996`` into the next second)."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _zone_offset_s(zone: str, value: str, names: dict[str, int] | None = None) -> int:
    """Seconds east of UTC of the ``zone`` text after a date: none (UTC), ``Z``, ``UT``, ``UTC``
    or ``GMT``, an offset ``+HHMM``, ``-HH:MM`` or ``+HH``, a name for UTC with an offset
    (``GMT+0100``, ``UTC-05``, ``GMT +1``), an offset followed by its name (``-0500 EST``), or one
    of ``names`` (hours east); a RecordError for anything else. Zone texts that were ignored, so
    the time was read as UTC: a zone name such as ``PST`` after a Reuters date, ``GMT+0100``,
    ``UTC-05`` after a mail date. The same zones follow an ISO-8601 date that
    :meth:`datetime.fromisoformat` refuses for its zone (:func:`_iso_date_with_zone`)."""
    text = "".join(zone.split())
    if names and text.upper() in names:
        return names[text.upper()] * 3600
    match = _ZONE.fullmatch(text)
    named = match is not None and match["label"] is not None
    if match is None or (named and (match["utc"] or not (match["sign"] or match["sign_h"]))):
        hint = f"unknown time zone {zone.strip()[:12]!r}" if names is not None else ""
        hint = hint or f"time zone {zone.strip()[:12]!r}: give +HHMM"
        raise RecordError(f"bad timestamp {value[:40]!r} ({hint})")
    sign = match["sign"] or match["sign_h"]
    if sign is None:
        return 0
    hours = int(match["hours"] or match["hours_h"])
    minutes = int(match["minutes"] or 0)
    if minutes >= 60:
        raise RecordError(f"bad timestamp {value[:40]!r} (time zone offset {text[:12]!r})")
    if hours >= 24:
        raise RecordError(f"bad timestamp {value[:40]!r} (time zone offset of a day or more)")
    offset = hours * 3600 + minutes * 60
    return -offset if sign == "-" else offset


def _mail_zone(value: str) -> str:
    """The zone text of a mail date: its words that are no weekday, month, day, year or time
    (comments removed). :func:`email.utils.parsedate_tz` reads only one word there, takes a zone
    it does not know (``GMT+0100``, ``CET``) for UTC, ``+01`` for one minute, and a second
    year for a zone (``... 20:19:24 2018``: 20 hours 18 minutes east)."""
    numbers = 0
    zone = []
    clock_seen = False
    for word in _COMMENT.sub(" ", value).replace(",", " ").split():
        lower = word.lower()
        if lower in _WEEKDAYS or lower in _MONTH_WORDS or _DASHED_DATE.fullmatch(word):
            continue
        if word.isdigit() and numbers < 2:  # the day and the year
            numbers += 1
            continue
        clock = None if clock_seen else _CLOCK.match(word)
        if clock is not None:
            clock_seen = True
            word = word[clock.end() :]  # "20:19:24+0100"
        if word:
            zone.append(word)
    return " ".join(zone)


def _mail_date(value: str) -> datetime:
    """An RFC 2822 date (``Wed, 10 Oct 2018 20:19:24 +0000``, e-mail and RSS) or Twitter's
    ``created_at`` (``Wed Oct 10 20:19:24 +0000 2018``); without a zone, UTC. The zone is read
    by :func:`_zone_offset_s` (RFC 2822's names too); one it cannot read (``CET``) and an offset
    of a day or more are RecordErrors: the parser read some of them as UTC."""
    parts = parsedate_tz(value)
    if parts is None:
        raise RecordError(f"bad timestamp {value[:40]!r} (not ISO-8601 or epoch ms)")
    offset = _zone_offset_s(_mail_zone(value), value, _MAIL_ZONES)
    try:
        return datetime(*parts[:6], tzinfo=UTC) - timedelta(seconds=offset)
    except (ValueError, OverflowError) as exc:  # 31 Dec 9999 23:59 -0100 is past year 9999
        raise RecordError(f"bad timestamp {value[:40]!r} ({exc})") from None
