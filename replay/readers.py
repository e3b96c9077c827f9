"""Corpus readers for the replay tool: JSONL, CSV and Reuters-21578 SGML, plain or gzip.

Each reader yields, per record, either a :class:`SourceRecord` (the raw fields, with the source file
and the line where the record starts) or a :class:`Rejected` (why it could not be read, where);
:func:`read_records` picks the reader by the file name (:func:`detect_format`). A file is read as
UTF-8, or as UTF-16 or UTF-32 after its byte-order mark, with any line ending. What a record's
fields become is :func:`~sparsewatch.consumers.field_mapping.to_document`'s to say;
:func:`~sparsewatch.replay.documents.read_documents` chains both over many files.
"""

from __future__ import annotations

import bisect
import codecs
import csv
import gzip
import html
import io
import itertools
import json
import re
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparsewatch.consumers.field_mapping import parse_json_object
from sparsewatch.consumers.messages import RecordError
from sparsewatch.consumers.timestamps import parse_timestamp_ms

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


def _open_binary(path: Path) -> io.BufferedIOBase:
    """The file's bytes, decompressed when it starts with the gzip magic number. The file is
    read once, from its start to its end: a pipe, a FIFO or ``/dev/stdin`` is read as a regular
    file is."""
    raw = path.open("rb")
    magic = raw.peek(2)[:2]
    if magic == b"\x1f":  # a pipe can give its first byte alone: wait for the second
        magic = raw.read(2)
        raw = io.BufferedReader(_Replayed(magic, raw), _CHUNK_BYTES)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return raw


class _Replayed(io.RawIOBase):
    """A stream whose first bytes (``head``), read to tell the file's kind, are read again."""

    def __init__(self, head: bytes, rest: io.BufferedReader) -> None:
        super().__init__()
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            size = min(len(buffer), len(self._head))
            buffer[:size] = self._head[:size]
            self._head = self._head[size:]
            return size
        return self._rest.readinto1(buffer)

    def close(self) -> None:
        self._rest.close()
        super().close()


# How much of a file's start tells its line ending (at least: up to its first line end, when its
# first line is longer)
_SNIFF_BYTES = 1 << 20
_CHUNK_BYTES = 1 << 16  # how much is read at a time past it
# byte-order marks of the UTF-16 and UTF-32 text Windows tools write (UTF-32's first)
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_READ_ERRORS = (EOFError, OSError, zlib.error)  # a damaged or truncated gzip


def _byte_lines(fh: io.BufferedIOBase) -> Iterator[bytes]:
    """The lines of ``fh`` as UTF-8 bytes with their line ends; an error reading the file is
    raised after the lines before it. A file of UTF-16 or UTF-32 with a byte-order mark is
    decoded (:func:`_wide_lines`); a file whose start (:data:`_SNIFF_BYTES`, or up to its first
    line end) has CRs but no LF (classic Mac OS) is split at CRs (it was read as one line, one
    rejected record); any other at LFs."""
    head, wide, error = _file_start(fh)
    if wide:
        yield from _wide_lines(bytes(head), fh, wide, error)
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
    while chunk := fh.read1(_CHUNK_BYTES):
        *complete, rest = chunk.split(end)
        for piece in complete:
            pending.append(piece)
            yield b"".join(pending) + end
            pending.clear()
        pending.append(rest)
    if last := b"".join(pending):
        yield last


def _file_start(fh: io.BufferedIOBase) -> tuple[bytearray, str, BaseException | None]:
    """``(head, encoding, error)``: the start of ``fh`` that tells its line ending, and the
    encoding its byte-order mark names when it is UTF-16 or UTF-32 (``""``: UTF-8); the error that
    stopped reading it, to be raised after the lines it holds."""
    head = bytearray()
    error: BaseException | None = None
    try:
        while len(head) < _SNIFF_BYTES and (chunk := fh.read1(_SNIFF_BYTES - len(head))):
            head += chunk
    except _READ_ERRORS as exc:
        error = exc
    wide = next((encoding for bom, encoding in _WIDE_BOMS if head.startswith(bom)), "")
    if not wide and error is None:
        try:
            _read_past_first_line_end(head, fh)
        except _READ_ERRORS as exc:
            error = exc
    return head, wide, error


def _read_past_first_line_end(head: bytearray, fh: io.BufferedIOBase) -> None:
    """Read on from ``fh`` into ``head`` (a file's start) until it holds a line end, or the file
    ends: a first line longer than :data:`_SNIFF_BYTES` (a file of CRs was split at LFs, all its
    lines one rejected record). A CR at the end of ``head`` needs the byte after it (CRLF?). Each
    chunk is searched once."""
    clean = 0  # head[:clean] holds no line end
    while head.find(b"\n", clean) < 0 and head.find(b"\r", clean, len(head) - 1) < 0:
        clean = max(len(head) - 1, 0)
        if not (chunk := fh.read1(_CHUNK_BYTES)):
            return
        head += chunk


_NEWLINE = re.compile(r"\r\n|\r|\n")


def _wide_lines(
    head: bytes, fh: io.BufferedIOBase, encoding: str, error: BaseException | None
) -> Iterator[bytes]:
    """The lines, ending at CR, LF or CRLF, of UTF-16 or UTF-32 text (``head``, then the rest of
    ``fh``) as UTF-8; an unpaired surrogate stays (a line that is not UTF-8), and text that ends
    inside a character is a UnicodeDecodeError after the lines before it."""
    decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")

    def chunks() -> Iterator[bytes]:
        yield head
        if error is not None:
            raise error
        while chunk := fh.read1(_CHUNK_BYTES):
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


def read_jsonl(path: Path) -> Iterator[SourceRecord | Rejected]:
    """One JSON object per line; blank lines are skipped. A file that is one JSON array (what
    ``sparsewatch documents --format json`` and many tools export) yields its elements, each by
    the line it starts on (every line of such a file was rejected, the export could not be
    replayed); a file that starts with ``[`` but is no JSON array is read line by line. The file
    is read once (:func:`_json_array_elements` tells an array from its lines as they come): a
    pipe's first mebibyte was read to tell, then lost (``cat f.jsonl | ... /dev/stdin`` read
    nothing). A damaged spot in an array whose elements start on lines after its ``[`` (a
    pretty-printed export) rejects only the element it lies in (:class:`_JsonArray`): one stray
    byte, a cut gzip or a missing ``]`` had the file read line by line, every record lost."""
    source = str(path)
    lines = _lines(path)
    elements, read = _json_array_elements(lines, source)
    if elements is not None:
        for element in elements:
            if isinstance(element, Rejected):
                yield element
                continue
            number, text = element
            try:
                yield SourceRecord(source, number, parse_json_object(text, "array element"))
            except RecordError as exc:
                yield Rejected(source, number, str(exc), _raw(text))
        return
    for number, line, error in itertools.chain(read, lines):
        if line is None:
            yield Rejected(source, number, error)
            return
        if not line.strip():
            continue
        try:
            yield SourceRecord(source, number, parse_json_object(line))
        except RecordError as exc:
            yield Rejected(source, number, str(exc), _raw(line))


_Line = tuple[int, bytes | None, str]  # what _lines yields
_Element = tuple[int, bytes] | Rejected  # an array element (line, UTF-8 bytes), or why not


def _json_array_elements(
    lines: Iterator[_Line], source: str
) -> tuple[list[_Element] | None, Iterable[_Line]]:
    """``(elements, [])`` when ``lines`` (:func:`_lines`, read to their end) are one JSON array:
    the (line where it starts, UTF-8 bytes) of each element, or the rejection of a damaged one
    (:class:`_JsonArray`). Otherwise ``(None, the lines read from ``lines``)``, to be read as
    JSON lines before the rest of ``lines``: ``lines`` are read no further than the first
    non-blank one when it does not start with ``[``, nor than a line before it that is not UTF-8
    or the error that ends them; a file that starts with ``[`` but is no JSON array is read line
    by line, which says what is wrong where. Past the ``[``, a line that is not UTF-8 is kept
    (its stray bytes as surrogate escapes), and an error that ends the lines ends the text."""
    texts: list[str] = []  # the lines read (stray bytes as surrogate escapes)
    first = 0  # the number of the first non-blank line
    error: _Line | None = None  # the error entry that ended the lines
    for number, line, message in lines:
        if line is None:
            error = (number, line, message)
            if not first:
                return None, itertools.chain(_utf8_lines(texts, 1), [error])
            break
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            if not first:
                return None, itertools.chain(_utf8_lines(texts, 1), [(number, line, message)])
            text = line.decode("utf-8", "surrogateescape")
        texts.append(text)
        if not first and text.strip():
            if not text.lstrip().startswith("["):
                return None, _utf8_lines(texts, 1)
            first = number
    if not first:
        return None, _utf8_lines(texts, 1)
    del texts[: first - 1]  # the blank lines before the array
    elements = _JsonArray(source, texts, first, error).split()
    if elements is None:
        return None, itertools.chain(_utf8_lines(texts, first), [] if error is None else [error])
    return elements, []


def _utf8_lines(texts: list[str], first: int) -> Iterator[_Line]:
    """``texts`` as :func:`_lines` yielded them (stray bytes restored), the first being line
    ``first``."""
    for number, text in enumerate(texts, start=first):
        yield number, text.encode("utf-8", "surrogateescape"), ""


_STRAY_BYTE = re.compile("[\udc80-\udcff]")  # a byte that was not UTF-8, as decoded


class _NoArrayError(Exception):
    """The text that :class:`_JsonArray` reads is no JSON array."""


class _JsonArray:
    """The elements of the JSON array that ``texts`` (lines, the first being line ``first``,
    ending where ``error``, a :func:`_lines` error entry, stopped the file) hold, for
    :func:`_json_array_elements`.

    Once an element starts on a line after the ``[`` (a pretty-printed array: the export's
    form), the text is an array whatever is wrong in it, and each damaged spot costs only the
    element it lies in: an element with a byte that is not UTF-8 is rejected alone; one that is
    no JSON is rejected with everything up to the next line that starts an element at the same
    indentation (or, when none, with the rest of the file); a missing ``,`` between two elements
    costs nothing; text after the closing ``]`` is rejected (another array after it is read
    too); an array that the file ends inside keeps its elements (the cut one, or a missing
    ``]``, is rejected). Before that, anything wrong means the text is no JSON array:
    :meth:`split` returns ``None``, for it to be read line by line (JSON lines that start with
    ``[1, 2``).
    """

    def __init__(self, source: str, texts: list[str], first: int, error: _Line | None) -> None:
        self.source = source
        self.text = "".join(texts)
        self.first = first
        self.error = error
        self.starts = [0]  # where each line starts in text (and where the text ends)
        for line_text in texts:
            self.starts.append(self.starts[-1] + len(line_text))
        self.decoder = json.JSONDecoder()
        self.established = False  # an element started on a line after the '['

    def line(self, position: int) -> int:
        """The number of the line that ``position`` (of :attr:`text`) lies on."""
        return self.first - 1 + bisect.bisect_right(self.starts, position)

    def split(self) -> list[_Element] | None:
        """The elements, or ``None`` when the text is no JSON array (see the class doc)."""
        elements: list[_Element] = []
        position: int | None = _skip_blank(self.text, self.text.index("[") + 1)
        try:
            while position is not None:  # an array (another may follow the first)
                position = self._array(position, elements)
        except _NoArrayError:
            return None
        return elements

    def _array(self, position: int, elements: list[_Element]) -> int | None:
        """Read the elements of the array whose first starts at ``position`` into
        ``elements``; where the array after it starts, ``None`` when none does. A
        :class:`_NoArrayError` when the text is no JSON array."""
        text = self.text
        after_bracket = self.starts[1] if len(self.starts) > 1 else len(text)
        while not text.startswith("]", position):
            if position >= len(text):  # the file ends inside the array
                self._require_array()
                elements.append(self._unclosed())
                return None
            if position >= after_bracket:
                self.established = True
            resume = self._element(position, elements)
            if resume is None:
                return None
            position = _skip_blank(text, resume)
            if text.startswith(",", position):  # (a missing comma costs nothing)
                position = _skip_blank(text, position + 1)
            elif not text.startswith("]", position):
                self._require_array()
        position = _skip_blank(text, position + 1)
        if position >= len(text):
            if self.error is not None:  # (after the array: the file's end is lost)
                elements.append(Rejected(self.source, self.error[0], self.error[2]))
            return None
        self._require_array()  # something after the closing bracket
        if not text.startswith("[", position):
            elements.append(self._trailing(position))
            return None
        return _skip_blank(text, position + 1)

    def _require_array(self) -> None:
        """A :class:`_NoArrayError` for something wrong before the text is :attr:`established`."""
        if not self.established:
            raise _NoArrayError

    def _element(self, start: int, elements: list[_Element]) -> int | None:
        """Read the element at ``start`` into ``elements`` (or its rejection); where reading
        goes on, ``None`` when nowhere (the rest of the text rejected). A :class:`_NoArrayError`
        when the text is no JSON array (not :attr:`established`)."""
        text = self.text
        try:
            _, end = self.decoder.raw_decode(text, start)
        except (ValueError, RecursionError) as exc:  # not JSON, nested too deeply
            self._require_array()
            resume = self._next_element(start)
            elements.append(self._damaged(start, resume, exc))
            return resume
        stray = _STRAY_BYTE.search(text, start, end)
        if stray is not None:
            self._require_array()
            at = stray.start()
            column = len(
                text[self.starts[self.line(at) - self.first] : at].encode("utf-8", _SURROGATES)
            )
            reason = f"not UTF-8 (line {self.line(at)}, byte {column + 1})"
            elements.append(Rejected(self.source, self.line(start), reason, self._raw(start, end)))
        else:
            elements.append((self.line(start), text[start:end].encode("utf-8")))
        return end

    def _next_element(self, start: int) -> int | None:
        """Where the next element after the damaged one at ``start`` starts: the first later
        line that starts with ``{`` at ``start``'s indentation (any, when ``start`` does not
        start its line) and that holds a whole JSON value followed by ``,`` or ``]``."""
        text = self.text
        index = self.line(start) - self.first  # of start's line in starts
        line_start = self.starts[index]
        indent = start - line_start if not text[line_start:start].strip() else None
        for candidate in self.starts[index + 1 : -1]:
            at = _skip_blank(text, candidate, " \t")
            if not text.startswith("{", at) or (indent is not None and at - candidate != indent):
                continue
            try:
                _, end = self.decoder.raw_decode(text, at)
            except (ValueError, RecursionError):
                continue
            after = _skip_blank(text, end)
            if text.startswith((",", "]"), after) or after >= len(text):
                return at
        return None

    def _damaged(self, start: int, resume: int | None, exc: Exception) -> Rejected:
        """The rejection of the damaged element at ``start`` (no JSON, ``exc`` says why), with
        the text up to ``resume`` (``None``: to the end)."""
        first_line = self.line(start)
        if isinstance(exc, json.JSONDecodeError):
            where = self.line(exc.pos), exc.pos - self.starts[self.line(exc.pos) - self.first]
            reason = f"invalid JSON: {exc.msg} (line {where[0]}, column {where[1] + 1})"
        else:
            reason = "invalid JSON: nested too deeply"
        stop = len(self.text) if resume is None else resume
        last_line = self.line(start + max(len(self.text[start:stop].rstrip()) - 1, 0))
        if resume is None and self.error is not None:
            reason = f"{self.error[2]}, inside the array element that starts on line {first_line}"
        elif resume is None:
            reason += f"; no element could be read after it (lines {first_line}-{last_line})"
        elif last_line > first_line:
            reason += f" (lines {first_line}-{last_line} skipped)"
        return Rejected(self.source, first_line, reason, self._raw(start, stop))

    def _unclosed(self) -> Rejected:
        """The rejection that says the file ended inside the array, after an element."""
        if self.error is not None:
            return Rejected(self.source, self.error[0], self.error[2])
        reason = "the file ends inside the JSON array (its closing ']' is missing)"
        return Rejected(self.source, self.line(max(len(self.text) - 1, 0)), reason)

    def _trailing(self, position: int) -> Rejected:
        """The rejection of the text after the array's closing bracket (from ``position``)."""
        reason = "text after the JSON array's closing ']'"
        if self.error is not None:
            reason += f" ({self.error[2]})"
        return Rejected(self.source, self.line(position), reason, self._raw(position, None))

    def _raw(self, start: int, stop: int | None) -> str:
        """The text from ``start`` to ``stop`` for an error report (stray bytes escaped)."""
        end = len(self.text) if stop is None else stop
        piece = self.text[start : min(end, start + _RAW_CHARS)].encode("utf-8", _SURROGATES)
        return _raw(piece)


_SURROGATES = "surrogateescape"


def _skip_blank(text: str, position: int, blanks: str = " \t\r\n") -> int:
    """The first position from ``position`` on that is none of ``blanks`` (JSON whitespace)."""
    while position < len(text) and text[position] in blanks:
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
    record = _CsvRecord(source)
    header: list[str] | None = None
    header_rejected = ""
    for number, row, reason in _csv_rows(path, record):
        if reason:
            yield Rejected(source, number, reason, record.raw())
            if header is None and not header_rejected:
                header_rejected = f"header row (line {number}) rejected: {reason}"
        elif not any(cell.strip() for cell in row):
            continue  # a blank line
        elif header_rejected:
            yield Rejected(source, number, header_rejected, record.raw())
        elif header is None:
            header = [h.strip() for h in row]
            header_rejected = _repeated_column(header, number)
            if header_rejected:  # a record would keep one of its two values, silently
                yield Rejected(source, number, header_rejected, record.raw())
        elif len(row) != len(header):
            reason = f"{len(row)} fields where the header has {len(header)}"
            yield Rejected(source, number, reason, record.raw())
        else:
            yield SourceRecord(source, number, dict(zip(header, row, strict=True)))
    yield from record.damage
    if header is None and not header_rejected and not record.damage:
        yield Rejected(source, 1, "empty CSV file (no header row)")


def _repeated_column(header: list[str], number: int) -> str:
    """Why the header row (line ``number``) is rejected for naming a column twice; ``""`` when
    it names each column once."""
    twice = next((h for i, h in enumerate(header) if h and h in header[:i]), None)
    return "" if twice is None else f"header row (line {number}) names column '{twice}' twice"


class _CsvRecord:
    """The CSV record being parsed: its lines, where they are not UTF-8 and whether the file
    ended inside it; and where a damaged gzip stopped."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[tuple[int, bytes]] = []  # the lines of the record being parsed
        self.not_utf8: list[str] = []  # where those lines are not UTF-8
        self.ended = False  # the file's lines are all read
        self.damage: list[Rejected] = []  # where a damaged gzip stops

    def start(self) -> None:
        """Forget the record parsed last."""
        self.lines.clear()
        self.not_utf8.clear()

    def what_is_wrong(self, error: str) -> str:
        """What is wrong with the record just parsed (``error``: the parser's complaint), if
        anything."""
        problems = [error] if error else []
        if self.not_utf8:
            problems.append(f"not UTF-8 ({'; '.join(self.not_utf8)})")
        if self.ended:  # the parser returns a record at the end of the file only inside quotes
            problems.append("the file ends inside a quoted field (a missing closing quote?)")
        return "; ".join(problems)

    def raw(self) -> str:
        """The record just parsed as it is in the file."""
        return _raw(b"".join(line for _, line in self.lines))


def _csv_text(path: Path, record: _CsvRecord) -> Iterator[str]:
    """The lines of ``path`` as the csv parser reads them (a line that is not UTF-8 with its
    stray bytes as surrogate escapes), each noted in ``record``."""
    for number, line, error in _lines(path):
        if line is None:
            record.damage.append(Rejected(record.source, number, error))
            break
        record.lines.append((number, line))
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            record.not_utf8.append(f"line {number}, byte {exc.start}")
            yield line.decode("utf-8", "surrogateescape")
    record.ended = True


def _skip_rest_of_record(record: _CsvRecord, text: Iterator[str]) -> None:
    """After a field over the limit (the parser dropped the rest of its line): read on in
    ``text`` while the record's last line ends inside a quoted field (:func:`_ends_in_quotes`),
    to the line that closes it."""
    inside = False
    for _, line in record.lines:
        inside = _ends_in_quotes(line, inside)
    while inside:
        try:
            next(text)
        except StopIteration:
            return
        inside = _ends_in_quotes(record.lines[-1][1], inside=True)


# The csv module's default dialect, which read_csv's parser uses: a quote opens a quoted field
# only as the field's first character (elsewhere it is a character of the field), "" in a quoted
# field is one quote, and the field goes on unquoted after its closing quote up to a comma or a
# line end.
_QUOTED_TEXT = re.compile(rb'(?:[^"]++|"")*+')  # a quoted field's text, up to its closing quote
_UNQUOTED_TEXT = re.compile(rb"[^,\r\n]*+")
_FIELDS = re.compile(rb'(?:(?:"(?:[^"]++|"")*+"|(?!"))[^,\r\n]*+,)*+')  # each with its comma


def _ends_in_quotes(line: bytes, inside: bool) -> bool:
    """Whether the csv parser, reading ``line`` (a line of a record: its first, or with
    ``inside`` one that starts inside a quoted field), is inside a quoted field at its end: the
    record goes on with the next line. Counting the record's quotes took one in an unquoted field
    (``5" tall``) for the start of a quoted one, and skipped every later record unreported."""
    position = 0
    if inside:
        position = _match_end(_QUOTED_TEXT, line, 0)
        if position == len(line):
            return True
        position = _match_end(_UNQUOTED_TEXT, line, position + 1)
        if not line.startswith(b",", position):
            return False
        position += 1
    position = _match_end(_FIELDS, line, position)  # to the line's last field
    if not line.startswith(b'"', position):
        return False
    return _match_end(_QUOTED_TEXT, line, position + 1) == len(line)


def _match_end(pattern: re.Pattern[bytes], line: bytes, position: int) -> int:
    """Where ``pattern`` (which matches anywhere, if only nothing) ends from ``position``."""
    match = pattern.match(line, position)
    return position if match is None else match.end()


def _csv_rows(path: Path, record: _CsvRecord) -> Iterator[tuple[int, list[str], str]]:
    """(line where it starts, fields, what is wrong or ``""``) of each record of ``path``, parsed
    one at a time: ``record`` describes the record last yielded until the next is asked for."""
    text = _csv_text(path, record)
    reader = csv.reader(text)
    while True:
        record.start()
        try:
            row, error = next(reader), ""
        except StopIteration:
            return
        except csv.Error as exc:
            row, error = [], f"invalid CSV: {exc}"
            if "field larger than field limit" in str(exc):
                _skip_rest_of_record(record, text)
                reader = csv.reader(text)
                if (last := record.lines[-1][0]) > record.lines[0][0]:
                    error += f" (the record, lines {record.lines[0][0]}-{last}, is skipped)"
        yield record.lines[0][0], row, record.what_is_wrong(error)


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
