"""The text of a JSON array file held as a window (:class:`JsonWindow`): read on from the
file's lines as it is needed, the text before a position let go, positions told as lines and
bytes, and JSON values decoded from it however far they go on."""

from __future__ import annotations

import bisect
import codecs
import itertools
import json
from collections.abc import Iterator

from sparsewatch.replay.bounded_lines import LongLine
from sparsewatch.replay.numbered_lines import Line
from sparsewatch.replay.record_size import MAX_RECORD_BYTES

# How a window's text keeps a byte that was not UTF-8: as a surrogate escape
SURROGATES = "surrogateescape"
# How near the end of the text read a JSON decoding error may lie and be for want of more text:
# a literal, a number or a \uXXXX escape cut there (an unterminated string always is)
_TOKEN_CHARS = 16


class OverLimitError(Exception):
    """The JSON value being decoded is longer than :data:`MAX_RECORD_BYTES`."""


class JsonWindow:
    """The text of a file from its line ``first`` on (JSON, the first line an array's ``[``),
    read from ``lines`` (:func:`~sparsewatch.replay.numbered_lines.numbered_lines`, the rest of
    the file) as it is needed. Positions are of that text; the class holds only a window of it
    (:attr:`text`, from :attr:`offset`), reading on (whole lines, or pieces of a long one) at
    least :attr:`window_chars` characters at a time, and letting go of what lies before a
    position (:meth:`_let_go`), within a line too."""

    def __init__(self, first: Line, lines: Iterator[Line], window_chars: int) -> None:
        self.window_chars = window_chars
        self.lines = itertools.chain([first], lines)
        self.text = ""  # the window
        self.offset = 0  # the position of the window's start
        self.end = 0  # the position of the end of the text read
        self.line0 = first[0]  # the number of the line that starts[0] starts
        self.starts = [0]  # where each line read starts (the first may start before offset)
        self.start_bytes = [0]  # the byte (of UTF-8) at which each starts
        self.end_bytes = 0  # the byte at which the text read ends
        self.offset_bytes = 0  # the byte at which the window starts
        self.long: LongLine | None = None  # the long line being read, in pieces
        self.pieces: Iterator[bytes] = iter(())  # its pieces not read yet
        self.utf8 = codecs.getincrementaldecoder("utf-8")(SURROGATES)  # of its pieces
        self.after_bracket: int | None = None  # where the line after the '[' starts, once read
        self.error: Line | None = None  # the error entry that ended the lines
        self.ended = False  # whether lines are read to their end
        self.decoder = json.JSONDecoder()

    def _lines_held(self) -> list[Line]:
        """The lines read, as :func:`~sparsewatch.replay.numbered_lines.numbered_lines` yielded
        them (stray bytes restored; the long line being read with the rest of its pieces to
        come), then the error entry that ended them; for a window that let nothing go."""
        texts = [self.text[a:b] for a, b in itertools.pairwise(self.starts)]
        read = list(_utf8_lines(texts, self.line0))
        if self.long is not None:  # the rest of the long line being read
            pending = self.utf8.getstate()[0]
            self.long.head = self.text[self.starts[-1] :].encode("utf-8", SURROGATES)
            self.long.head += pending
            self.long.rest = self.pieces
            read.append((self.line0 + len(self.starts) - 1, self.long, ""))
        return read if self.error is None else [*read, self.error]

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
        entry: Line | None = None
        for entry in self.lines:
            line = entry[1]
            if not isinstance(line, bytes):
                break
            text = line.decode("utf-8", SURROGATES)
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
        elif isinstance(entry[1], LongLine):
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
            if not self._read(self.window_chars):
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
            if position < self.end or not self._read(self.window_chars):
                return position

    def _decode(self, start: int) -> int:
        """Where the JSON value at ``start`` ends, the window read on while the decoder runs out
        of text (twice as much each time), or while the value (a number) may go on past it. A
        JSONDecodeError (its ``pos`` in the window), a RecursionError (nested too deeply) or
        another ValueError when it is no JSON value; an :class:`OverLimitError` when it goes on
        past :data:`MAX_RECORD_BYTES` characters."""
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
        :attr:`window_chars`); whether any came. An :class:`OverLimitError` when more than
        :data:`MAX_RECORD_BYTES` characters of it are read."""
        have = self.end - start
        if have > MAX_RECORD_BYTES:
            raise OverLimitError
        return self._read(min(max(have, self.window_chars), MAX_RECORD_BYTES + 1 - have))

    def _let_go(self, position: int) -> None:
        """Let go of the window's text before ``position`` (before the start of its line, when
        that is near), when it is more than :attr:`window_chars`."""
        if position - self.offset <= self.window_chars:
            return
        index = self.line(position) - self.line0
        cut = self.starts[index]
        if cut < self.offset or position - cut > self.window_chars:
            cut = position
        self.offset_bytes = self._byte(cut)
        self.text = self.text[cut - self.offset :]
        self.offset = cut
        del self.starts[:index]
        del self.start_bytes[:index]
        self.line0 += index


def _utf8_lines(texts: list[str], first: int) -> Iterator[Line]:
    """``texts`` as :func:`~sparsewatch.replay.numbered_lines.numbered_lines` yielded them (stray
    bytes restored), the first being line ``first``."""
    for number, text in enumerate(texts, start=first):
        yield number, text.encode("utf-8", SURROGATES), ""


def _utf8_size(text: str) -> int:
    """The size of ``text`` in UTF-8 (a stray byte, as decoded, is one byte)."""
    return len(text.encode("utf-8", SURROGATES))


def _skip_blank(text: str, position: int, blanks: str = " \t\r\n") -> int:
    """The first position from ``position`` on that is none of ``blanks`` (JSON whitespace)."""
    while position < len(text) and text[position] in blanks:
        position += 1
    return position
