"""Damaged npz blobs (a snapshot or checkpoint read back from the database) are a ValueError
whatever part of the archive is damaged: the zip's version or flags in its central directory, or
the header of an array member. np.load raised NotImplementedError, RuntimeError or
tokenize.TokenError for these, which the callers (``sparsewatch export-snapshot``, a worker's
restore) do not expect from a damaged blob."""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np
import pytest
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays

_CENTRAL = b"PK\x01\x02"


def _patched_central(offset: int, value: int) -> bytes:
    """A valid blob with the 2-byte field at ``offset`` of its central directory entry set."""
    blob = bytearray(arrays_to_npz({"a": np.arange(10.0)}))
    at = blob.index(_CENTRAL) + offset
    blob[at : at + 2] = struct.pack("<H", value)
    return bytes(blob)


def _member(raw: bytes) -> bytes:
    """An archive whose member "a.npy" holds ``raw`` (CRC and sizes consistent)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.npy", raw)
    return buffer.getvalue()


_HEADER = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }"


def _npy_with_header(header: str) -> bytes:
    text = header.encode("latin1")
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + b"\x00" * 24


DAMAGED = {
    # "version needed to extract" 11.9: zipfile's NotImplementedError
    "zip version": _patched_central(6, 119),
    # the "encrypted" flag: zipfile's RuntimeError (a password is required)
    "encrypted flag": _patched_central(8, 1),
    # an unclosed bracket in the .npy header: tokenize.TokenError from numpy's header filter
    "npy header": _member(
        _npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (3,")
    ),
    # a shape of 2^45 float64 numbers: numpy allocated 256 TiB first (MemoryError)
    "npy huge shape": _member(
        _npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (35184372088832,), }")
    ),
}


@pytest.mark.parametrize("blob", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_archive_or_header_is_a_value_error(blob: bytes) -> None:
    with pytest.raises(ValueError, match="not a valid npz blob"):
        npz_to_arrays(blob)


def test_the_crafted_header_is_otherwise_well_formed() -> None:
    """The npy blob above fails on its header alone: closed, the same bytes load."""
    good = _member(_npy_with_header(_HEADER))
    np.testing.assert_array_equal(npz_to_arrays(good)["a"], np.zeros(3))
