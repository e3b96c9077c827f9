"""The Reuters-21578 SGML reader (:func:`read_reuters_sgml`): one record per ``REUTERS``
element of a ``reut2-NNN.sgm`` file."""

from __future__ import annotations

import bisect
import codecs
import html
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparsewatch.consumers.messages import RecordError
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.numbered_lines import numbered_lines, whole_line
from sparsewatch.replay.source_records import RAW_CHARS, Rejected, SourceRecord

# an element's content holds no other REUTERS start tag: one without its end tag stays unmatched
# (and is reported) instead of swallowing the next story up to that one's end tag
_REUTERS = re.compile(r"<REUTERS\b([^>]*)>((?:(?!<REUTERS\b).)*?)</REUTERS>", re.DOTALL)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_D = re.compile(r"<D>(.*?)</D>", re.DOTALL)
_UNPROC = re.compile(r"<TEXT\b[^>]*\bTYPE\s*=\s*\"?UNPROC\"?[^>]*>(.*?)</TEXT>", re.DOTALL)


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


# A story's DATE: its date and time, "possibly followed by some non-date noise material" (the
# collection's README): ``27-MAR-1987 13:49:54.59E RM``, ``9-APR-1987 00:00:00.00    # date added
# by S Finch as guesswork``
_REUTERS_DATE = re.compile(
    r"(\d{1,2}-[A-Za-z]{3}-\d{4}\s+\d{1,2}:\d{2}:\d{2}(?:\.\d+)?)(?=\D|$)(.*)", re.DOTALL
)


def _reuters_date(date: str) -> dict[str, str]:
    """The ``date`` field of a story's DATE (its leading ``d-MON-yyyy hh:mm:ss.ff``), and the
    noise after it as ``date_note`` (read as a time zone, it rejected the story); a DATE that
    the timestamp parser reads whole (a time zone after the time), or of another form, stays
    whole."""
    match = _REUTERS_DATE.fullmatch(date)
    if match is None or not match.group(2).strip():
        return {"date": date}
    try:
        parse_timestamp_ms(date)  # a time zone after the time, as other SGML may give
        return {"date": date}
    except RecordError:
        pass
    return {"date": match.group(1), "date_note": match.group(2).strip()}


def read_reuters_sgml(path: Path) -> Iterator[SourceRecord | Rejected]:
    """Reuters-21578 ``reut2-NNN.sgm``: fields ``id`` (NEWID), ``date``, ``title``, ``body``,
    ``topics``, ``places``, ``lewissplit``, ``cgisplit``, ``topics_attr``, ``dateline``, and
    ``date_note`` for the noise that follows the date and time in some stories' DATE (which
    goes to the document's ``meta``).

    The collection is ASCII with a few stray bytes: it is decoded as UTF-8, each byte that is
    not UTF-8 as Latin-1 (read all as Latin-1, a story in UTF-8, or in UTF-16, which is read as
    UTF-8, had its accents turned into two characters: ``CafÃ©``).
    """
    source = str(path)
    chunks: list[bytes] = []
    error: tuple[int, str] | None = None
    for number, line, message in numbered_lines(path):
        if line is None:
            error = (number, message)
            break
        if (whole := line if isinstance(line, bytes) else whole_line(line)) is not None:
            chunks.append(whole)
    text = b"".join(chunks).decode("utf-8", _LATIN1_FALLBACK)
    line_of = _line_index(text)
    end = 0
    if not text.strip() and error is None:
        yield Rejected(source, 1, "empty file (no records)")
    elif text.strip() and "<REUTERS" not in text:
        yield Rejected(source, 1, _NOT_REUTERS, text.lstrip()[:RAW_CHARS])
    for match in _REUTERS.finditer(text):
        yield from _unterminated(source, text, end, match.start(), line_of)
        end = match.end()
        number = line_of(match.start())
        attrs = dict(_ATTR.findall(match.group(1)))
        block = match.group(2)
        if "NEWID" not in attrs:
            yield Rejected(source, number, "REUTERS element without NEWID", block[:RAW_CHARS])
            continue
        try:
            fields = {
                "id": attrs["NEWID"],
                **_reuters_date(_sgml_text(_tag(block, "DATE"))),
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
            yield Rejected(source, number, str(exc), block[:RAW_CHARS])
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
        yield Rejected(source, line_of(at), reason, text[at : at + RAW_CHARS])


def _line_index(text: str) -> Any:
    """A function mapping a character offset of ``text`` to its 1-based line number."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    return lambda offset: bisect.bisect_right(starts, offset)
