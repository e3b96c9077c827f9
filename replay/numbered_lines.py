"""A file's numbered lines as the readers read them (:func:`numbered_lines`): opened through its
compression, split in bounded memory, and ended by an entry that says why reading stopped when
the file is damaged, cut short or compressed otherwise than with gzip."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

from sparsewatch.replay.bounded_lines import STOP_ERRORS, CutShortError, LongLine, byte_lines
from sparsewatch.replay.input_compression import CompressedError, open_binary

Line = tuple[int, bytes | LongLine | None, str]  # what numbered_lines yields


def numbered_lines(path: Path) -> Iterator[Line]:
    """(line number, bytes, error): the file's lines as UTF-8 (see :func:`byte_lines`: a long
    line as a :class:`LongLine`); a damaged gzip, UTF-16 that ends inside a character, or a file
    compressed otherwise than with gzip ends with an error entry (bytes ``None``)."""
    try:
        fh = open_binary(path)
    except CompressedError as exc:
        yield 1, None, str(exc)
        return
    counter = itertools.count(1)
    with fh:
        try:
            yield from zip(counter, byte_lines(fh), itertools.repeat(""))
        except (*STOP_ERRORS, CutShortError) as exc:
            number = next(counter) - 2  # the lines yielded (zip counted one more)
            if isinstance(exc, CutShortError):
                number, exc = number - 1, exc.args[0]  # (the line it cut is incomplete)
            if isinstance(exc, UnicodeDecodeError):
                what = f"not {exc.encoding.upper()} ({exc.reason})"
            else:
                what = "truncated gzip" if isinstance(exc, EOFError) else f"damaged file ({exc})"
            yield number + 1, None, f"{what}: reading stopped after line {number}"


def whole_line(line: LongLine) -> bytes | None:
    """The bytes of a long line, read whole, for the CSV and Reuters SGML readers (which have
    limits of their own); ``None`` when the file ends inside it (the error that follows says
    where)."""
    whole = b"".join(line)
    return None if line.error is not None else whole
