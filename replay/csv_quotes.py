"""Where the csv parser's quoted fields end (:func:`ends_in_quotes`), for the CSV reader to read
past a record whose field is over its limit, to the line that closes the field."""

from __future__ import annotations

import re

# The csv module's default dialect, which read_csv's parser uses: a quote opens a quoted field
# only as the field's first character (elsewhere it is a character of the field), "" in a quoted
# field is one quote, and the field goes on unquoted after its closing quote up to a comma or a
# line end.
_QUOTED_TEXT = re.compile(rb'(?:[^"]++|"")*+')  # a quoted field's text, up to its closing quote
_UNQUOTED_TEXT = re.compile(rb"[^,\r\n]*+")
_FIELDS = re.compile(rb'(?:(?:"(?:[^"]++|"")*+"|(?!"))[^,\r\n]*+,)*+')  # each with its comma


def ends_in_quotes(line: bytes, inside: bool) -> bool:
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
