"""npz blobs: bit-identical round trips without pickle, deterministic bytes, clear rejections."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sparsewatch.storage.serialization import arrays_to_npz, describe_arrays, npz_to_arrays

DTYPES = st.sampled_from(["<f4", "<f8", "<i4", "<i8", "|b1", "<U7", "<c16"])


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
        DTYPES.flatmap(
            lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))
        ),
        max_size=5,
    ),
    st.booleans(),
)
def test_round_trip_is_bit_identical(arrays, compress):
    blob = arrays_to_npz(arrays, compress=compress)
    back = npz_to_arrays(blob)
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        assert back[name].tobytes() == array.tobytes()  # NaN payloads and -0.0 included
    assert arrays_to_npz(arrays, compress=compress) == blob  # deterministic bytes
    # Readable by plain numpy without pickle.
    with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(arrays)


def test_scalars_become_zero_dimensional_arrays():
    back = npz_to_arrays(arrays_to_npz({"n": 3, "x": np.float32(0.5), "flag": True}))
    assert back["n"].shape == () and int(back["n"]) == 3
    assert back["x"].dtype == np.float32 and back["flag"].dtype == np.bool_
    assert describe_arrays({"A": np.zeros((2, 3), np.float32)}) == {
        "A": {"shape": [2, 3], "dtype": "<f4"}
    }


@pytest.mark.parametrize(
    "bad",
    [{"a": np.array([{"x": 1}], dtype=object)}, {"a": np.array([1, "x", None], dtype=object)}],
)
def test_object_arrays_are_rejected(bad):
    with pytest.raises(ValueError, match="Python objects"):
        arrays_to_npz(bad)


# "W.npy" is member "W.npy.npy", but np.load finds member "W.npy" (array "W") first; a NUL cut
# the member's name, so "x\x00y" replaced array "x"
@pytest.mark.parametrize("name", ["", "a/b", "W.npy", "x\x00y", "tab\there", "del\x7f"])
def test_bad_names_are_rejected(name):
    with pytest.raises(ValueError, match="array name"):
        arrays_to_npz({name: np.zeros(1)})


def test_damaged_blob_is_a_value_error():
    blob = arrays_to_npz({"a": np.arange(100)})
    with pytest.raises(ValueError, match="npz"):
        npz_to_arrays(blob[: len(blob) // 2])
    with pytest.raises(ValueError):
        npz_to_arrays(b"not a zip")
