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
from collections.abc import Generator, Iterable, Iterator
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
    nothing). An array's elements are read as they are iterated, from a window of the file
    (:class:`_JsonArray`): the whole file was held before the first. A damaged spot in an array
    whose elements start on lines after its ``[`` (a pretty-printed export) rejects only the
    element it lies in: one stray byte, a cut gzip or a missing ``]`` had the file read line by
    line, every record lost."""
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
) -> tuple[Iterator[_Element] | None, Iterable[_Line]]:
    """``(elements, [])`` when ``lines`` (:func:`_lines`) are one JSON array: the (line where it
    starts, UTF-8 bytes) of each element, or the rejection of a damaged one, read from ``lines``
    as they are iterated (:class:`_JsonArray`). Otherwise ``(None, the lines read from
    ``lines``)``, to be read as JSON lines before the rest of ``lines``: ``lines`` are read no
    further than the first non-blank one when it does not start with ``[``, nor than a line
    before it that is not UTF-8 or the error that ends them; a file that starts with ``[`` but is
    no JSON array is read line by line, which says what is wrong where. Past the ``[``, a line
    that is not UTF-8 is kept (its stray bytes as surrogate escapes), and an error that ends the
    lines ends the text."""
    texts: list[str] = []  # the blank lines before the array
    for entry in lines:
        try:
            text = None if entry[1] is None else entry[1].decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None:  # the error that ends the lines, or a line that is not UTF-8
            return None, itertools.chain(_utf8_lines(texts, 1), [entry])
        texts.append(text)
        if text.strip():
            if not text.lstrip().startswith("["):
                return None, _utf8_lines(texts, 1)
            return _JsonArray(source, text, entry[0], lines).read()
    return None, _utf8_lines(texts, 1)


def _utf8_lines(texts: list[str], first: int) -> Iterator[_Line]:
    """``texts`` as :func:`_lines` yielded them (stray bytes restored), the first being line
    ``first``."""
    for number, text in enumerate(texts, start=first):
        yield number, text.encode("utf-8", "surrogateescape"), ""


_STRAY_BYTE = re.compile("[\udc80-\udcff]")  # a byte that was not UTF-8, as decoded
# How much more of the file an array's text window reads when it needs more (characters, at
# least), and how much text before the element being read it keeps
_WINDOW_CHARS = 1 << 16


class _NoArrayError(Exception):
    """The text that :class:`_JsonArray` reads is no JSON array."""


class _JsonArray:
    """The elements of the JSON array whose first line (its ``[``) is ``text``, line number
    ``first``, read from ``lines`` (:func:`_lines`, the rest of the file) as they are needed,
    for :func:`_json_array_elements`. Positions are of the file's text from ``text`` on; the
    class holds only a window of it (:attr:`text`, from :attr:`offset`, whole lines): an element
    is decoded from the lines read so far, reading on while the decoder runs out of text, and
    once the text is an array (below) what lies before the element being read is let go. The
    whole file was held before the first element (215 MiB for a 100 MiB export).

    Once an element starts on a line after the ``[`` (a pretty-printed array: the export's
    form), the text is an array whatever is wrong in it, and each damaged spot costs only the
    element it lies in: an element with a byte that is not UTF-8 is rejected alone; one that is
    no JSON is rejected with everything up to the next line that starts an element at the same
    indentation (or, when none, with the rest of the file); a missing ``,`` between two elements
    costs nothing; text after the closing ``]`` is rejected (another array after it is read
    too); an array that the file ends inside keeps its elements (the cut one, or a missing
    ``]``, is rejected). Before that, anything wrong means the text is no JSON array:
    :meth:`read` returns ``None``, for it to be read line by line (JSON lines that start with
    ``[1, 2``); the elements and lines read until then are held.
    """

    def __init__(self, source: str, text: str, first: int, lines: Iterator[_Line]) -> None:
        self.source = source
        self.lines = lines
        self.text = text  # the window
        self.offset = 0  # the position of the window's start
        self.line0 = first  # the number of the window's first line
        self.starts = [0, len(text)]  # where each line of the window starts, and where it ends
        self.after_bracket = len(text)  # where the line after the '[' starts
        self.error: _Line | None = None  # the error entry that ended the lines
        self.ended = False  # whether lines are read to their end
        self.decoder = json.JSONDecoder()
        self.established = False  # an element started on a line after the '['

    def read(self) -> tuple[Iterator[_Element] | None, Iterable[_Line]]:
        """``(the elements, [])``, or ``(None, the lines read)`` when the text is no JSON array
        (see the class doc): the elements are read, and held, until an element starts on a line
        after the ``[``, or the file ends; the rest as they are iterated."""
        elements = self._elements()
        held: list[_Element] = []
        try:
            while not self.established:
                held.append(next(elements))
        except StopIteration:
            return iter(held), []
        except _NoArrayError:  # (nothing was let go)
            texts = [self.text[a:b] for a, b in itertools.pairwise(self.starts)]
            read = _utf8_lines(texts, self.line0)
            return None, itertools.chain(read, [] if self.error is None else [self.error])
        return itertools.chain(held, elements), []

    def line(self, position: int) -> int:
        """The number of the line that ``position`` (in the window) lies on."""
        return self.line0 - 1 + bisect.bisect_right(self.starts, position)

    def _line_start(self, position: int) -> int:
        """Where the line that ``position`` (in the window) lies on starts."""
        return self.starts[self.line(position) - self.line0]

    def _slice(self, start: int, stop: int) -> str:
        """The text from ``start`` to ``stop`` (both in the window)."""
        return self.text[start - self.offset : stop - self.offset]

    def _read(self, chars: int) -> bool:
        """Read at least ``chars`` characters more of the file (whole lines; fewer at its end)
        into the window; whether any came."""
        if self.ended:
            return False
        added: list[str] = []
        starts = self.starts
        end = goal = starts[-1]
        goal += chars
        for entry in self.lines:
            if entry[1] is None:
                self.error = entry
                break
            text = entry[1].decode("utf-8", _SURROGATES)
            added.append(text)
            end += len(text)
            starts.append(end)
            if end >= goal:
                break
        else:
            self.ended = True
        self.ended = self.ended or self.error is not None
        self.text += "".join(added)
        return bool(added)

    def _read_to_end(self) -> None:
        """Read the rest of the file, letting it go, for the error that may end it."""
        if not self.ended:
            self.error = next((entry for entry in self.lines if entry[1] is None), None)
            self.ended = True

    def _holds(self, position: int) -> bool:
        """Whether the file's text goes on to ``position`` (read into the window)."""
        while position >= self.starts[-1]:
            if not self._read(_WINDOW_CHARS):
                return False
        return True

    def _startswith(self, prefix: str | tuple[str, ...], position: int) -> bool:
        """Whether the text at ``position`` starts with ``prefix`` (one character)."""
        return self._holds(position) and self.text.startswith(prefix, position - self.offset)

    def _skip(self, position: int, blanks: str = " \t\r\n") -> int:
        """The first position from ``position`` on that is none of ``blanks`` (JSON whitespace),
        or where the text ends."""
        while True:
            position = self.offset + _skip_blank(self.text, position - self.offset, blanks)
            if position < self.starts[-1] or not self._read(_WINDOW_CHARS):
                return position

    def _decode(self, start: int) -> int:
        """Where the JSON value at ``start`` ends, the window read on while the decoder runs out
        of text (twice as much each time). A JSONDecodeError (its ``pos`` in the window), a
        RecursionError (nested too deeply) or another ValueError when it is no JSON value."""
        while True:
            try:
                return self.decoder.raw_decode(self.text, start - self.offset)[1] + self.offset
            except json.JSONDecodeError as exc:
                if _skip_blank(self.text, exc.pos) < len(self.text):
                    raise
                if not self._read(max(self.starts[-1] - start, _WINDOW_CHARS)):
                    raise

    def _let_go(self, position: int) -> None:
        """Let go of the window's lines before ``position``'s, when the text is an array and
        they are more than :data:`_WINDOW_CHARS`."""
        if self.established and position - self.offset > _WINDOW_CHARS:
            index = self.line(position) - self.line0
            self.text = self.text[self.starts[index] - self.offset :]
            self.offset = self.starts[index]
            del self.starts[:index]
            self.line0 += index

    def _elements(self) -> Iterator[_Element]:
        """The elements (see the class doc); a :class:`_NoArrayError` when the text is no JSON
        array."""
        position: int | None = self._skip(self.text.index("[") + 1)
        while position is not None:  # an array (another may follow the first)
            position = yield from self._array(position)

    def _array(self, position: int) -> Generator[_Element, None, int | None]:
        """The elements of the array whose first starts at ``position``; returns where the
        array after it starts, ``None`` when none does. A :class:`_NoArrayError` when the text
        is no JSON array."""
        while not self._startswith("]", position):
            if not self._holds(position):  # the file ends inside the array
                self._require_array()
                yield self._unclosed()
                return None
            if position >= self.after_bracket:
                self.established = True
            self._let_go(position)
            element, resume = self._element(position)
            yield element
            if resume is None:
                return None
            position = self._skip(resume)
            if self._startswith(",", position):  # (a missing comma costs nothing)
                position = self._skip(position + 1)
            elif not self._startswith("]", position):
                self._require_array()
        position = self._skip(position + 1)
        if not self._holds(position):
            if self.error is not None:  # (after the array: the file's end is lost)
                yield Rejected(self.source, self.error[0], self.error[2])
            return None
        self._require_array()  # something after the closing bracket
        if not self._startswith("[", position):
            yield self._trailing(position)
            return None
        return self._skip(position + 1)

    def _require_array(self) -> None:
        """A :class:`_NoArrayError` for something wrong before the text is :attr:`established`."""
        if not self.established:
            raise _NoArrayError

    def _element(self, start: int) -> tuple[_Element, int | None]:
        """The element at ``start`` (or its rejection), and where reading goes on, ``None``
        when nowhere (the rest of the text rejected). A :class:`_NoArrayError` when the text is
        no JSON array (not :attr:`established`)."""
        try:
            end = self._decode(start)
        except (ValueError, RecursionError) as exc:  # not JSON, nested too deeply
            self._require_array()
            reason = self._invalid(exc)
            resume = self._next_element(start)
            return self._damaged(start, resume, reason), resume
        stray = _STRAY_BYTE.search(self.text, start - self.offset, end - self.offset)
        if stray is None:
            return (self.line(start), self._slice(start, end).encode("utf-8")), end
        self._require_array()
        at = stray.start() + self.offset
        column = len(self._slice(self._line_start(at), at).encode("utf-8", _SURROGATES))
        reason = f"not UTF-8 (line {self.line(at)}, byte {column + 1})"
        return Rejected(self.source, self.line(start), reason, self._raw(start, end)), end

    def _invalid(self, exc: Exception) -> str:
        """Why an element is no JSON (``exc``, from :meth:`_decode`)."""
        if not isinstance(exc, json.JSONDecodeError):
            return "invalid JSON: nested too deeply"
        at = exc.pos + self.offset
        column = at - self._line_start(at) + 1
        return f"invalid JSON: {exc.msg} (line {self.line(at)}, column {column})"

    def _next_element(self, start: int) -> int | None:
        """Where the next element after the damaged one at ``start`` starts: the first later
        line that starts with ``{`` at ``start``'s indentation (any, when ``start`` does not
        start its line) and that holds a whole JSON value followed by ``,`` or ``]``."""
        index = self.line(start) - self.line0  # of start's line in starts
        line_start = self.starts[index]
        indent = start - line_start if not self._slice(line_start, start).strip() else None
        while True:
            index += 1
            while index >= len(self.starts) - 1:
                if not self._read(_WINDOW_CHARS):
                    return None
            candidate = self.starts[index]
            at = self._skip(candidate, " \t")
            if not self._startswith("{", at) or (indent is not None and at - candidate != indent):
                continue
            try:
                end = self._decode(at)
            except (ValueError, RecursionError):
                continue
            after = self._skip(end)
            if self._startswith((",", "]"), after) or not self._holds(after):
                return at

    def _damaged(self, start: int, resume: int | None, reason: str) -> Rejected:
        """The rejection of the damaged element at ``start`` (no JSON, ``reason`` says why), with
        the text up to ``resume`` (``None``: to the end)."""
        first_line = self.line(start)
        stop = self.starts[-1] if resume is None else resume
        last_line = self.line(start + max(len(self._slice(start, stop).rstrip()) - 1, 0))
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
        return Rejected(self.source, self.line(max(self.starts[-1] - 1, 0)), reason)

    def _trailing(self, position: int) -> Rejected:
        """The rejection of the text after the array's closing bracket (from ``position``)."""
        raw = self._raw(position, None)
        self._read_to_end()
        reason = "text after the JSON array's closing ']'"
        if self.error is not None:
            reason += f" ({self.error[2]})"
        return Rejected(self.source, self.line(position), reason, raw)

    def _raw(self, start: int, stop: int | None) -> str:
        """The text from ``start`` to ``stop`` (``None``: the file's end) for an error report
        (stray bytes escaped)."""
        if stop is None:
            self._holds(start + _RAW_CHARS - 1)
        end = min(self.starts[-1] if stop is None else stop, start + _RAW_CHARS)
        return _raw(self._slice(start, end).encode("utf-8", _SURROGATES))


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
