"""The compression of an input file, known by its first bytes whatever its name: gzip, which
the readers read through (:func:`open_binary`), or bzip2, xz, zstd or zip, which they refuse
(:class:`CompressedError`)."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

from sparsewatch.replay.replayed_stream import replayed

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


class CompressedError(Exception):
    """The file is compressed otherwise than with gzip (its magic number says how)."""


def open_binary(path: Path) -> io.BufferedIOBase:
    """The file's bytes, decompressed when it starts with the gzip magic number; a
    :class:`CompressedError` when it starts with bzip2's, xz's, zstd's or zip's (each of its
    lines was rejected as garbage, "not UTF-8"). The file is read once, from its start to its
    end: a pipe, a FIFO or ``/dev/stdin`` is read as a regular file is."""
    raw = path.open("rb")
    magic = raw.peek(_MAGIC_BYTES)[:_MAGIC_BYTES]
    if magic and any(len(m) > len(magic) and m.startswith(magic) for m, _ in _MAGIC_NUMBERS):
        magic = raw.read(_MAGIC_BYTES)  # a pipe can give its first bytes alone: wait for more
        raw = replayed(magic, raw)
    if magic.startswith(_GZIP):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    for number, compression in _COMPRESSIONS:
        if magic.startswith(number):
            raw.close()
            raise CompressedError(
                f"{path} is {compression}-compressed: decompress it, or compress it with gzip, "
                "which replay reads"
            )
    return raw
