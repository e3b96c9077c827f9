"""Arrays to and from npz blobs, loadable with ``np.load(allow_pickle=False)``.

Model states and dictionary snapshots are dictionaries of plain numeric or unicode numpy arrays
(scalars as 0-d arrays). Object arrays would need pickle, which is never used for stored data, so
they are rejected on the way in with a clear error.
"""

from __future__ import annotations

import io
import math
import tokenize
import zipfile
import zlib
from collections.abc import Mapping

import numpy as np

_EPOCH = (1980, 1, 1, 0, 0, 0)
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a member first, or an empty archive
# What np.load raises for a damaged archive: besides zipfile's and zlib's errors, a damaged
# central directory gives zipfile's NotImplementedError (an unknown "version needed to extract")
# or RuntimeError (the "encrypted" flag), and a damaged .npy header numpy's ValueError or, from
# the tokenizer of its header filter, tokenize.TokenError or SyntaxError.
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
)


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
        _check_member_sizes(blob)
        with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except _DAMAGED as exc:
        raise ValueError(f"not a valid npz blob: {type(exc).__name__}: {exc}") from exc
    for name, value in arrays.items():
        if not isinstance(value, np.ndarray):  # a member that is not an .npy file
            raise ValueError(f"not a valid npz blob: member {name!r} is not an array")
    return arrays


def _check_member_sizes(blob: bytes) -> None:
    """``ValueError`` for an ``.npy`` member whose header declares more data than the member
    holds: numpy allocates the declared array before reading it (a damaged header's shape of
    2^45 raised MemoryError for 256 TiB, not this module's ValueError)."""
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue  # (np.load refuses it: not an array)
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                else:
                    continue  # (3.0: unicode field names, which no state has)
                declared = math.prod(shape) * dtype.itemsize
                if declared > info.file_size:
                    raise ValueError(
                        f"member {info.filename!r} declares {declared} bytes of data "
                        f"(shape {shape}, {dtype}) but holds {info.file_size}"
                    )


def describe_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, object]]:
    """Shape and dtype of each array (stored next to a snapshot for listing without loading it)."""
    return {
        name: {"shape": list(np.shape(a)), "dtype": np.asarray(a).dtype.str}
        for name, a in arrays.items()
    }
