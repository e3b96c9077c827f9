"""An npz blob whose .npy header declares a shape it does not hold is the documented ValueError,
in every .npy format version and however the member is named or compressed: numpy allocates the
declared array before reading it, so a format 3.0 header (which the size check skipped), a member
not named ``*.npy`` (np.load reads it as an array all the same) or a compressed member whose size
in the zip directory is a claim made numpy allocate 256 TiB (MemoryError), and a shape of
``(0, 2**70)`` overflowed numpy's int64 element count (OverflowError). Legitimate format 3.0
arrays (a structured dtype with non-latin-1 field names) still load, from a stored checkpoint
too."""

from __future__ import annotations

import io
import struct
import warnings
import zipfile
import zlib

import numpy as np
import pytest
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays
from sparsewatch.storage.store import Store

HUGE = 2**45  # float64 numbers: 256 TiB
STRUCTURED = np.dtype([("温度", "<f8"), ("n", "<i4")])  # not latin-1: numpy writes format 3.0


def _npy(shape: str, version: tuple[int, int], descr: object = "<f8") -> bytes:
    """An .npy file in format ``version`` declaring ``shape`` (Python text), then 64 zero bytes."""
    text = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {shape}, }}".encode()
    fixed = 10 if version == (1, 0) else 12
    text += b" " * (-(fixed + len(text) + 1) % 64) + b"\n"
    length = struct.pack("<H" if version == (1, 0) else "<I", len(text))
    return b"\x93NUMPY" + bytes(version) + length + text + b"\0" * 64


def _npz(member: bytes, name: str = "W.npy", method: int = zipfile.ZIP_STORED) -> bytes:
    """An archive of one member ``name`` holding ``member`` (CRC and sizes consistent)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo(name), member, compress_type=method)
    return buffer.getvalue()


def _deflated_claiming(member: bytes, claimed: int) -> bytes:
    """An archive of one deflated member "W.npy" holding ``member``, whose directory claims it
    decompresses to ``claimed`` bytes (a ZIP64 size: zipfile believes it until it reads)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = packer.compress(member) + packer.flush()
    name, crc = b"W.npy", zlib.crc32(member)
    local = struct.pack(
        "<4s2B4HL2L2H", b"PK\x03\x04", 45, 0, 0, 8, 0, 0x21, crc, len(data), len(member),
        len(name), 0,
    ) + name + data  # fmt: skip
    extra = struct.pack("<HHQ", 1, 8, claimed)  # ZIP64: the uncompressed size
    central = struct.pack(
        "<4s4B4HL2L5H2L", b"PK\x01\x02", 45, 3, 45, 0, 0, 8, 0, 0x21, crc, len(data),
        0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0, 0,
    ) + name + extra  # fmt: skip
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local), 0)
    return local + central + end


DAMAGED = {
    "v1 huge": _npz(_npy(f"({HUGE},)", (1, 0))),
    "v2 huge": _npz(_npy(f"({HUGE},)", (2, 0))),
    "v3 huge": _npz(_npy(f"({HUGE},)", (3, 0))),
    "v3 huge structured": _npz(_npy(f"({HUGE},)", (3, 0), descr=STRUCTURED.descr)),
    "v1 (0, 2**70)": _npz(_npy(f"(0, {2**70})", (1, 0))),
    "v2 (0, 2**63)": _npz(_npy(f"(0, {2**63})", (2, 0))),
    "v3 (0, 2**70)": _npz(_npy(f"(0, {2**70})", (3, 0))),
    "v3 (2**70,)": _npz(_npy(f"({2**70},)", (3, 0))),
    "v3 negative": _npz(_npy("(-1, 4)", (3, 0))),
    "v3 not a dict": _npz(b"\x93NUMPY\x03\x00\x04\x00\x00\x00[1]\n"),
    "v3 truncated header": _npz(b"\x93NUMPY\x03\x00\xff\x00\x00\x00{'descr'"),
    "v3 bad utf-8": _npz(b"\x93NUMPY\x03\x00\x04\x00\x00\x00\xff\xfe{\n"),
    "v3 bad descr": _npz(_npy("(3,)", (3, 0), descr="not a dtype")),
    "v4": _npz(_npy("(3,)", (4, 0))),
    "no .npy name": _npz(_npy(f"({HUGE},)", (1, 0)), name="W"),
    "deflated": _npz(_npy(f"({HUGE},)", (3, 0)), method=zipfile.ZIP_DEFLATED),
    "deflated, size claimed": _deflated_claiming(_npy(f"({HUGE},)", (1, 0)), 8 * HUGE + 128),
}


@pytest.mark.parametrize("blob", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_header_is_a_value_error(blob: bytes) -> None:
    with pytest.raises(ValueError, match="not a valid npz blob"):
        npz_to_arrays(blob)


def test_the_crafted_blobs_are_otherwise_well_formed() -> None:
    """The same builders with a shape the data fits load: the blobs above fail on the shape."""
    for version in ((1, 0), (2, 0), (3, 0)):
        blob = _npz(_npy("(2, 4)", version))
        np.testing.assert_array_equal(npz_to_arrays(blob)["W"], np.zeros((2, 4)))
    blob = _npz(_npy("(0, 4)", (3, 0)), name="W")
    assert npz_to_arrays(blob)["W"].shape == (0, 4)
    member = _npy("(8,)", (1, 0))
    np.testing.assert_array_equal(
        npz_to_arrays(_deflated_claiming(member, len(member)))["W"], np.zeros(8)
    )


def _structured() -> np.ndarray:
    return np.array([(1.5, 2), (-0.0, -4), (np.nan, 7)], dtype=STRUCTURED)


def _v3_blob(compress: bool) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # numpy: "Stored array in format 3.0"
        blob = arrays_to_npz({"s": _structured(), "x": np.arange(3)}, compress=compress)
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        assert archive.read("s.npy")[6:8] == b"\x03\x00"  # (what this test is about)
    return blob


@pytest.mark.parametrize("compress", [False, True])
def test_a_format_3_array_round_trips(compress: bool) -> None:
    back = npz_to_arrays(_v3_blob(compress))
    assert back["s"].dtype == STRUCTURED
    assert back["s"].tobytes() == _structured().tobytes()
    np.testing.assert_array_equal(back["x"], np.arange(3))


def test_a_checkpoint_with_a_damaged_header_is_a_value_error(database_url: str) -> None:
    """A worker restoring it got the MemoryError (its digest is right: the blob is as written)."""
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.put_checkpoint("g", "huge", DAMAGED["v3 huge"], {})
            tx.put_checkpoint("g", "overflow", DAMAGED["v1 (0, 2**70)"], {})
        with pytest.raises(ValueError, match="not a valid npz blob"):
            store.load_checkpoint("g", "huge")
        with pytest.raises(ValueError, match="not a valid npz blob"):
            store.load_checkpoint("g", "overflow")


def test_a_format_3_checkpoint_round_trips(database_url: str) -> None:
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.put_checkpoint("g", "s", _v3_blob(False), {"k": 1})
        checkpoint = store.load_checkpoint("g", "s")
    assert checkpoint is not None and checkpoint.meta == {"k": 1}
    assert checkpoint.state["s"].tobytes() == _structured().tobytes()
