"""A file's lines in bounded memory (:func:`byte_lines`): UTF-8, or UTF-16 or UTF-32 after a
byte-order mark, split at the line ending the file's start uses (LF, CRLF or CR alone), a line
longer than :data:`~sparsewatch.replay.replayed_stream.CHUNK_BYTES` read in pieces
(:class:`LongLine`) instead of being held whole."""

from __future__ import annotations

import codecs
import io
import re
import zlib
from collections.abc import Callable, Iterator

from sparsewatch.replay.replayed_stream import CHUNK_BYTES, replayed

# How much of a file's start tells its line ending (when it holds none, the end of its first line)
SNIFF_BYTES = 1 << 20
# byte-order marks of the UTF-16 and UTF-32 text Windows tools write (UTF-32's first)
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_READ_ERRORS = (EOFError, OSError, zlib.error)  # a damaged or truncated gzip
# what ends the reading of a file: a read error, or UTF-16 or UTF-32 that ends inside a character
STOP_ERRORS = (*_READ_ERRORS, UnicodeDecodeError)


class CutShortError(Exception):
    """The error (the only argument) that stopped reading the file inside the line before it."""


class LongLine:
    """A line longer than :data:`CHUNK_BYTES`, read in pieces as it is iterated (once):
    :attr:`head`, its first piece (at least :data:`CHUNK_BYTES`), then the rest (:attr:`rest`),
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
        """Read what is left of the line, letting it go; a :class:`CutShortError` when the
        file could not be read to its end."""
        for _ in self.rest:
            pass
        if self.error is not None:
            raise CutShortError(self.error)

    def pieces(self, read: Callable[[], bytes], last: Callable[[bytes], int]) -> Iterator[bytes]:
        """The pieces after :attr:`head`, as ``read`` gives them: up to the one in which ``last``
        finds the line's end (its length up to the end, ``-1``: none), or the file's end."""
        while True:
            try:
                piece = read()
            except STOP_ERRORS as exc:
                self.error = exc
                return
            if not piece:
                return
            end = last(piece)
            if end >= 0:
                yield piece[:end]
                return
            yield piece


def byte_lines(fh: io.BufferedIOBase) -> Iterator[bytes | LongLine]:
    """The lines of ``fh`` as UTF-8 bytes with their line ends, a line longer than
    :data:`CHUNK_BYTES` as a :class:`LongLine` (nothing holds a whole line: one of 200 MB was
    read whole, as was a file without a line end, a minified JSON array); an error reading the
    file is raised after the lines before it. A file of UTF-16 or UTF-32 with a byte-order mark is
    decoded, its lines ending at CR, LF or CRLF; a file whose start (:data:`SNIFF_BYTES`, or its
    first line when that is longer) has CRs but no LF (classic Mac OS) is split at CRs (it was
    read as one line, one rejected record); any other at LFs. A UTF-8 byte-order mark is left out
    (spreadsheet exports)."""
    head, wide, error = _file_start(fh)
    whole = len(head) < SNIFF_BYTES or error is not None  # (a CR at its end: a line end)
    if not wide:
        head = head.removeprefix(codecs.BOM_UTF8)
    stream = replayed(head, fh, error)
    if wide:
        return _Splitter(_wide_chunks(stream, wide), None).lines()
    end = b"\n" if b"\n" in head else b"\r" if b"\r" in head[: None if whole else -1] else None
    if end is None:  # no line end in the head: its first line's end tells (a CR's next byte too)
        return _lines_after_the_first(stream)
    return _Splitter(_chunks(stream), end).lines()


def _lines_after_the_first(stream: io.BufferedIOBase) -> Iterator[bytes | LongLine]:
    """The lines of ``stream``, whose first line's end tells where the others end (see
    :func:`byte_lines`)."""
    first = _Splitter(_chunks(stream), None, first_only=True)
    yield from first.lines()
    if end := first.found[-1:]:
        stream = replayed(first.buffer, stream)
        yield from _Splitter(_chunks(stream), end).lines()


def _chunks(stream: io.BufferedIOBase) -> Iterator[bytes]:
    """The bytes of ``stream``, :data:`CHUNK_BYTES` at most at a time."""
    while chunk := stream.read1(CHUNK_BYTES):
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
    """The lines of ``chunks`` (UTF-8 bytes) for :func:`byte_lines`, ending at ``end``, or, when
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

    def lines(self) -> Iterator[bytes | LongLine]:
        """The lines, each whole or a :class:`LongLine`; an error reading ``chunks`` is raised
        after the lines before it."""
        while True:
            complete, self.buffer = self._split(self.buffer)
            if self.first_only and (first := next(complete, None)) is not None:
                self.found = first[-1:]
                self.buffer = b"".join(complete) + self.buffer
                yield first
                return
            yield from complete
            if len(self.buffer) > CHUNK_BYTES:
                carry = b"\r" if self.end is None and self.buffer.endswith(b"\r") else b""
                long = LongLine(self.buffer.removesuffix(carry))
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

    def _rest(self, line: LongLine, carry: bytes) -> Iterator[bytes]:
        """The pieces of the long ``line`` after its head: up to its end, what follows it left in
        :attr:`buffer` (see :meth:`LongLine.pieces`). ``carry``: a CR that ended the head or the
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
    (:data:`SNIFF_BYTES`), and the encoding its byte-order mark names when it is UTF-16 or UTF-32
    (``""``: UTF-8); the error that stopped reading it, to be raised after the lines it holds."""
    head = bytearray()
    error: BaseException | None = None
    try:
        while len(head) < SNIFF_BYTES and (chunk := fh.read1(SNIFF_BYTES - len(head))):
            head += chunk
    except _READ_ERRORS as exc:
        error = exc
    wide = next((encoding for bom, encoding in _WIDE_BOMS if head.startswith(bom)), "")
    return bytes(head), wide, error
