"""The size limit of a JSON line or array element (:data:`MAX_RECORD_BYTES`): a line's bytes,
or its size when it is over the limit, read past without being held (:func:`line_bytes`)."""

from __future__ import annotations

from sparsewatch.consumers.field_mapping import MAX_MESSAGE_BYTES
from sparsewatch.replay.bounded_lines import LongLine

# The longest JSON line or array element read (bytes, its line end aside). A document message is
# at most MAX_MESSAGE_BYTES, the producer's limit, and JSON may write each of its bytes as a
# six-byte escape ("\u0041"): a longer record can only be rejected. It was read and parsed whole
# first, about eight times its size in memory: one of 200 MB ended the replay (MemoryError).
MAX_RECORD_BYTES = 6 * MAX_MESSAGE_BYTES


def line_bytes(line: bytes | LongLine) -> bytes | int | None:
    """The bytes of ``line``; for a line over :data:`MAX_RECORD_BYTES` (its end aside), its
    size, the line read past without being held; ``None`` for a line the file ends inside (the
    error that stopped reading it follows)."""
    if isinstance(line, bytes):
        if len(line) > MAX_RECORD_BYTES and (size := len(line) - _end_size(line)) > (
            MAX_RECORD_BYTES
        ):
            return size
        return line
    pieces: list[bytes] = []
    size = 0
    tail = b""  # the line's last two bytes (its end)
    for piece in line:
        size += len(piece)
        tail = piece[-2:] if len(piece) > 1 else tail[-1:] + piece
        if size <= MAX_RECORD_BYTES + 2:
            pieces.append(piece)
        elif pieces:
            pieces.clear()
    if line.error is not None:
        return None
    size -= _end_size(tail)
    return size if size > MAX_RECORD_BYTES else b"".join(pieces)


def _end_size(tail: bytes) -> int:
    """The size of the line end that ``tail`` (a line, or its last bytes) ends with."""
    return 2 if tail.endswith(b"\r\n") else 1 if tail.endswith((b"\n", b"\r")) else 0


def over_limit(what: str, size: int) -> str:
    """Why a line or array element of ``size`` bytes is rejected."""
    return f"{what} of {size} bytes, over the limit of {MAX_RECORD_BYTES}"
