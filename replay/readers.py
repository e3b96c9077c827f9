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
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparsewatch.consumers.field_mapping import MAX_MESSAGE_BYTES, parse_json_object
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


_GZIP = b"\x1f\x8b"
# Compressed files that replay does not read, by their magic number (gzip it reads)
_COMPRESSIONS = (
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
    *(  # "BZh", the block size, then a block's magic number or the stream's end's
        (b"BZh" + bytes([size]) + block, "bzip2")
        for size in b"123456789"
        for block in (b"1AY&SY", b"\x17rE8P\x90")
    ),
)
_MAGIC_NUMBERS = ((_GZIP, "gzip"), *_COMPRESSIONS)
_MAGIC_BYTES = max(len(magic) for magic, _ in _MAGIC_NUMBERS)


class _CompressedError(Exception):
    """The file is compressed otherwise than with gzip (its magic number says how)."""


def _open_binary(path: Path) -> io.BufferedIOBase:
    """The file's bytes, decompressed when it starts with the gzip magic number; a
    :class:`_CompressedError` when it starts with bzip2's, xz's, zstd's or zip's (each of its
    lines was rejected as garbage, "not UTF-8"). The file is read once, from its start to its
    end: a pipe, a FIFO or ``/dev/stdin`` is read as a regular file is."""
    raw = path.open("rb")
    magic = raw.peek(_MAGIC_BYTES)[:_MAGIC_BYTES]
    if magic and any(len(m) > len(magic) and m.startswith(magic) for m, _ in _MAGIC_NUMBERS):
        magic = raw.read(_MAGIC_BYTES)  # a pipe can give its first bytes alone: wait for more
        raw = io.BufferedReader(_Replayed(magic, raw), _CHUNK_BYTES)
    if magic.startswith(_GZIP):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    for number, compression in _COMPRESSIONS:
        if magic.startswith(number):
            raw.close()
            raise _CompressedError(
                f"{path} is {compression}-compressed: decompress it, or compress it with gzip, "
                "which replay reads"
            )
    return raw


class _Replayed(io.RawIOBase):
    """A stream whose first bytes (``head``), read to tell the file's kind or its line ending, are
    read again; then the rest, or ``error``, the error that stopped reading ``head``."""

    def __init__(
        self, head: bytes, rest: io.BufferedIOBase, error: BaseException | None = None
    ) -> None:
        super().__init__()
        self._head = memoryview(head)
        self._rest = rest
        self._error = error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            size = min(len(buffer), len(self._head))
            buffer[:size] = self._head[:size]
            self._head = self._head[size:]
            return size
        if self._error is not None:
            raise self._error
        return self._rest.readinto1(buffer)

    def close(self) -> None:
        self._rest.close()
        super().close()


# How much of a file's start tells its line ending (when it holds none, the end of its first line)
_SNIFF_BYTES = 1 << 20
_CHUNK_BYTES = 1 << 16  # how much is read at a time past it; a longer line is read in pieces
# byte-order marks of the UTF-16 and UTF-32 text Windows tools write (UTF-32's first)
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_READ_ERRORS = (EOFError, OSError, zlib.error)  # a damaged or truncated gzip
# what ends the reading of a file: a read error, or UTF-16 or UTF-32 that ends inside a character
_STOP_ERRORS = (*_READ_ERRORS, UnicodeDecodeError)
# The longest JSON line or array element read (bytes, its line end aside). A document message is
# at most MAX_MESSAGE_BYTES, the producer's limit, and JSON may write each of its bytes as a
# six-byte escape ("\u0041"): a longer record can only be rejected. It was read and parsed whole
# first, about eight times its size in memory: one of 200 MB ended the replay (MemoryError).
_MAX_RECORD_BYTES = 6 * MAX_MESSAGE_BYTES


class _CutShortError(Exception):
    """The error (the only argument) that stopped reading the file inside the line before it."""


class _LongLine:
    """A line longer than :data:`_CHUNK_BYTES`, read in pieces as it is iterated (once):
    :attr:`head`, its first piece (at least :data:`_CHUNK_BYTES`), then the rest (:attr:`rest`),
    the last piece with the line's end. The lines after it are read once it is read to its end
    (what was not iterated is read past). :attr:`error`: the error that stopped reading the file
    inside the line (it is cut short; the error follows it)."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.rest: Iterator[bytes] = iter(())
        self.error: BaseException | None = None

    def __iter__(self) -> Iterator[bytes]:
        yield self.head
        yield from self.rest

    def read_past(self) -> None:
        """Read what is left of the line, letting it go; a :class:`_CutShortError` when the
        file could not be read to its end."""
        for _ in self.rest:
            pass
        if self.error is not None:
            raise _CutShortError(self.error)

    def pieces(self, read: Callable[[], bytes], last: Callable[[bytes], int]) -> Iterator[bytes]:
        """The pieces after :attr:`head`, as ``read`` gives them: up to the one in which ``last``
        finds the line's end (its length up to the end, ``-1``: none), or the file's end."""
        while True:
            try:
                piece = read()
            except _STOP_ERRORS as exc:
                self.error = exc
                return
            if not piece:
                return
            end = last(piece)
            if end >= 0:
                yield piece[:end]
                return
            yield piece


def _byte_lines(fh: io.BufferedIOBase) -> Iterator[bytes | _LongLine]:
    """The lines of ``fh`` as UTF-8 bytes with their line ends, a line longer than
    :data:`_CHUNK_BYTES` as a :class:`_LongLine` (nothing holds a whole line: one of 200 MB was
    read whole, as was a file without a line end, a minified JSON array); an error reading the
    file is raised after the lines before it. A file of UTF-16 or UTF-32 with a byte-order mark is
    decoded, its lines ending at CR, LF or CRLF; a file whose start (:data:`_SNIFF_BYTES`, or its
    first line when that is longer) has CRs but no LF (classic Mac OS) is split at CRs (it was
    read as one line, one rejected record); any other at LFs. A UTF-8 byte-order mark is left out
    (spreadsheet exports)."""
    head, wide, error = _file_start(fh)
    whole = len(head) < _SNIFF_BYTES or error is not None  # (a CR at its end: a line end)
    if not wide:
        head = head.removeprefix(codecs.BOM_UTF8)
    stream = io.BufferedReader(_Replayed(head, fh, error), _CHUNK_BYTES)
    if wide:
        return _Splitter(_wide_chunks(stream, wide), None).lines()
    end = b"\n" if b"\n" in head else b"\r" if b"\r" in head[: None if whole else -1] else None
    if end is None:  # no line end in the head: its first line's end tells (a CR's next byte too)
        return _lines_after_the_first(stream)
    return _Splitter(_chunks(stream), end).lines()


def _lines_after_the_first(stream: io.BufferedIOBase) -> Iterator[bytes | _LongLine]:
    """The lines of ``stream``, whose first line's end tells where the others end (see
    :func:`_byte_lines`)."""
    first = _Splitter(_chunks(stream), None, first_only=True)
    yield from first.lines()
    if end := first.found[-1:]:
        stream = io.BufferedReader(_Replayed(first.buffer, stream), _CHUNK_BYTES)
        yield from _Splitter(_chunks(stream), end).lines()


def _chunks(stream: io.BufferedIOBase) -> Iterator[bytes]:
    """The bytes of ``stream``, :data:`_CHUNK_BYTES` at most at a time."""
    while chunk := stream.read1(_CHUNK_BYTES):
        yield chunk


def _wide_chunks(stream: io.BufferedIOBase, encoding: str) -> Iterator[bytes]:
    """UTF-16 or UTF-32 text (``stream``, from its byte-order mark) as UTF-8; an unpaired
    surrogate stays (a line that is not UTF-8), and text that ends inside a character is a
    UnicodeDecodeError after the text before it."""
    decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")
    for chunk in _chunks(stream):
        if text := decoder.decode(chunk):
            yield text.encode("utf-8", "surrogatepass")
    if text := decoder.decode(b"", final=True):
        yield text.encode("utf-8", "surrogatepass")


_LINE_END = re.compile(rb"\r\n|\r|\n")


class _Splitter:
    """The lines of ``chunks`` (UTF-8 bytes) for :func:`_byte_lines`, ending at ``end``, or, when
    it is ``None``, at a CR, an LF or a CRLF (a CR at a chunk's end waits for the next byte). With
    ``first_only``, only the first line: :attr:`found` is its line end, :attr:`buffer` what was
    read after it."""

    def __init__(
        self, chunks: Iterator[bytes], end: bytes | None, first_only: bool = False
    ) -> None:
        self.chunks = chunks
        self.end = end
        self.first_only = first_only
        self.buffer = b""  # read, in no line yet
        self.found = b""

    def lines(self) -> Iterator[bytes | _LongLine]:
        """The lines, each whole or a :class:`_LongLine`; an error reading ``chunks`` is raised
        after the lines before it."""
        while True:
            complete, self.buffer = self._split(self.buffer)
            if self.first_only and (first := next(complete, None)) is not None:
                self.found = first[-1:]
                self.buffer = b"".join(complete) + self.buffer
                yield first
                return
            yield from complete
            if len(self.buffer) > _CHUNK_BYTES:
                carry = b"\r" if self.end is None and self.buffer.endswith(b"\r") else b""
                long = _LongLine(self.buffer.removesuffix(carry))
                self.buffer = b""
                long.rest = self._rest(long, carry)
                yield long
                long.read_past()
                if self.first_only:
                    return
                continue
            chunk = next(self.chunks, b"")
            if not chunk:
                if self.buffer:
                    yield self.buffer
                self.buffer = b""
                return
            self.buffer += chunk

    def _split(self, data: bytes) -> tuple[Iterator[bytes], bytes]:
        """The complete lines of ``data``, and what follows them."""
        if self.end == b"\n":  # (each line split off as a file's lines are: the usual case)
            cut = data.rfind(b"\n") + 1
            return iter(io.BytesIO(data[:cut])), data[cut:]
        if self.end is not None:
            parts = data.split(self.end)
            rest = parts.pop()
            return (part + self.end for part in parts), rest
        lines = []
        start = 0
        for match in _LINE_END.finditer(data):
            if match.end() == len(data) and match.group() == b"\r":
                break  # its LF may come with the next chunk
            lines.append(data[start : match.end()])
            start = match.end()
        return iter(lines), data[start:]

    def _rest(self, line: _LongLine, carry: bytes) -> Iterator[bytes]:
        """The pieces of the long ``line`` after its head: up to its end, what follows it left in
        :attr:`buffer` (see :meth:`_LongLine.pieces`). ``carry``: a CR that ended the head or the
        last piece (``end`` None), to read with the next byte (an LF?)."""

        def read() -> bytes:
            nonlocal carry
            while True:
                chunk = next(self.chunks, b"")
                data, carry = carry + chunk, b""
                if not chunk or self.end is not None or not data.endswith(b"\r"):
                    return data
                data, carry = data[:-1], b"\r"
                if data:
                    return data

        def last(piece: bytes) -> int:
            if self.end is not None:
                end = piece.find(self.end) + 1 or -1
            elif (match := _LINE_END.search(piece)) is None:
                end = -1
            elif self.first_only and match.group() == b"\r" and b"\n" in piece[match.end() :]:
                end = piece.index(b"\n", match.end()) + 1  # an LF after it: lines end at LFs
            else:
                end = match.end()
            if end >= 0:
                self.buffer, self.found = piece[end:] + carry, piece[end - 1 : end]
            return end

        return line.pieces(read, last)


def _file_start(fh: io.BufferedIOBase) -> tuple[bytes, str, BaseException | None]:
    """``(head, encoding, error)``: the start of ``fh`` that tells its line ending
    (:data:`_SNIFF_BYTES`), and the encoding its byte-order mark names when it is UTF-16 or UTF-32
    (``""``: UTF-8); the error that stopped reading it, to be raised after the lines it holds."""
    head = bytearray()
    error: BaseException | None = None
    try:
        while len(head) < _SNIFF_BYTES and (chunk := fh.read1(_SNIFF_BYTES - len(head))):
            head += chunk
    except _READ_ERRORS as exc:
        error = exc
    wide = next((encoding for bom, encoding in _WIDE_BOMS if head.startswith(bom)), "")
    return bytes(head), wide, error


_Line = tuple[int, bytes | _LongLine | None, str]  # what _lines yields


def _lines(path: Path) -> Iterator[_Line]:
    """(line number, bytes, error): the file's lines as UTF-8 (see :func:`_byte_lines`: a long
    line as a :class:`_LongLine`); a damaged gzip, UTF-16 that ends inside a character, or a file
    compressed otherwise than with gzip ends with an error entry (bytes ``None``)."""
    try:
        fh = _open_binary(path)
    except _CompressedError as exc:
        yield 1, None, str(exc)
        return
    counter = itertools.count(1)
    with fh:
        try:
            yield from zip(counter, _byte_lines(fh), itertools.repeat(""))
        except (*_STOP_ERRORS, _CutShortError) as exc:
            number = next(counter) - 2  # the lines yielded (zip counted one more)
            if isinstance(exc, _CutShortError):
                number, exc = number - 1, exc.args[0]  # (the line it cut is incomplete)
            if isinstance(exc, UnicodeDecodeError):
                what = f"not {exc.encoding.upper()} ({exc.reason})"
            else:
                what = "truncated gzip" if isinstance(exc, EOFError) else f"damaged file ({exc})"
            yield number + 1, None, f"{what}: reading stopped after line {number}"


def _whole(line: _LongLine) -> bytes | None:
    """The bytes of a long line, read whole, for the CSV and Reuters SGML readers (which have
    limits of their own); ``None`` when the file ends inside it (the error that follows says
    where)."""
    whole = b"".join(line)
    return None if line.error is not None else whole


def _line_bytes(line: bytes | _LongLine) -> bytes | int | None:
    """The bytes of ``line``; for a line over :data:`_MAX_RECORD_BYTES` (its end aside), its
    size, the line read past without being held; ``None`` for a line the file ends inside (the
    error that stopped reading it follows)."""
    if isinstance(line, bytes):
        if len(line) > _MAX_RECORD_BYTES and (size := len(line) - _end_size(line)) > (
            _MAX_RECORD_BYTES
        ):
            return size
        return line
    pieces: list[bytes] = []
    size = 0
    tail = b""  # the line's last two bytes (its end)
    for piece in line:
        size += len(piece)
        tail = piece[-2:] if len(piece) > 1 else tail[-1:] + piece
        if size <= _MAX_RECORD_BYTES + 2:
            pieces.append(piece)
        elif pieces:
            pieces.clear()
    if line.error is not None:
        return None
    size -= _end_size(tail)
    return size if size > _MAX_RECORD_BYTES else b"".join(pieces)


def _end_size(tail: bytes) -> int:
    """The size of the line end that ``tail`` (a line, or its last bytes) ends with."""
    return 2 if tail.endswith(b"\r\n") else 1 if tail.endswith((b"\n", b"\r")) else 0


def _over_limit(what: str, size: int) -> str:
    """Why a line or array element of ``size`` bytes is rejected."""
    return f"{what} of {size} bytes, over the limit of {_MAX_RECORD_BYTES}"


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
    (:class:`_JsonArray`), whatever its lines: the whole file was held before the first, and a
    minified array (one line) until its end. A damaged spot in an array rejects only the element
    it lies in: one stray byte, a cut gzip or a missing ``]`` had the file read line by line,
    every record lost.

    A line or an array element over :data:`_MAX_RECORD_BYTES` is rejected with its size, read past
    without being held (it was read and parsed whole, and one of 200 MB ended the replay for want
    of memory). A file without a record (empty, blank, or an empty array) is one rejection, as
    :func:`read_csv` rejects an empty file: it was replayed as nothing, without a word.
    """
    source = str(path)
    lines = _lines(path)
    elements, read = _json_array_elements(lines, source)
    if elements is None:
        yield from _line_records(source, itertools.chain(read, lines))
    else:
        yield from _array_records(source, elements)


def _line_records(source: str, lines: Iterable[_Line]) -> Iterator[SourceRecord | Rejected]:
    """The records of JSON ``lines`` (:func:`read_jsonl`)."""
    empty = True
    for number, line, error in lines:
        if not isinstance(line, bytes) or len(line) > _MAX_RECORD_BYTES:
            if line is None:
                yield Rejected(source, number, error)
                return
            data = _line_bytes(line)
            if data is None:  # cut short by the error that follows
                continue
            if isinstance(data, int):
                empty = False
                head = line.head if isinstance(line, _LongLine) else line
                yield Rejected(source, number, _over_limit("line", data), _raw(head))
                continue
            line = data
        if not line.strip():
            continue
        empty = False
        try:
            yield SourceRecord(source, number, parse_json_object(line))
        except RecordError as exc:
            yield Rejected(source, number, str(exc), _raw(line))
    if empty:
        yield Rejected(source, 1, "empty file (no records)")


def _array_records(source: str, elements: Iterable[_Element]) -> Iterator[SourceRecord | Rejected]:
    """The records of a JSON array's ``elements`` (:func:`read_jsonl`)."""
    empty = True
    for element in elements:
        empty = False
        if isinstance(element, Rejected):
            yield element
            continue
        number, data, where = element
        try:
            yield SourceRecord(source, number, parse_json_object(data, "array element"))
        except RecordError as exc:
            yield Rejected(source, number, str(exc) + where, _raw(data))
    if empty:
        yield Rejected(source, 1, "empty JSON array (no records)")


# An array element (line, UTF-8 bytes, where it is when the line does not say), or why not
_Element = tuple[int, bytes, str] | Rejected


def _json_array_elements(
    lines: Iterator[_Line], source: str
) -> tuple[Iterator[_Element] | None, Iterable[_Line]]:
    """``(elements, [])`` when ``lines`` (:func:`_lines`) are one JSON array: the (line where it
    starts, UTF-8 bytes, where) of each element, or the rejection of a damaged one, read from
    ``lines`` as they are iterated (:class:`_JsonArray`). Otherwise ``(None, the lines read from
    ``lines``)``, to be read as JSON lines before the rest of ``lines``: ``lines`` are read no
    further than the first non-blank one when it does not start with ``[``, nor than the error
    that ends them; a file that starts with ``[`` but is no JSON array is read line by line,
    which says what is wrong where. A line that is not UTF-8 is kept (its stray bytes as
    surrogate escapes), and an error that ends the lines ends the text."""
    blanks: list[_Line] = []
    for entry in lines:
        line = entry[1]
        if line is None:  # the error that ends the lines
            return None, itertools.chain(blanks, [entry])
        start = line if isinstance(line, bytes) else line.head
        text = start.decode("utf-8", _SURROGATES)
        if isinstance(line, bytes) and not text.strip():
            blanks.append(entry)
            continue
        if not text.lstrip().startswith("["):
            return None, itertools.chain(blanks, [entry])
        return _JsonArray(source, entry, lines).read()
    return None, blanks


def _utf8_lines(texts: list[str], first: int) -> Iterator[_Line]:
    """``texts`` as :func:`_lines` yielded them (stray bytes restored), the first being line
    ``first``."""
    for number, text in enumerate(texts, start=first):
        yield number, text.encode("utf-8", _SURROGATES), ""


_STRAY_BYTE = re.compile("[\udc80-\udcff]")  # a byte that was not UTF-8, as decoded
# How much more of the file an array's text window reads when it needs more (characters, at
# least), and how much text before the element being read it keeps
_WINDOW_CHARS = 1 << 16
# How near the end of the text read a JSON decoding error may lie and be for want of more text:
# a literal, a number or a \uXXXX escape cut there (an unterminated string always is)
_TOKEN_CHARS = 16
# How long the line of an array's '[' may grow before the text is taken for an array (see
# _JsonArray): no JSON-lines file starts with such a line, and a minified export is one
_ARRAY_LINE_CHARS = 1 << 20
# What a scan past an element over the limit looks for: outside strings, what opens or closes a
# string, an object or an array; inside one, its closing quote or an escape
_VALUE_SYNTAX = re.compile(r'["\[\]{}]')
_STRING_SYNTAX = re.compile(r'["\\]')
_SCALAR_END = re.compile(r"[,\]}\s]")


class _NoArrayError(Exception):
    """The text that :class:`_JsonArray` reads is no JSON array."""


class _OverLimitError(Exception):
    """The JSON value being decoded is longer than :data:`_MAX_RECORD_BYTES`."""


class _JsonArray:
    """The elements of the JSON array whose first line (its ``[``) is the entry ``first``, read
    from ``lines`` (:func:`_lines`, the rest of the file) as they are needed, for
    :func:`_json_array_elements`. Positions are of the file's text from ``first`` on; the class
    holds only a window of it (:attr:`text`, from :attr:`offset`): an element is decoded from the
    text read so far, reading on (whole lines, or pieces of a long one) while the decoder runs out
    of text, and once the text is an array (below) what lies before the element being read is let
    go, within a line too. The whole file was held before the first element (215 MiB for a 100
    MiB export), and a minified array, one line, was held whole (5 times its size).

    Once an element starts on a line after the ``[`` (a pretty-printed array: the export's
    form), or the line of the ``[`` is longer than :data:`_ARRAY_LINE_CHARS` (or
    :data:`_MAX_RECORD_BYTES`, when less: a minified array), or an element is over
    :data:`_MAX_RECORD_BYTES`, the text is an array whatever is wrong in it, and each damaged spot
    costs only the element it lies in: an element with a byte that is not UTF-8 is rejected
    alone; one that is no JSON is rejected with everything up to the next line that starts an
    element at the same indentation, or, for an element that does not start its line, up to the
    next ``{`` that starts a line or follows a comma (or, when none, with the rest of the file);
    one over :data:`_MAX_RECORD_BYTES` is rejected with its size, read past; a missing ``,``
    between two elements costs nothing; text after the closing ``]`` is rejected (another array
    after it is read too); an array that the file ends inside keeps its elements (the cut one, or
    a missing ``]``, is rejected). The rejection of an element that does not start its line says
    which element of the array it is (in a minified array every element is on line 1). Before
    that, anything wrong means the text is no JSON array: :meth:`read` returns ``None``, for it to
    be read line by line (JSON lines that start with ``[1, 2``); the elements and text read until
    then are held.
    """

    def __init__(self, source: str, first: _Line, lines: Iterator[_Line]) -> None:
        self.source = source
        self.lines = itertools.chain([first], lines)
        self.text = ""  # the window
        self.offset = 0  # the position of the window's start
        self.end = 0  # the position of the end of the text read
        self.line0 = first[0]  # the number of the line that starts[0] starts
        self.starts = [0]  # where each line read starts (the first may start before offset)
        self.start_bytes = [0]  # the byte (of UTF-8) at which each starts
        self.end_bytes = 0  # the byte at which the text read ends
        self.offset_bytes = 0  # the byte at which the window starts
        self.long: _LongLine | None = None  # the long line being read, in pieces
        self.pieces: Iterator[bytes] = iter(())  # its pieces not read yet
        self.utf8 = codecs.getincrementaldecoder("utf-8")(_SURROGATES)  # of its pieces
        self.after_bracket: int | None = None  # where the line after the '[' starts, once read
        self.error: _Line | None = None  # the error entry that ended the lines
        self.ended = False  # whether lines are read to their end
        self.decoder = json.JSONDecoder()
        self.established = False  # the text is an array (see the class doc)
        self.count = 0  # the elements read

    def read(self) -> tuple[Iterator[_Element] | None, Iterable[_Line]]:
        """``(the elements, [])``, or ``(None, the lines read)`` when the text is no JSON array
        (see the class doc): the elements are read, and held, until the text is an array, or the
        file ends; the rest as they are iterated."""
        elements = self._elements()
        held: list[_Element] = []
        try:
            while not self.established:
                held.append(next(elements))
        except StopIteration:
            return iter(held), []
        except _NoArrayError:  # (nothing was let go)
            texts = [self.text[a:b] for a, b in itertools.pairwise(self.starts)]
            read = list(_utf8_lines(texts, self.line0))
            if self.long is not None:  # the rest of the long line being read
                pending = self.utf8.getstate()[0]
                self.long.head = self.text[self.starts[-1] :].encode("utf-8", _SURROGATES)
                self.long.head += pending
                self.long.rest = self.pieces
                read.append((self.line0 + len(self.starts) - 1, self.long, ""))
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

    def _byte(self, position: int) -> int:
        """The byte (of UTF-8) at which ``position`` (in the window) lies."""
        index = self.line(position) - self.line0
        if self.starts[index] >= self.offset:
            return self.start_bytes[index] + _utf8_size(self._slice(self.starts[index], position))
        return self.offset_bytes + _utf8_size(self._slice(self.offset, position))

    def _read(self, chars: int) -> bool:
        """Read at least ``chars`` characters more of the file (whole lines, or pieces of a long
        one; fewer at its end) into the window; whether any came."""
        added: list[str] = []
        count = 0
        while count < chars and not (self.long is None and self.ended):
            if self.long is not None:
                added.append(text := self._piece())
                count += len(text)
            else:
                count += self._read_lines(chars - count, added)
        if self.after_bracket is None and len(self.starts) > 1:
            self.after_bracket = self.starts[1]
        self.text += "".join(added)
        return bool(added)

    def _read_lines(self, chars: int, added: list[str]) -> int:
        """Read whole lines into ``added`` until they hold ``chars`` characters or more, or a
        long line (:attr:`long`), or the end of the lines, comes; how many characters came."""
        count = 0
        starts, start_bytes = self.starts, self.start_bytes
        end, end_bytes = self.end, self.end_bytes
        entry: _Line | None = None
        for entry in self.lines:
            line = entry[1]
            if not isinstance(line, bytes):
                break
            text = line.decode("utf-8", _SURROGATES)
            added.append(text)
            count += len(text)
            end += len(text)
            end_bytes += len(line)
            starts.append(end)
            start_bytes.append(end_bytes)
            if count >= chars:
                break
        else:
            entry = None  # the lines' end
        self.end, self.end_bytes = end, end_bytes
        if entry is None or entry[1] is None:
            self.error, self.ended = entry, True
        elif isinstance(entry[1], _LongLine):
            self.long, self.pieces = entry[1], iter(entry[1])
        return count

    def _piece(self) -> str:
        """The text of the next piece of the long line being read; at its end, what the decoder
        held of it (its line's end is noted in :attr:`starts`)."""
        piece = next(self.pieces, None)
        if piece is not None:
            self.end_bytes += len(piece)
            text = self.utf8.decode(piece)
        else:
            self.long = None
            text = self.utf8.decode(b"", final=True)
            self.utf8.reset()
        self.end += len(text)
        if piece is None:
            self.starts.append(self.end)
            self.start_bytes.append(self.end_bytes)
        return text

    def _read_to_end(self) -> None:
        """Read the rest of the file, letting it go, for the error that may end it."""
        if not self.ended:
            self.error = next((entry for entry in self.lines if entry[1] is None), None)
            self.ended = True

    def _holds(self, position: int) -> bool:
        """Whether the file's text goes on to ``position`` (read into the window)."""
        while position >= self.end:
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
            if position < self.end or not self._read(_WINDOW_CHARS):
                return position

    def _decode(self, start: int) -> int:
        """Where the JSON value at ``start`` ends, the window read on while the decoder runs out
        of text (twice as much each time), or while the value (a number) may go on past it. A
        JSONDecodeError (its ``pos`` in the window), a RecursionError (nested too deeply) or
        another ValueError when it is no JSON value; an :class:`_OverLimitError` when it goes on
        past :data:`_MAX_RECORD_BYTES` characters."""
        while True:
            try:
                end = self.decoder.raw_decode(self.text, start - self.offset)[1] + self.offset
            except json.JSONDecodeError as exc:
                if not self._ran_out(exc) or not self._read_more(start):
                    raise
                continue
            if end < self.end or not self._read_more(start):
                return end

    def _ran_out(self, exc: json.JSONDecodeError) -> bool:
        """Whether the decoder's error ``exc`` may be for want of more text."""
        if exc.msg.startswith("Unterminated string"):
            return True
        return _skip_blank(self.text, exc.pos) + _TOKEN_CHARS >= len(self.text)

    def _read_more(self, start: int) -> bool:
        """Read on for the value at ``start`` (as much as is read of it, at least
        :data:`_WINDOW_CHARS`); whether any came. An :class:`_OverLimitError` when more than
        :data:`_MAX_RECORD_BYTES` characters of it are read."""
        have = self.end - start
        if have > _MAX_RECORD_BYTES:
            raise _OverLimitError
        return self._read(min(max(have, _WINDOW_CHARS), _MAX_RECORD_BYTES + 1 - have))

    def _let_go(self, position: int) -> None:
        """Let go of the window's text before ``position`` (before the start of its line, when
        that is near), when the text is an array and it is more than :data:`_WINDOW_CHARS`."""
        if not self.established or position - self.offset <= _WINDOW_CHARS:
            return
        index = self.line(position) - self.line0
        cut = self.starts[index]
        if cut < self.offset or position - cut > _WINDOW_CHARS:
            cut = position
        self.offset_bytes = self._byte(cut)
        self.text = self.text[cut - self.offset :]
        self.offset = cut
        del self.starts[:index]
        del self.start_bytes[:index]
        self.line0 += index

    def _elements(self) -> Iterator[_Element]:
        """The elements (see the class doc); a :class:`_NoArrayError` when the text is no JSON
        array."""
        self._read(1)
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
            after_bracket = self.after_bracket is not None and position >= self.after_bracket
            if after_bracket or position > min(_ARRAY_LINE_CHARS, _MAX_RECORD_BYTES):
                self.established = True
            self._let_go(position)
            self.count += 1
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
        """A :class:`_NoArrayError` for something wrong before the text is :attr:`established`,
        unless the line of the ``[`` is longer than :data:`_ARRAY_LINE_CHARS` (read on, and held,
        to tell): the text is an array then (damage in the first mebibyte of a minified array
        had it read as one JSON line, every element lost)."""
        if self.established:
            return
        limit = min(_ARRAY_LINE_CHARS, _MAX_RECORD_BYTES)
        while self.after_bracket is None and self.end <= limit and self._read(_WINDOW_CHARS):
            pass
        if (self.end if self.after_bracket is None else self.after_bracket) <= limit:
            raise _NoArrayError
        self.established = True

    def _element(self, start: int) -> tuple[_Element, int | None]:
        """The element at ``start`` (or its rejection), and where reading goes on, ``None``
        when nowhere (the rest of the text rejected). A :class:`_NoArrayError` when the text is
        no JSON array (not :attr:`established`)."""
        number = self.line(start)
        where = self._where(start, number)
        try:
            end = self._decode(start)
        except _OverLimitError:  # (its line is over the limit too: no JSON line)
            self.established = True
            return self._over_limit(start, where)
        except (ValueError, RecursionError) as exc:  # not JSON, nested too deeply
            self._require_array()
            return self._damaged(start, self._invalid(exc), where)
        text = self._slice(start, end)
        data = text.encode("utf-8", _SURROGATES)
        if len(data) > _MAX_RECORD_BYTES:
            self.established = True
            reason = _over_limit("array element", len(data)) + where
            return Rejected(self.source, number, reason, self._raw(start, end)), end
        stray = None if text.isascii() else _STRAY_BYTE.search(text)
        if stray is None:
            return (number, data, where), end
        self._require_array()
        at = stray.start() + start
        column = self._byte(at) - self.start_bytes[self.line(at) - self.line0]
        reason = f"not UTF-8 (line {self.line(at)}, byte {column + 1}){where}"
        return Rejected(self.source, number, reason, self._raw(start, end)), end

    def _where(self, start: int, number: int) -> str:
        """Which element of the array the one at ``start`` (on line ``number``) is, for a
        rejection to say, when it does not start its line (the line's number does not tell it
        from the others there); ``""`` when it does."""
        local = start - self.offset
        while local > 0 and self.text[local - 1] in " \t":
            local -= 1
        if local + self.offset == self.starts[number - self.line0]:
            return ""
        return f" (element {self.count} of the array)"

    def _invalid(self, exc: Exception) -> str:
        """Why an element is no JSON (``exc``, from :meth:`_decode`)."""
        if not isinstance(exc, json.JSONDecodeError):
            return "invalid JSON: nested too deeply"
        at = exc.pos + self.offset
        column = at - self._line_start(at) + 1
        return f"invalid JSON: {exc.msg} (line {self.line(at)}, column {column})"

    def _over_limit(self, start: int, where: str) -> tuple[Rejected, int]:
        """The rejection of the element at ``start``, over :data:`_MAX_RECORD_BYTES`, and where
        it ends (:meth:`_read_past`)."""
        line = self.line(start)
        self._holds(start + _RAW_CHARS - 1)
        raw = self._slice(start, min(self.end, start + _RAW_CHARS))
        end, size = self._read_past(start)
        reason = _over_limit("array element", size) + where
        raw_bytes = raw[: end - start].encode("utf-8", _SURROGATES)
        return Rejected(self.source, line, reason, _raw(raw_bytes)), end

    def _read_past(self, start: int) -> tuple[int, int]:
        """Where the JSON value at ``start`` ends, and its size in bytes, read past without
        being held (the window let go as it is scanned): an object or an array where its
        brackets balance, strings skipped (at the file's end when they never do), a string at its
        closing quote, anything else before the next ``,``, ``]``, ``}`` or blank."""
        first = self._byte(start)
        if not self._startswith(("{", "[", '"'), start):
            position = start
            while self._holds(position):
                self._let_go(position)
                match = _SCALAR_END.search(self.text, position - self.offset)
                if match is not None:
                    position = match.start() + self.offset
                    return position, self._byte(position) - first
                position = self.end
            return self.end, self._byte(self.end) - first
        depth, in_string, position = 0, False, start
        while self._holds(position):
            self._let_go(position)
            syntax = _STRING_SYNTAX if in_string else _VALUE_SYNTAX
            match = syntax.search(self.text, position - self.offset)
            if match is None:
                position = self.end
                continue
            position = match.end() + self.offset
            char = match.group()
            if char == "\\":
                position += 1  # the character it escapes
            elif char == '"':
                in_string = not in_string
            else:
                depth += 1 if char in "[{" else -1
            if depth == 0 and not in_string:
                break
        end = min(position, self.end)
        return end, self._byte(end) - first

    def _damaged(self, start: int, reason: str, where: str) -> tuple[Rejected, int | None]:
        """The rejection of the element at ``start`` (:meth:`_where`), no JSON (``reason`` says
        why), with the text up to the next element (:meth:`_next_element`), and where that starts
        (``None``: nowhere, the rest of the text rejected)."""
        first_line = self.line(start)
        self._holds(start + _RAW_CHARS - 1)
        raw = self._slice(start, min(self.end, start + _RAW_CHARS))
        resume = self._next_element(start)
        stop = self.end if resume is None else resume
        scanned = self._slice(max(start, self.offset), stop).rstrip()
        last_line = self.line(max(start, self.offset) + max(len(scanned) - 1, 0))
        if resume is None and self.error is not None:
            reason = f"{self.error[2]}, inside the array element that starts on line {first_line}"
        elif resume is None:
            reason += f"; no element could be read after it (lines {first_line}-{last_line})"
        elif last_line > first_line:
            reason += f" (lines {first_line}-{last_line} skipped)"
        raw_bytes = raw[: stop - start].encode("utf-8", _SURROGATES)
        return Rejected(self.source, first_line, reason + where, _raw(raw_bytes)), resume

    def _next_element(self, start: int) -> int | None:
        """Where the next element after the damaged one at ``start`` starts: the first later
        ``{`` that starts a line at ``start``'s indentation or, when ``start`` does not start its
        line, that starts a line or follows a comma; and that holds a whole JSON value followed
        by ``,`` or ``]``. The text scanned is let go."""
        line_start = self._line_start(start)
        indent = None
        if line_start >= self.offset and not self._slice(line_start, start).strip():
            indent = start - line_start
        position = start + 1
        while self._holds(position):
            self._let_go(position)
            local = self.text.find("{", position - self.offset)
            if local < 0:
                position = self.end
                continue
            at = local + self.offset
            position = at + 1
            if not self._may_start_element(at, indent):
                continue
            try:
                end = self._decode(at)
            except (ValueError, RecursionError, _OverLimitError):
                continue
            after = self._skip(end)
            if self._startswith((",", "]"), after) or not self._holds(after):
                return at
        return None

    def _may_start_element(self, at: int, indent: int | None) -> bool:
        """Whether the ``{`` at ``at`` may start an element after a damaged one whose indentation
        is ``indent`` (see :meth:`_next_element`)."""
        before = at - self.offset
        while before > 0 and self.text[before - 1] in " \t":
            before -= 1
        line_start = self._line_start(at)
        if before + self.offset == line_start:
            return indent is None or at - line_start == indent
        if indent is not None:
            return False
        before = _skip_blank_back(self.text, before)
        return before > 0 and self.text[before - 1] == ","

    def _unclosed(self) -> Rejected:
        """The rejection that says the file ended inside the array, after an element."""
        if self.error is not None:
            return Rejected(self.source, self.error[0], self.error[2])
        reason = "the file ends inside the JSON array (its closing ']' is missing)"
        return Rejected(self.source, self.line(max(self.end - 1, self.offset)), reason)

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
        end = min(self.end if stop is None else stop, start + _RAW_CHARS)
        return _raw(self._slice(start, end).encode("utf-8", _SURROGATES))


_SURROGATES = "surrogateescape"


def _utf8_size(text: str) -> int:
    """The size of ``text`` in UTF-8 (a stray byte, as decoded, is one byte)."""
    return len(text.encode("utf-8", _SURROGATES))


def _skip_blank(text: str, position: int, blanks: str = " \t\r\n") -> int:
    """The first position from ``position`` on that is none of ``blanks`` (JSON whitespace)."""
    while position < len(text) and text[position] in blanks:
        position += 1
    return position


def _skip_blank_back(text: str, position: int) -> int:
    """The first position from ``position`` back after which ``text`` holds only JSON whitespace
    (up to ``position``)."""
    while position > 0 and text[position - 1] in " \t\r\n":
        position -= 1
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
        if not isinstance(line, bytes):
            if line is None:
                record.damage.append(Rejected(record.source, number, error))
                break
            if (line := _whole(line)) is None:
                continue
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
        if (whole := line if isinstance(line, bytes) else _whole(line)) is not None:
            chunks.append(whole)
    text = b"".join(chunks).decode("utf-8", _LATIN1_FALLBACK)
    line_of = _line_index(text)
    end = 0
    if not text.strip() and error is None:
        yield Rejected(source, 1, "empty file (no records)")
    elif text.strip() and "<REUTERS" not in text:
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
