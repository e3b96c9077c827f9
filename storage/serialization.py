"""Arrays to and from npz blobs, loadable with ``np.load(allow_pickle=False)``.

Model states and dictionary snapshots are dictionaries of plain numeric or unicode numpy arrays
(scalars as 0-d arrays). Object arrays would need pickle, which is never used for stored data, so
they are rejected on the way in with a clear error.
"""

from __future__ import annotations

import ast
import io
import math
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Mapping
from typing import IO

import numpy as np

_EPOCH = (1980, 1, 1, 0, 0, 0)
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a member first, or an empty archive
# What np.load raises for a damaged archive: besides zipfile's and zlib's errors, a damaged
# central directory gives zipfile's NotImplementedError (an unknown "version needed to extract")
# or RuntimeError (the "encrypted" flag), and a damaged .npy header numpy's ValueError or, from
# the tokenizer of its header filter, tokenize.TokenError or SyntaxError. A header's shape whose
# dimension does not fit numpy's int64 element count is an OverflowError, and one that declares
# more than memory holds a MemoryError: both are a damaged blob's, as :func:`_check_members`
# refuses any shape larger than the data the blob holds (its arrays fit where the blob does).
_DAMAGED = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    SyntaxError,
    tokenize.TokenError,
    OverflowError,
    MemoryError,
)
# numpy's own limit on the text of an .npy header (np.load's max_header_size)
_MAX_HEADER_CHARS = 10_000
_MAX_DIMENSION = 2**63  # numpy counts elements in int64
_CHUNK = 1 << 20  # what _count reads of a compressed member at a time


def _checked(arrays: Mapping[str, object]) -> dict[str, np.ndarray]:
    checked: dict[str, np.ndarray] = {}
    for name, value in arrays.items():
        # Each array is the zip member "<name>.npy": a "/" would make a folder, a NUL cut the
        # member's name (the array replaced another), a control character is no file name, and
        # np.load looks a name up as a member first, so "W.npy" read back as array "W".
        if (
            not isinstance(name, str)
            or not name
            or "/" in name
            or name.endswith(".npy")
            or any(ord(c) < 32 or ord(c) == 127 for c in name)
        ):
            raise ValueError(
                f"array name {name!r} must be a non-empty string without '/', control "
                "characters or a '.npy' ending"
            )
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise ValueError(
                f"array {name!r} has dtype {array.dtype} (Python objects); only numeric, boolean "
                "or unicode arrays can be stored (np.load(allow_pickle=False))"
            )
        checked[name] = array
    return checked


def arrays_to_npz(arrays: Mapping[str, object], compress: bool = False) -> bytes:
    """An npz archive of ``arrays`` (name -> array-like) as bytes; object arrays raise ValueError.

    The same arrays always give the same bytes (members carry a fixed timestamp, unlike
    ``np.savez``), so rewriting an unchanged state is recognisably a no-op.
    """
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", compression=method, allowZip64=True) as archive:
        for name, array in _checked(arrays).items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.compress_type = method
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
    return buffer.getvalue()


def npz_to_arrays(blob: bytes) -> dict[str, np.ndarray]:
    """The arrays of an npz archive, read without pickle; a damaged blob raises ValueError."""
    if not blob.startswith(_ZIP_MAGIC):  # np.load would read a bare .npy or refuse a "pickle"
        raise ValueError(f"not a valid npz blob: it starts with {bytes(blob[:8])!r}, not a zip")
    try:
        _check_members(blob)
        with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except _DAMAGED as exc:
        raise ValueError(f"not a valid npz blob: {type(exc).__name__}: {exc}") from exc
    for name, value in arrays.items():
        if not isinstance(value, np.ndarray):  # a member that is not an .npy file
            raise ValueError(f"not a valid npz blob: member {name!r} is not an array")
    return arrays


def _check_members(blob: bytes) -> None:
    """``ValueError`` for an array member whose header declares more data than the member holds,
    or a dimension outside ``0 <= d < 2**63``: numpy allocates the declared array before reading
    it (a damaged header's shape of 2^45 raised MemoryError for 256 TiB, not this module's
    ValueError; one of ``(0, 2**70)`` an OverflowError).

    np.load reads any member that starts with the .npy magic as an array, whatever its name, so
    every such member is checked, in each format version numpy reads (3.0, with a UTF-8 header, is
    what numpy writes for a structured dtype with non-latin-1 field names). The data a member
    holds is bounded without reading it where it is stored uncompressed (the blob holds it); a
    compressed member's sizes in the archive's directory are only claims, so its data is counted
    up to the declared size, in chunks."""
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                if member.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
                    continue  # (np.load returns its bytes; npz_to_arrays refuses them)
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                shape, dtype = _read_header(member, version)
                if not all(0 <= d < _MAX_DIMENSION for d in shape):
                    raise ValueError(
                        f"member {info.filename!r} declares shape {shape}: a dimension is "
                        f"outside 0 <= d < 2**63"
                    )
                declared = math.prod(shape) * dtype.itemsize
                held = info.file_size
                if info.compress_type == zipfile.ZIP_STORED:
                    held = min(held, info.compress_size, len(blob))
                elif declared <= held:
                    held = _count(member, declared)
                if declared > held:
                    raise ValueError(
                        f"member {info.filename!r} declares {declared} bytes of data "
                        f"(shape {shape}, {dtype}) but holds {held}"
                    )


def _read_header(member: IO[bytes], version: tuple[int, int]) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype an .npy header declares, read as np.load reads it: numpy's public
    readers for versions 1.0 and 2.0; version 3.0 (which has none) is version 2.0's layout with a
    UTF-8 header that numpy parses with :func:`ast.literal_eval` alone. Another version is a
    ``ValueError`` (numpy reads no other)."""
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        return shape, dtype
    if version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        return shape, dtype
    if version != (3, 0):
        raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    (length,) = struct.unpack("<I", _read_exactly(member, 4))
    text = _read_exactly(member, length).decode("utf-8")
    if len(text) > _MAX_HEADER_CHARS:
        raise ValueError(f"the .npy header holds {len(text)} characters, over numpy's limit")
    header = ast.literal_eval(text)
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"the .npy header is not numpy's dictionary: {text[:80]!r}")
    shape = header["shape"]
    if not isinstance(shape, tuple) or not all(isinstance(d, int) for d in shape):
        raise ValueError(f"the .npy header's shape is not valid: {shape!r}")
    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except TypeError as exc:  # (numpy's readers make it a ValueError too)
        raise ValueError(f"the .npy header's descr is not a valid dtype: {exc}") from exc
    return shape, dtype


def _read_exactly(member: IO[bytes], size: int) -> bytes:
    """``size`` bytes of ``member``; fewer is a ``ValueError`` (a truncated header)."""
    data = member.read(size)
    if len(data) != size:
        raise ValueError(f"the .npy header is truncated: {len(data)} of {size} bytes")
    return data


def _count(member: IO[bytes], limit: int) -> int:
    """How many bytes ``member`` still holds, counted up to ``limit``, without keeping them."""
    counted = 0
    while counted < limit:
        chunk = member.read(min(_CHUNK, limit - counted))
        if not chunk:
            break
        counted += len(chunk)
    return counted


def describe_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, object]]:
    """Shape and dtype of each array (stored next to a snapshot for listing without loading it)."""
    return {
        name: {"shape": list(np.shape(a)), "dtype": np.asarray(a).dtype.str}
        for name, a in arrays.items()
    }
