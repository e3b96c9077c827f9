"""The elements of a JSON array file (:func:`json_array_elements`), read in bounded memory as
they are iterated, whatever the file's lines: a pretty-printed export or a minified array; a
damaged spot costs only the element it lies in."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Generator, Iterable, Iterator

from sparsewatch.replay.json_window import SURROGATES, JsonWindow, OverLimitError
from sparsewatch.replay.numbered_lines import Line
from sparsewatch.replay.record_size import MAX_RECORD_BYTES, over_limit
from sparsewatch.replay.source_records import RAW_CHARS, Rejected, raw_text

# An array element (line, UTF-8 bytes, where it is when the line does not say), or why not
Element = tuple[int, bytes, str] | Rejected


def json_array_elements(
    lines: Iterator[Line], source: str, window_chars: int
) -> tuple[Iterator[Element] | None, Iterable[Line]]:
    """``(elements, [])`` when ``lines`` (:func:`numbered_lines`) are one JSON array: the (line
    where it starts, UTF-8 bytes, where) of each element, or the rejection of a damaged one, read
    from ``lines`` as they are iterated (:class:`_JsonArray`, a window of ``window_chars``).
    Otherwise ``(None, the lines read from ``lines``)``, to be read as JSON lines before the rest
    of ``lines``: ``lines`` are read no further than the first non-blank one when it does not
    start with ``[``, nor than the error that ends them; a file that starts with ``[`` but is no
    JSON array is read line by line, which says what is wrong where. A line that is not UTF-8 is
    kept (its stray bytes as surrogate escapes), and an error that ends the lines ends the
    text."""
    blanks: list[Line] = []
    for entry in lines:
        line = entry[1]
        if line is None:  # the error that ends the lines
            return None, itertools.chain(blanks, [entry])
        start = line if isinstance(line, bytes) else line.head
        text = start.decode("utf-8", SURROGATES)
        if isinstance(line, bytes) and not text.strip():
            blanks.append(entry)
            continue
        if not text.lstrip().startswith("["):
            return None, itertools.chain(blanks, [entry])
        return _JsonArray(source, entry, lines, window_chars).read()
    return None, blanks


_STRAY_BYTE = re.compile("[\udc80-\udcff]")  # a byte that was not UTF-8, as decoded
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


class _JsonArray(JsonWindow):
    """The elements of the JSON array whose first line (its ``[``) is the entry ``first``, read
    from ``lines`` (:func:`numbered_lines`, the rest of the file) as they are needed, for
    :func:`json_array_elements`. Positions are of the file's text from ``first`` on; the class
    holds only a window of it (:class:`JsonWindow`): an element is decoded from the text read so
    far, reading on (whole lines, or pieces of a long one) while the decoder runs out of text, and
    once the text is an array (below) what lies before the element being read is let go, within a
    line too. The whole file was held before the first element (215 MiB for a 100
    MiB export), and a minified array, one line, was held whole (5 times its size).

    Once an element starts on a line after the ``[`` (a pretty-printed array: the export's
    form), or the line of the ``[`` is longer than :data:`_ARRAY_LINE_CHARS` (or
    :data:`MAX_RECORD_BYTES`, when less: a minified array), or an element is over
    :data:`MAX_RECORD_BYTES`, the text is an array whatever is wrong in it, and each damaged spot
    costs only the element it lies in: an element with a byte that is not UTF-8 is rejected
    alone; one that is no JSON is rejected with everything up to the next line that starts an
    element at the same indentation, or, for an element that does not start its line, up to the
    next ``{`` that starts a line or follows a comma (or, when none, with the rest of the file);
    one over :data:`MAX_RECORD_BYTES` is rejected with its size, read past; a missing ``,``
    between two elements costs nothing; text after the closing ``]`` is rejected (another array
    after it is read too); an array that the file ends inside keeps its elements (the cut one, or
    a missing ``]``, is rejected). The rejection of an element that does not start its line says
    which element of the array it is (in a minified array every element is on line 1). Before
    that, anything wrong means the text is no JSON array: :meth:`read` returns ``None``, for it to
    be read line by line (JSON lines that start with ``[1, 2``); the elements and text read until
    then are held.
    """

    def __init__(self, source: str, first: Line, lines: Iterator[Line], window_chars: int) -> None:
        super().__init__(first, lines, window_chars)
        self.source = source
        self.established = False  # the text is an array (see the class doc)
        self.count = 0  # the elements read

    def read(self) -> tuple[Iterator[Element] | None, Iterable[Line]]:
        """``(the elements, [])``, or ``(None, the lines read)`` when the text is no JSON array
        (see the class doc): the elements are read, and held, until the text is an array, or the
        file ends; the rest as they are iterated."""
        elements = self._elements()
        held: list[Element] = []
        try:
            while not self.established:
                held.append(next(elements))
        except StopIteration:
            return iter(held), []
        except _NoArrayError:  # (nothing was let go)
            return None, self._lines_held()
        return itertools.chain(held, elements), []

    def _let_go(self, position: int) -> None:
        """Let go of the window's text before ``position`` (see
        :meth:`~sparsewatch.replay.json_window.JsonWindow._let_go`) once the text is an array."""
        if self.established:
            super()._let_go(position)

    def _elements(self) -> Iterator[Element]:
        """The elements (see the class doc); a :class:`_NoArrayError` when the text is no JSON
        array."""
        self._read(1)
        position: int | None = self._skip(self.text.index("[") + 1)
        while position is not None:  # an array (another may follow the first)
            position = yield from self._array(position)

    def _array(self, position: int) -> Generator[Element, None, int | None]:
        """The elements of the array whose first starts at ``position``; returns where the
        array after it starts, ``None`` when none does. A :class:`_NoArrayError` when the text
        is no JSON array."""
        while not self._startswith("]", position):
            if not self._holds(position):  # the file ends inside the array
                self._require_array()
                yield self._unclosed()
                return None
            after_bracket = self.after_bracket is not None and position >= self.after_bracket
            if after_bracket or position > min(_ARRAY_LINE_CHARS, MAX_RECORD_BYTES):
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
        limit = min(_ARRAY_LINE_CHARS, MAX_RECORD_BYTES)
        while self.after_bracket is None and self.end <= limit and self._read(self.window_chars):
            pass
        if (self.end if self.after_bracket is None else self.after_bracket) <= limit:
            raise _NoArrayError
        self.established = True

    def _element(self, start: int) -> tuple[Element, int | None]:
        """The element at ``start`` (or its rejection), and where reading goes on, ``None``
        when nowhere (the rest of the text rejected). A :class:`_NoArrayError` when the text is
        no JSON array (not :attr:`established`)."""
        number = self.line(start)
        where = self._where(start, number)
        try:
            end = self._decode(start)
        except OverLimitError:  # (its line is over the limit too: no JSON line)
            self.established = True
            return self._over_limit(start, where)
        except (ValueError, RecursionError) as exc:  # not JSON, nested too deeply
            self._require_array()
            return self._damaged(start, self._invalid(exc), where)
        text = self._slice(start, end)
        data = text.encode("utf-8", SURROGATES)
        if len(data) > MAX_RECORD_BYTES:
            self.established = True
            reason = over_limit("array element", len(data)) + where
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
        """The rejection of the element at ``start``, over :data:`MAX_RECORD_BYTES`, and where
        it ends (:meth:`_read_past`)."""
        line = self.line(start)
        self._holds(start + RAW_CHARS - 1)
        raw = self._slice(start, min(self.end, start + RAW_CHARS))
        end, size = self._read_past(start)
        reason = over_limit("array element", size) + where
        raw_bytes = raw[: end - start].encode("utf-8", SURROGATES)
        return Rejected(self.source, line, reason, raw_text(raw_bytes)), end

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
        self._holds(start + RAW_CHARS - 1)
        raw = self._slice(start, min(self.end, start + RAW_CHARS))
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
        raw_bytes = raw[: stop - start].encode("utf-8", SURROGATES)
        return Rejected(self.source, first_line, reason + where, raw_text(raw_bytes)), resume

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
            except (ValueError, RecursionError, OverLimitError):
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
            self._holds(start + RAW_CHARS - 1)
        end = min(self.end if stop is None else stop, start + RAW_CHARS)
        return raw_text(self._slice(start, end).encode("utf-8", SURROGATES))


def _skip_blank_back(text: str, position: int) -> int:
    """The first position from ``position`` back after which ``text`` holds only JSON whitespace
    (up to ``position``)."""
    while position > 0 and text[position - 1] in " \t\r\n":
        position -= 1
    return position
