"""Corpus readers for the replay tool: JSONL, CSV and Reuters-21578 SGML, plain or gzip.

Each reader yields, per record, either a :class:`SourceRecord` (the raw fields, with the source file
and the line where the record starts) or a :class:`Rejected` (why it could not be read, where).
:func:`to_document` maps raw fields onto the document message of DESIGN.md::

    {"id": str, "text": str, "timestamp": epoch ms, "stream": str, "labels": [str], "meta": {}}

and :func:`read_documents` chains both over many files, sending every rejected record to an
:class:`ErrorFile` (source file, line, reason, raw text) so nothing is silently dropped. A document
is only made when the detector will accept it: :func:`to_document` applies the detector's limits
(``max_text_bytes`` as configured), so a record it would dead-letter is rejected here, with its
file and line.
:func:`sort_by_event_time` orders documents by event time with bounded memory: sorted runs of at
most ``chunk_size`` documents are spilled to temporary files and merged lazily.
"""

from __future__ import annotations

import bisect
import codecs
import csv
import gzip
import heapq
import html
import json
import math
import os
import re
import sys
import tempfile
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import parsedate_tz
from pathlib import Path
from typing import IO, Any, Literal

from sparsewatch.consumers.messages import (
    MAX_EPOCH_MS,
    MAX_ID_CHARS,
    MAX_STREAM_CHARS,
    MIN_EPOCH_MS,
    InvalidMessageError,
    decode_json_object,
    looks_like_epoch_seconds,
    parse_document,
    storable_string,
)

from sparsewatch.config import Config

InputFormat = Literal["jsonl", "csv", "reuters"]

_EXTENSIONS: dict[str, InputFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".sgm": "reuters",
    ".sgml": "reuters",
}
_RAW_CHARS = 2000  # raw text kept per rejected record in the error file
# The producer's message limit (librdkafka's ``message.max.bytes``, 1,000,000 by default), which it
# checks on the key, the value and a record's 36 bytes of framing: a larger document message is
# refused when handed over (the ingest bridge stopped there, at every restart again).
MAX_MESSAGE_BYTES = 1_000_000
_RECORD_OVERHEAD_BYTES = 36
DEFAULT_MAX_TEXT_BYTES = Config.max_text_bytes  # the detector's text limit unless configured


@dataclass(frozen=True)
class SourceRecord:
    """The raw fields of one input record."""

    source: str
    line: int
    fields: dict[str, Any]


@dataclass(frozen=True)
class Rejected:
    """A record that could not be read or mapped."""

    source: str
    line: int
    reason: str
    raw: str = ""


class RecordError(ValueError):
    """A record's fields do not make a document; the message is the reason."""


@dataclass(frozen=True)
class FieldMapping:
    """Which input fields make the document's fields (``None``: the first present candidate).

    ``text`` may name several fields: their non-empty values are joined with a blank line (for
    example a title and a body); one given as ``a|b`` is the first of ``a`` and ``b`` present
    (a long tweet's ``extended_tweet.full_text``, else its ``text``). Without ``text``, ``text``
    is used when present, else ``title`` and ``body``. Labels may be a list or a string split on
    ``;`` or ``|``. A numeric timestamp counts ``timestamp_unit_ms`` milliseconds per unit (1:
    epoch milliseconds, 1000: seconds).
    """

    id: str | None = None
    text: tuple[str, ...] = ()
    timestamp: str | None = None
    stream: str | None = None
    labels: str | None = None
    default_stream: str = "default"
    timestamp_unit_ms: int = 1


_CANDIDATES = {
    "id": ("id", "doc_id", "newid", "NEWID"),
    "timestamp": ("timestamp", "date", "time", "created_at", "event_time"),
    "stream": ("stream",),
    "labels": ("labels", "topics", "label"),
}


def detect_format(path: Path) -> InputFormat:
    """The input format from the file name (``.gz`` removed), in any case."""
    name = path.name[:-3] if path.name.lower().endswith(".gz") else path.name
    suffix = Path(name).suffix.lower()
    if suffix not in _EXTENSIONS:
        raise ValueError(
            f"{path}: cannot tell the format from '{suffix or name}' "
            "(use .jsonl, .csv or .sgm, or give the format)"
        )
    return _EXTENSIONS[suffix]


def _open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when it starts with the gzip magic number."""
    raw = path.open("rb")
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


# How much of a file's start tells its line ending: a record longer than this is refused anyway
# (MAX_MESSAGE_BYTES)
_SNIFF_BYTES = 1 << 20
# byte-order marks of the UTF-16 and UTF-32 text Windows tools write (UTF-32's first)
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_READ_ERRORS = (EOFError, OSError, zlib.error)  # a damaged or truncated gzip


def _byte_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``fh`` as UTF-8 bytes with their line ends; an error reading the file is
    raised after the lines before it. A file of UTF-16 or UTF-32 with a byte-order mark is
    decoded (:func:`_wide_lines`); a file whose start has CRs but no LF (classic Mac OS) is
    split at CRs (it was read as one line, one rejected record); any other at LFs."""
    head = bytearray()
    error: BaseException | None = None
    try:
        while len(head) < _SNIFF_BYTES and (chunk := fh.read1(_SNIFF_BYTES - len(head))):
            head += chunk
    except _READ_ERRORS as exc:
        error = exc
    for bom, encoding in _WIDE_BOMS:
        if head.startswith(bom):
            yield from _wide_lines(bytes(head), fh, encoding, error)
            return
    end = b"\r" if b"\r" in head and b"\n" not in head else b"\n"
    *complete, rest = bytes(head).split(end)
    for piece in complete:
        yield piece + end
    if error is not None:
        raise error  # the line it cut is incomplete
    if end == b"\n":
        if rest:
            yield rest + fh.readline()
        yield from fh
        return
    pending = [rest]
    while chunk := fh.read1(1 << 16):
        *complete, rest = chunk.split(end)
        for piece in complete:
            pending.append(piece)
            yield b"".join(pending) + end
            pending.clear()
        pending.append(rest)
    if last := b"".join(pending):
        yield last


_NEWLINE = re.compile(r"\r\n|\r|\n")


def _wide_lines(
    head: bytes, fh: IO[bytes], encoding: str, error: BaseException | None
) -> Iterator[bytes]:
    """The lines, ending at CR, LF or CRLF, of UTF-16 or UTF-32 text (``head``, then the rest of
    ``fh``) as UTF-8; an unpaired surrogate stays (a line that is not UTF-8), and text that ends
    inside a character is a UnicodeDecodeError after the lines before it."""
    decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")

    def chunks() -> Iterator[bytes]:
        yield head
        if error is not None:
            raise error
        while chunk := fh.read1(1 << 16):
            yield chunk

    pending: list[str] = []  # the text of the line being read
    for chunk in chunks():
        text = decoder.decode(chunk)
        if pending and pending[-1].endswith("\r"):  # a CR that ended the last chunk
            text, pending[-1] = pending[-1][-1] + text, pending[-1][:-1]
        start = 0
        for match in _NEWLINE.finditer(text):
            if match.end() == len(text) and match.group() == "\r":
                break  # its LF may come with the next chunk
            pending.append(text[start : match.end()])
            yield "".join(pending).encode("utf-8", "surrogatepass")
            pending.clear()
            start = match.end()
        pending.append(text[start:])
    pending.append(decoder.decode(b"", final=True))
    if last := "".join(pending):
        yield last.encode("utf-8", "surrogatepass")


def _lines(path: Path) -> Iterator[tuple[int, bytes | None, str]]:
    """(line number, bytes, error): the file's lines as UTF-8 (see :func:`_byte_lines`); a
    damaged gzip, or UTF-16 that ends inside a character, ends with an error entry."""
    number = 0
    with _open_binary(path) as fh:
        try:
            for number, line in enumerate(_byte_lines(fh), start=1):
                if number == 1 and line.startswith(codecs.BOM_UTF8):  # spreadsheet exports
                    line = line[len(codecs.BOM_UTF8) :]
                yield number, line, ""
        except _READ_ERRORS as exc:
            what = "truncated gzip" if isinstance(exc, EOFError) else f"damaged file ({exc})"
            yield number + 1, None, f"{what}: reading stopped after line {number}"
        except UnicodeDecodeError as exc:
            reason = f"not {exc.encoding.upper()} ({exc.reason})"
            yield number + 1, None, f"{reason}: reading stopped after line {number}"


def _raw(line: bytes | str) -> str:
    text = line.decode("utf-8", "backslashreplace") if isinstance(line, bytes) else line
    return text.rstrip("\r\n")[:_RAW_CHARS]


def parse_json_object(data: bytes, what: str = "line") -> dict[str, Any]:
    """The JSON object in ``data`` (UTF-8; a ``what``: a line, a message); a RecordError says
    what is wrong with it (:func:`~sparsewatch.consumers.messages.decode_json_object`)."""
    try:
        return decode_json_object(data, what)
    except InvalidMessageError as exc:
        raise RecordError(exc.reason) from None


def read_jsonl(path: Path) -> Iterator[SourceRecord | Rejected]:
    """One JSON object per line; blank lines are skipped. A file that is one JSON array (what
    ``sparsewatch documents --format json`` and many tools export) yields its elements, each by
    the line it starts on (every line of such a file was rejected, the export could not be
    replayed); a file that starts with ``[`` but is no JSON array is read line by line."""
    source = str(path)
    elements = _json_array_elements(path)
    if elements is not None:
        for number, element in elements:
            try:
                yield SourceRecord(source, number, parse_json_object(element, "array element"))
            except RecordError as exc:
                yield Rejected(source, number, str(exc), _raw(element))
        return
    for number, line, error in _lines(path):
        if line is None:
            yield Rejected(source, number, error)
            return
        if not line.strip():
            continue
        try:
            yield SourceRecord(source, number, parse_json_object(line))
        except RecordError as exc:
            yield Rejected(source, number, str(exc), _raw(line))


def _json_array_elements(path: Path) -> list[tuple[int, bytes]] | None:
    """(line where it starts, UTF-8 bytes) of each element of the JSON array that is the whole
    of ``path``; ``None`` when the file's first non-blank line does not start with ``[`` (a
    JSON-lines file: read no further than that line) or the file is no JSON array (read line by
    line, which says what is wrong where)."""
    texts: list[str] = []
    first = 0  # the number of the first non-blank line
    for number, line, _ in _lines(path):
        if line is None:
            return None
        try:
            texts.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            return None
        if not first and not texts[0].strip():
            texts.clear()
        elif not first:
            if not texts[0].lstrip().startswith("["):
                return None
            first = number
    if not first:
        return None
    starts = [0]
    for line_text in texts:
        starts.append(starts[-1] + len(line_text))
    text = "".join(texts)
    decoder = json.JSONDecoder()
    position = _skip_blank(text, text.index("[") + 1)
    elements: list[tuple[int, bytes]] = []
    try:
        while not (text.startswith("]", position) and not elements):
            start = position
            _, end = decoder.raw_decode(text, start)
            number = first - 1 + bisect.bisect_right(starts, start)
            elements.append((number, text[start:end].encode("utf-8")))
            position = _skip_blank(text, end)
            if text.startswith("]", position):
                break
            if not text.startswith(",", position):
                return None
            position = _skip_blank(text, position + 1)
    except (ValueError, RecursionError):  # not JSON (the lines say why), nested too deeply
        return None
    if text[_skip_blank(text, position + 1) :]:  # something after the closing bracket
        return None
    return elements


def _skip_blank(text: str, position: int) -> int:
    """The first position from ``position`` on that is no JSON whitespace."""
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


# The longest CSV field read (characters): above any document a Kafka message can carry (the
# csv module's default, 131,072, refused texts a configured max_text_bytes allows)
_CSV_FIELD_CHARS = 1 << 24


def read_csv(path: Path) -> Iterator[SourceRecord | Rejected]:
    """A CSV file with a header row; a quoted field may span lines.

    A line that is not UTF-8 stays in the text the csv parser reads (its stray bytes as surrogate
    escapes), so records end where they would in a clean file, and the record it belongs to is
    rejected whole; so is a record the file ends inside (an unclosed quote, or a truncated gzip).
    When the header row is rejected (also for naming a column twice), so is every record after
    it. A field over
    :data:`_CSV_FIELD_CHARS` characters rejects its record, and reading resumes after the record's
    closing quote (the parser alone resumed inside the field and read its rest as records).
    """
    if csv.field_size_limit() < _CSV_FIELD_CHARS:  # process-wide; only ever raised
        csv.field_size_limit(_CSV_FIELD_CHARS)
    source = str(path)
    damage: list[Rejected] = []  # where a damaged gzip stops
    lines: list[tuple[int, bytes]] = []  # the lines of the record being parsed
    not_utf8: list[str] = []  # where those lines are not UTF-8
    ended = False  # the file's lines are all read

    def text_lines() -> Iterator[str]:
        nonlocal ended
        for number, line, error in _lines(path):
            if line is None:
                damage.append(Rejected(source, number, error))
                break
            lines.append((number, line))
            try:
                yield line.decode("utf-8")
            except UnicodeDecodeError as exc:
                not_utf8.append(f"line {number}, byte {exc.start}")
                yield line.decode("utf-8", "surrogateescape")
        ended = True

    def what_is_wrong(error: str) -> str:
        """What is wrong with the record just parsed (``error``: the parser's complaint), if
        anything."""
        problems = [error] if error else []
        if not_utf8:
            problems.append(f"not UTF-8 ({'; '.join(not_utf8)})")
        if ended:  # the parser returns a record at the end of the file only inside quotes
            problems.append("the file ends inside a quoted field (a missing closing quote?)")
        return "; ".join(problems)

    def raw() -> str:
        """The record just parsed as it is in the file."""
        return _raw(b"".join(line for _, line in lines))

    def skip_rest_of_record() -> None:
        """After a field over the limit (the parser dropped the rest of its line): read on to the
        line where the record's quotes pair up, the end of its quoted field."""
        quotes = sum(line.count(b'"') for _, line in lines)
        while quotes % 2:
            try:
                next(line_source)
            except StopIteration:
                return
            quotes += lines[-1][1].count(b'"')

    line_source = text_lines()
    reader = csv.reader(line_source)
    header: list[str] | None = None
    header_rejected = ""
    while True:
        lines.clear()
        not_utf8.clear()
        try:
            row, error = next(reader), ""
        except StopIteration:
            break
        except csv.Error as exc:
            row, error = [], f"invalid CSV: {exc}"
            if "field larger than field limit" in str(exc):
                skip_rest_of_record()
                reader = csv.reader(line_source)
        number, reason = lines[0][0], what_is_wrong(error)
        if reason:
            yield Rejected(source, number, reason, raw())
            if header is None and not header_rejected:
                header_rejected = f"header row (line {number}) rejected: {reason}"
        elif not any(cell.strip() for cell in row):
            continue  # a blank line
        elif header_rejected:
            yield Rejected(source, number, header_rejected, raw())
        elif header is None:
            header = [h.strip() for h in row]
            twice = next((h for i, h in enumerate(header) if h and h in header[:i]), None)
            if twice is not None:  # a record would keep one of its two values, silently
                header_rejected = f"header row (line {number}) names column '{twice}' twice"
                yield Rejected(source, number, header_rejected, raw())
        elif len(row) != len(header):
            reason = f"{len(row)} fields where the header has {len(header)}"
            yield Rejected(source, number, reason, raw())
        else:
            yield SourceRecord(source, number, dict(zip(header, row, strict=True)))
    yield from damage
    if header is None and not header_rejected and not damage:
        yield Rejected(source, 1, "empty CSV file (no header row)")


# an element's content holds no other REUTERS start tag: one without its end tag stays unmatched
# (and is reported) instead of swallowing the next story up to that one's end tag
_REUTERS = re.compile(r"<REUTERS\b([^>]*)>((?:(?!<REUTERS\b).)*?)</REUTERS>", re.DOTALL)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_D = re.compile(r"<D>(.*?)</D>", re.DOTALL)


def _tag(block: str, name: str) -> str | None:
    match = re.search(rf"<{name}\b[^>]*>(.*?)</{name}>", block, re.DOTALL)
    return None if match is None else match.group(1)


def _body(block: str) -> str | None:
    """A story's BODY; for a ``<TEXT TYPE="UNPROC">`` story (no TITLE or BODY: the collection's
    README, "unprocessed"), the TEXT element's content, which was dropped."""
    body = _tag(block, "BODY")
    if body is None and (unproc := _UNPROC.search(block)) is not None:
        body = unproc.group(1)
    return body


def _char(reference: re.Match[str]) -> str:
    """The character of a numeric reference ``&#N;``; a RecordError when N is no code point."""
    digits = reference.group(1).lstrip("0") or "0"
    if len(digits) > 7 or int(digits) > sys.maxunicode:
        raise RecordError(f"character reference &#{digits[:20]};: not a Unicode character")
    return chr(int(digits))


def _sgml_text(text: str | None) -> str:
    if text is None:
        return ""
    text = html.unescape(re.sub(r"&#(\d+);", _char, text))
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", "", text).strip()


_NOT_REUTERS = "no REUTERS element in this file (not Reuters-21578 SGML? see --input-format)"


def _latin1_fallback(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: the bytes that are not UTF-8 as Latin-1 characters."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return error.object[error.start : error.end].decode("latin-1"), error.end


_LATIN1_FALLBACK = "sparsewatch-latin-1-fallback"
codecs.register_error(_LATIN1_FALLBACK, _latin1_fallback)


def read_reuters_sgml(path: Path) -> Iterator[SourceRecord | Rejected]:
    """Reuters-21578 ``reut2-NNN.sgm``: fields ``id`` (NEWID), ``date``, ``title``, ``body``,
    ``topics``, ``places``, ``lewissplit``, ``cgisplit``, ``topics_attr``, ``dateline``.

    The collection is ASCII with a few stray bytes: it is decoded as UTF-8, each byte that is
    not UTF-8 as Latin-1 (read all as Latin-1, a story in UTF-8, or in UTF-16, which is read as
    UTF-8, had its accents turned into two characters: ``CafÃ©``).
    """
    source = str(path)
    chunks: list[bytes] = []
    error: tuple[int, str] | None = None
    for number, line, message in _lines(path):
        if line is None:
            error = (number, message)
            break
        chunks.append(line)
    text = b"".join(chunks).decode("utf-8", _LATIN1_FALLBACK)
    line_of = _line_index(text)
    end = 0
    if text.strip() and "<REUTERS" not in text:
        yield Rejected(source, 1, _NOT_REUTERS, text.lstrip()[:_RAW_CHARS])
    for match in _REUTERS.finditer(text):
        yield from _unterminated(source, text, end, match.start(), line_of)
        end = match.end()
        number = line_of(match.start())
        attrs = dict(_ATTR.findall(match.group(1)))
        block = match.group(2)
        if "NEWID" not in attrs:
            yield Rejected(source, number, "REUTERS element without NEWID", block[:_RAW_CHARS])
            continue
        try:
            fields = {
                "id": attrs["NEWID"],
                "date": _sgml_text(_tag(block, "DATE")),
                "title": _sgml_text(_tag(block, "TITLE")),
                "body": _sgml_text(_body(block)),
                "dateline": _sgml_text(_tag(block, "DATELINE")),
                "topics": _D.findall(_tag(block, "TOPICS") or ""),
                "places": _D.findall(_tag(block, "PLACES") or ""),
                "lewissplit": attrs.get("LEWISSPLIT", ""),
                "cgisplit": attrs.get("CGISPLIT", ""),
                "topics_attr": attrs.get("TOPICS", ""),
            }
        except RecordError as exc:
            yield Rejected(source, number, str(exc), block[:_RAW_CHARS])
            continue
        yield SourceRecord(source, number, fields)
    yield from _unterminated(source, text, end, len(text), line_of)
    if error is not None:
        yield Rejected(source, error[0], error[1])


def _unterminated(
    source: str, text: str, start: int, stop: int, line_of: Any
) -> Iterator[Rejected]:
    """A rejection for every REUTERS start tag between ``start`` and ``stop`` (outside any
    complete element, so without its end tag)."""
    reason = "unterminated REUTERS element (truncated file?)"
    for match in re.finditer(r"<REUTERS\b", text[start:stop]):
        at = start + match.start()
        yield Rejected(source, line_of(at), reason, text[at : at + _RAW_CHARS])


def _line_index(text: str) -> Any:
    """A function mapping a character offset of ``text`` to its 1-based line number."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    return lambda offset: bisect.bisect_right(starts, offset)


READERS = {"jsonl": read_jsonl, "csv": read_csv, "reuters": read_reuters_sgml}


def read_records(path: Path, fmt: InputFormat | None = None) -> Iterator[SourceRecord | Rejected]:
    """The records of one file (format from the name unless given)."""
    return READERS[fmt or detect_format(path)](path)


_UNPROC = re.compile(r"<TEXT\b[^>]*\bTYPE\s*=\s*\"?UNPROC\"?[^>]*>(.*?)</TEXT>", re.DOTALL)
_REUTERS_DATE = re.compile(
    r"^\s*(\d{1,2})-([A-Za-z]{3})-(\d{4})\s+(\d{1,2}):(\d{2}):(\d{2})(\.\d+)?"
)
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}


_EPOCH_MS_TEXT = re.compile(r"\s*(-?\d+)(?:\.\d*)?\s*")
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
    >>> parse_timestamp_ms("yesterday")
    Traceback (most recent call last):
    ...
    sparsewatch.replay.readers.RecordError: bad timestamp 'yesterday' (not ISO-8601 or epoch ms)
    """
    if isinstance(value, bool) or value is None:
        raise RecordError(f"bad timestamp {value!r}")
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
        moment: datetime | None = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None:
        moment = _iso_date_with_zone(text, value) or _mail_date(value)
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _epoch_ms(moment)


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


def _pick(fields: dict[str, Any], name: str | None, what: str) -> tuple[str | None, Any]:
    """(field name, value) of the named field, or of the first present candidate for ``what``;
    ``(None, None)`` when absent. A name with dots that is not a field of its own is a path into
    nested objects (``user.screen_name``), as in a tweet's JSON."""
    if name is not None:
        if name in fields:
            return name, fields[name]
        value: Any = fields
        for part in name.split("."):
            if not isinstance(value, dict) or part not in value:
                return None, None
            value = value[part]
        return name, value
    for candidate in _CANDIDATES[what]:
        if candidate in fields:
            return candidate, fields[candidate]
    return None, None


def parse_labels(value: Any) -> list[str]:
    """Labels from a list of strings (or integers), a string that is a JSON list of strings (a
    CSV cell of ``sparsewatch documents --format csv``), or a string split on ``;`` or ``|``; a
    RecordError otherwise."""
    if value is None or value == "":
        return []
    if isinstance(value, str) and (listed := _json_label_list(value)) is not None:
        return listed
    if isinstance(value, str):
        return [part.strip() for part in re.split(r"[;|]", value) if part.strip()]
    if isinstance(value, list) and all(isinstance(x, str | int) for x in value):
        return [str(x) for x in value]
    raise RecordError("labels must be a list of strings or a ';'-separated string")


def _json_label_list(value: str) -> list[str] | None:
    """The labels of ``value`` when it is a JSON list of strings (``["a", "b"]``: how
    ``sparsewatch documents --format csv`` writes a document's labels, which were read back as
    one label ``["a", "b"]``); ``None`` for any other text."""
    if not value.lstrip().startswith("["):
        return None
    try:
        listed = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(listed, list) or not all(isinstance(x, str | int) for x in listed):
        return None
    return [str(x) for x in listed]


def _first_text(fields: dict[str, Any], spec: str) -> tuple[str, Any] | None:
    """(name, value) of the first present field of ``spec``, names separated by ``|``
    (``extended_tweet.full_text|text``: a long tweet's whole text, else its text); ``None``."""
    for name in spec.split("|"):
        value = _pick(fields, name, "text")[1]
        if value is not None:
            return name, value
    return None


def to_document(
    fields: dict[str, Any],
    mapping: FieldMapping = FieldMapping(),
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    timestamp_ms: int | None = None,
) -> dict[str, Any]:
    """The document message for one record's raw fields; a RecordError says what is wrong,
    including why the detector (whose text limit is ``max_text_bytes``) would refuse it. A given
    ``timestamp_ms`` (a Kafka record's own timestamp) is the event time; no field is read for it.
    """
    used: set[str] = set()
    id_name, doc_id = _pick(fields, mapping.id, "id")
    if id_name is None or doc_id is None or str(doc_id).strip() == "":
        raise RecordError(f"missing id field '{mapping.id or '/'.join(_CANDIDATES['id'])}'")
    if not isinstance(doc_id, str | int) or isinstance(doc_id, bool):
        raise RecordError(f"id must be a string or an integer, got {type(doc_id).__name__}")
    used.add(id_name)
    text_fields = mapping.text or (("text",) if "text" in fields else ("title", "body"))
    present = [found for spec in text_fields if (found := _first_text(fields, spec)) is not None]
    if not present:
        raise RecordError(f"missing text field '{'+'.join(text_fields)}'")
    parts = []
    for name, value in present:
        if not isinstance(value, str):
            raise RecordError(f"text field '{name}' is {type(value).__name__}, not a string")
        parts.append(value.strip() if len(present) > 1 else value)
    used.update(name for spec in text_fields for name in spec.split("|"))
    if timestamp_ms is None:
        ts_name, timestamp = _pick(fields, mapping.timestamp, "timestamp")
        if ts_name is None:
            wanted = mapping.timestamp or "/".join(_CANDIDATES["timestamp"])
            raise RecordError(f"missing timestamp field '{wanted}'")
        used.add(ts_name)
        timestamp_ms = parse_timestamp_ms(timestamp, mapping.timestamp_unit_ms)
    stream_name, stream = _pick(fields, mapping.stream, "stream")
    if stream_name is not None:
        used.add(stream_name)
    if stream is not None and (not isinstance(stream, str | int) or isinstance(stream, bool)):
        raise RecordError(f"stream must be a string or an integer, got {type(stream).__name__}")
    if stream is None or str(stream).strip() == "":
        stream = mapping.default_stream
    labels_name, labels = _pick(fields, mapping.labels, "labels")
    if labels_name is not None:
        used.add(labels_name)
    document = {
        "id": str(doc_id),
        "text": "\n\n".join(p for p in parts if p) if len(parts) > 1 else parts[0],
        "timestamp": timestamp_ms,
        "stream": str(stream),
        "labels": parse_labels(labels),
        "meta": _meta(_unused(fields, used)),
    }
    _check_deliverable(document, max_text_bytes)
    return document


def _meta(unused: dict[str, Any]) -> dict[str, Any]:
    """The document's ``meta``: the record's unused fields, with its own ``meta`` object (a
    record read back from a docs topic, or written by ``Document.to_json``) merged in, its keys
    winning; it was nested one level deeper at every replay of a dump (``{"meta": {"meta":
    ...}}``). A ``meta`` field that is no object stays as it is, under ``meta``; ``null`` goes."""
    own = unused.get("meta")
    if own is not None and not isinstance(own, dict):
        return unused
    rest = {k: v for k, v in unused.items() if k != "meta"}
    return {**rest, **own} if own else rest


def _unused(fields: dict[str, Any], used: set[str]) -> dict[str, Any]:
    """``fields`` without the ``used`` ones, for the document's ``meta``; a used nested field
    (``extended_tweet.full_text``) is taken out of its objects, which are copied, and an object
    left empty goes too (the meta kept a second copy of a long nested text, and its message went
    over the size limit)."""
    meta = {k: v for k, v in fields.items() if k not in used}
    for name in used:
        parts = name.split(".")
        if name in fields or len(parts) < 2 or parts[0] not in meta:
            continue
        chain = [meta]
        for part in parts[:-1]:
            inner = chain[-1].get(part)
            if not isinstance(inner, dict):
                break
            chain[-1][part] = inner = dict(inner)  # copied: the record's objects stay whole
            chain.append(inner)
        else:
            chain[-1].pop(parts[-1], None)
        for part, outer in zip(reversed(parts[:-1]), reversed(chain[:-1]), strict=True):
            if isinstance(outer.get(part), dict) and not outer[part]:
                del outer[part]
    return meta


def _check_deliverable(document: dict[str, Any], max_text_bytes: int) -> None:
    """A RecordError for a document the detector would dead-letter or the producer refuse: a
    string the detector refuses (a NUL character or an unpaired surrogate, which a JSON escape
    such as ``"\\ud800"`` can make), an id or stream over its length limits or a blank stream,
    more than ``max_text_bytes`` of text, a ``meta`` without a JSON form, or a message too
    large for the detector or for the producer (:data:`MAX_MESSAGE_BYTES`, with its key and
    framing). An unpaired surrogate in ``meta`` (a tweet cut inside an emoji) is no reason: the
    detector accepts it, and the message carries it as its JSON escape (as ``encode`` writes
    it), whose bytes are the ones measured. The detector's size limit is its parser's to apply:
    it only concerns messages over ``max_text_bytes`` (a message that long must pass it, or no
    text of ``max_text_bytes`` would), so only those pay for the parse. A NaN or infinite
    number in ``meta`` (``NaN``, ``1e400`` in a JSON line) becomes ``null`` there, as the query
    commands write them: the message went out as ``NaN``/``Infinity``, which is not JSON for
    strict parsers (the detector ignores ``meta``; the document is kept)."""
    try:
        for key in ("id", "text", "stream"):
            storable_string(document[key], key)
        for label in document["labels"]:
            storable_string(label, "labels")
    except InvalidMessageError as exc:
        raise RecordError(exc.reason) from None
    for key, limit in (("id", MAX_ID_CHARS), ("stream", MAX_STREAM_CHARS)):
        if len(document[key]) > limit:
            raise RecordError(f"field '{key}' is longer than {limit} characters")
    if not document["stream"].strip():
        raise RecordError("field 'stream' is empty")
    if len(document["text"].encode("utf-8")) > max_text_bytes:
        raise RecordError(f"text longer than {max_text_bytes} bytes")
    try:
        try:
            text = _strict_json(document)
        except ValueError as exc:  # a non-finite number, or a circular reference
            try:
                document["meta"] = _finite(document["meta"])
                text = _strict_json(document)
            except (ValueError, RecursionError):  # a circular reference: as it was
                raise exc from None
        payload = text.encode("utf-8", "backslashreplace")
    except (TypeError, ValueError) as exc:  # a value JSON has no form for, a circular reference
        raise RecordError(f"field 'meta' cannot be written as JSON ({exc})") from None
    except RecursionError:  # objects nested about a thousand deep
        raise RecordError("field 'meta' is nested too deeply to be written as JSON") from None
    if len(payload) > max_text_bytes:
        try:
            parse_document(payload, max_text_bytes)
        except InvalidMessageError as exc:
            raise RecordError(exc.reason) from None
    size = len(payload) + len(document["stream"].encode("utf-8")) + _RECORD_OVERHEAD_BYTES
    if size > MAX_MESSAGE_BYTES:  # possible when max_text_bytes is configured above ~150 kB
        raise RecordError(
            f"message of {size} bytes exceeds the Kafka producer's limit of {MAX_MESSAGE_BYTES} "
            "bytes (message.max.bytes)"
        )


def _strict_json(document: dict[str, Any]) -> str:
    """``document`` as compact JSON, a ValueError for a number JSON has no form for (NaN,
    infinities: Python writes ``NaN``, ``Infinity``, which strict JSON parsers refuse)."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with every NaN and infinite number in it, at any depth, as ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


class ErrorFile:
    """Rejected records as JSON lines ``{"source", "line", "reason", "raw"}``; counts every error.

    The lines go to a temporary file beside ``path`` that replaces ``path`` atomically when the
    file is closed, so a file already at ``path`` stays whole until then, and stays as it was when
    the ``with`` block ends with an exception (the new lines are dropped). Nothing is written
    until the first error arrives. A ``path`` that exists but is no regular file (``/dev/null``,
    a FIFO, ``/dev/stderr``) is written to directly: it was replaced by a file, or removed.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.count = 0
        self._fh: IO[str] | None = None
        self._partial: Path | None = None
        self.special = path is not None and path.exists() and not path.is_file()

    def write(self, rejected: Rejected) -> None:
        """Record one rejected record."""
        self.count += 1
        if self.path is None:
            return
        if self._fh is None and self.special:
            self._fh = self.path.open("a", encoding="utf-8", errors="backslashreplace")
        elif self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._partial = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:12]}.tmp")
            # An unpaired surrogate in ``raw`` is written as its JSON escape (``\\ud800``).
            self._fh = self._partial.open("x", encoding="utf-8", errors="backslashreplace")
        entry = {
            "source": rejected.source,
            "line": rejected.line,
            "reason": rejected.reason,
            "raw": rejected.raw,
        }
        self._fh.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def close(self) -> None:
        """Flush the file and move it to ``path`` (when an error was written)."""
        if self.special and self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._fh is None or self._partial is None or self.path is None:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        os.replace(self._partial, self.path)
        self._partial = None

    def discard(self) -> None:
        """Drop what was written; a file at ``path`` stays as it was (what went to a special
        file has gone)."""
        if self.special:
            self.close()
        if self._fh is None or self._partial is None:
            return
        self._fh.close()
        self._fh = None
        self._partial.unlink(missing_ok=True)
        self._partial = None

    def __enter__(self) -> ErrorFile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


@dataclass
class ReadStats:
    """Counts of what :func:`read_documents` has seen."""

    read: int = 0
    rejected: int = 0
    files: int = 0
    per_file: dict[str, int] = field(default_factory=dict)
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None

    def note_timestamp(self, ms: int) -> None:
        """Widen the range of timestamps read to ``ms``."""
        lo, hi = self.min_timestamp_ms, self.max_timestamp_ms
        self.min_timestamp_ms = ms if lo is None else min(lo, ms)
        self.max_timestamp_ms = ms if hi is None else max(hi, ms)

    def looks_like_seconds(self) -> bool:
        """Whether every timestamp read, as epoch milliseconds, falls in 1970-01-12..1973-03-03:
        the range of epoch *seconds* from 2001 to 5138 (a corpus of epoch seconds read as ms)."""
        lo, hi = self.min_timestamp_ms, self.max_timestamp_ms
        if lo is None or hi is None:
            return False
        return looks_like_epoch_seconds(lo) and looks_like_epoch_seconds(hi)


def read_documents(
    paths: Iterable[Path],
    mapping: FieldMapping = FieldMapping(),
    errors: ErrorFile | None = None,
    fmt: InputFormat | None = None,
    stats: ReadStats | None = None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
) -> Iterator[dict[str, Any]]:
    """Document messages from every file in turn (input order); rejects go to ``errors``.
    ``max_text_bytes`` is the detector's text limit (its configured ``max_text_bytes``)."""
    errors = errors or ErrorFile(None)
    stats = stats if stats is not None else ReadStats()
    for path in paths:
        stats.files += 1
        stats.per_file[str(path)] = 0
        try:
            records = read_records(path, fmt)
            for record in records:
                stats.read += 1
                if isinstance(record, Rejected):
                    stats.rejected += 1
                    errors.write(record)
                    continue
                try:
                    document = to_document(record.fields, mapping, max_text_bytes)
                except RecordError as exc:
                    stats.rejected += 1
                    raw = raw_json(record.fields, _RAW_CHARS)
                    errors.write(Rejected(record.source, record.line, str(exc), raw))
                    continue
                stats.per_file[str(path)] += 1
                stats.note_timestamp(document["timestamp"])
                yield document
        except OSError as exc:
            stats.read += 1
            stats.rejected += 1
            errors.write(Rejected(str(path), 0, f"cannot read file: {exc.strerror or exc}"))


def raw_json(fields: Any, limit: int) -> str:
    """``fields`` as JSON for an error report, cut to ``limit`` characters (anything JSON has no
    form for as its text; objects nested too deeply to write, which were refused for that, as a
    note)."""
    try:
        return json.dumps(fields, ensure_ascii=False, default=str)[:limit]
    except RecursionError:
        return "<nested too deeply to show>"


# Runs merged at once, each an open file: a process may open 256 files (macOS) or 1,024 (a common
# Linux default), and merging every run at once stopped a small --chunk-size over a large corpus
_MERGE_FAN_IN = 64


def _spill(run: list[tuple[int, int, dict[str, Any]]], folder: Path) -> Path:
    run.sort(key=lambda item: (item[0], item[1]))
    return _write_run(run, folder)


def _write_run(items: Iterable[tuple[int, int, dict[str, Any]]], folder: Path) -> Path:
    """A run file of ``items`` (sorted), in ``folder``; an unpaired surrogate (in a ``meta``) is
    written as it is (``surrogatepass``), for :func:`_read_run` to read back unchanged."""
    with tempfile.NamedTemporaryFile(
        "w", dir=folder, suffix=".jsonl", delete=False, encoding="utf-8", errors="surrogatepass"
    ) as fh:
        for ts, seq, doc in items:
            fh.write(json.dumps([ts, seq, doc], ensure_ascii=False) + "\n")
    return Path(fh.name)


def _read_run(path: Path) -> Iterator[tuple[int, int, dict[str, Any]]]:
    with path.open(encoding="utf-8", errors="surrogatepass") as fh:
        for line in fh:
            ts, seq, doc = json.loads(line)
            yield ts, seq, doc


def _merged(runs: list[Path]) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """The items of ``runs`` in (timestamp, input position) order."""
    return heapq.merge(*(_read_run(p) for p in runs), key=lambda item: (item[0], item[1]))


def _fewer_runs(runs: list[Path], folder: Path) -> list[Path]:
    """``runs`` merged, :data:`_MERGE_FAN_IN` at a time, into at most that many (each merged
    run's files removed), so that the final merge keeps that many files open."""
    while len(runs) > _MERGE_FAN_IN:
        group, runs = runs[:_MERGE_FAN_IN], runs[_MERGE_FAN_IN:]
        runs.append(_write_run(_merged(group), folder))
        for path in group:
            path.unlink()
    return runs


def sort_by_event_time(
    documents: Iterable[dict[str, Any]], chunk_size: int = 100_000, tmp_dir: Path | None = None
) -> Iterator[dict[str, Any]]:
    """``documents`` ordered by (timestamp, input position), holding at most ``chunk_size`` in
    memory: sorted runs go to temporary files and are merged with a heap, at most
    :data:`_MERGE_FAN_IN` files open at once. Timestamps must be epoch ms integers (as
    :func:`to_document` makes them)."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be positive")
    run: list[tuple[int, int, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="sparsewatch-sort-", dir=tmp_dir) as folder:
        runs: list[Path] = []
        for seq, doc in enumerate(documents):
            run.append((int(doc["timestamp"]), seq, doc))
            if len(run) >= chunk_size:
                runs.append(_spill(run, Path(folder)))
                run = []
        if not runs:
            run.sort(key=lambda item: (item[0], item[1]))
            for _, _, doc in run:
                yield doc
            return
        if run:
            runs.append(_spill(run, Path(folder)))
            run = []
        for _, _, doc in _merged(_fewer_runs(runs, Path(folder))):
            yield doc
