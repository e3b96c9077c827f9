"""A file's first bytes read again: what the readers read of a file to tell its compression or
its line ending is read again, then the rest (:func:`replayed`), so that a pipe, a FIFO or
``/dev/stdin`` is read once, from its start to its end, as a regular file is."""

from __future__ import annotations

import io
from typing import Any

CHUNK_BYTES = 1 << 16  # how much is read at a time; a longer line is read in pieces


class ReplayedStream(io.RawIOBase):
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


def replayed(
    head: bytes, rest: io.BufferedIOBase, error: BaseException | None = None
) -> io.BufferedReader:
    """``head`` then ``rest`` (or ``error``), read :data:`CHUNK_BYTES` at a time
    (:class:`ReplayedStream`)."""
    return io.BufferedReader(ReplayedStream(head, rest, error), CHUNK_BYTES)
