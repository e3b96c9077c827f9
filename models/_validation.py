"""Input checks shared by the NMF models (OR-/MOR-/WOR-NMF and dynamic NMF: their matrices and
the ``keep_index`` of ``resize_features``, :func:`check_keep_index`), :func:`is_sparse`,
and the scikit-learn tags of the models of TF-IDF rows (:func:`tfidf_model_tags`)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import TypeGuard

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Tags
from sklearn.utils.validation import assert_all_finite


def is_sparse(X: object) -> TypeGuard[sp.spmatrix]:
    """:func:`scipy.sparse.issparse`, which the type checker can narrow ``X`` by (scipy has no
    type information), for input that may also be any array-like."""
    return sp.issparse(X)


def tfidf_model_tags(tags: Tags, dtype: type | None) -> Tags:
    """scikit-learn tags of a model of TF-IDF rows: sparse, non-negative input; codes in
    ``dtype`` whatever the input's (``None``: float64, the default tags)."""
    tags.input_tags.sparse = True
    tags.input_tags.positive_only = True
    if dtype is not None:
        tags.transformer_tags.preserves_dtype = [np.dtype(dtype).name]
    return tags


def nonnegative_matrix(
    X: np.ndarray | sp.spmatrix, model: str, sparse: bool = False
) -> np.ndarray | sp.csr_matrix:
    """``X`` as float64: CSR when sparse (or when ``sparse`` is set), else an ndarray.

    ``ValueError`` for input that is not 2-D (a 1-D array raised ``IndexError`` or became one
    document), complex (the cast dropped the imaginary part with only a warning), with NaN or
    infinite entries, or with negative ones (NMF factorises non-negative data; ``model`` names the
    caller in the message). Duplicate stored entries of a sparse ``X`` are summed on a copy, so
    the caller's matrix is left as it is and sums of squares taken from the stored entries are
    right (``a + b`` stored twice counted as ``a^2 + b^2``).
    """
    if not sp.issparse(X):
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(
                f"expected a 2-D array (documents x terms), got shape {X.shape}. Reshape your data"
            )
    if np.iscomplexobj(X):
        raise ValueError("Complex data not supported")
    if sp.issparse(X) or sparse:
        X = sp.csr_matrix(X, dtype=np.float64)
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
    else:
        X = np.asarray(X, dtype=np.float64)
    assert_all_finite(X, input_name="X")
    if (X if isinstance(X, np.ndarray) else X.data).min(initial=0.0) < 0.0:
        raise ValueError(f"Negative values in data passed to {model} (it needs non-negative data)")
    return X


def require_samples_and_features(X: np.ndarray | sp.spmatrix, model: str) -> None:
    """``ValueError`` (scikit-learn's message) for ``X`` without samples or without features.

    For ``fit``, which learns from ``X`` alone and would return a model without bases; the
    streaming ``partial_fit`` accepts an empty window and waits for data instead."""
    for axis, what in ((0, "sample(s)"), (1, "feature(s)")):
        if X.shape[axis] < 1:
            raise ValueError(
                f"Found array with 0 {what} (shape={X.shape}) while a minimum of 1 is "
                f"required by {model}."
            )


def check_feature_count(n_features: int, n_features_in: int, model: str) -> None:
    """``ValueError`` (scikit-learn's message) for ``X`` with fewer features than the model
    knows. A wider ``X`` is accepted on purpose: its extra columns are terms a growing vocabulary
    appended since (the callers give them zero weight)."""
    if n_features < n_features_in:
        raise ValueError(
            f"X has {n_features} features, but {model} is expecting {n_features_in} features as "
            "input (at least: a wider X appends new terms)"
        )


def check_keep_index(
    keep_index: np.ndarray | Sequence[int] | None, n_features_in: int, n_features: int
) -> np.ndarray:
    """``keep_index`` of ``resize_features`` as an int64 array (``None``: every old term).

    Valid: 1-D integers, each an old term index in ``0 .. n_features_in - 1``, no index twice,
    at most ``n_features`` of them, in any order (the order they take in the new terms).
    ``n_features`` must be an integer >= 1. Anything else raises ``ValueError`` before the model
    changes: numpy wrapped negative indices onto the last terms, copied a duplicated term twice,
    read a boolean mask as 0/1 indices or failed with ``IndexError``."""
    if not isinstance(n_features, numbers.Integral) or isinstance(n_features, bool):
        raise ValueError(f"n_features must be an integer, got {n_features!r}")
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}")
    if keep_index is None:
        keep = np.arange(n_features_in, dtype=np.int64)
    else:
        keep = np.asarray(keep_index)
        if keep.ndim != 1:
            raise ValueError(f"keep_index must be 1-D, got shape {keep.shape}")
        if keep.size and keep.dtype == bool:
            raise ValueError("keep_index must hold term indices, not a boolean mask")
        if keep.size and not np.issubdtype(keep.dtype, np.integer):
            raise ValueError(f"keep_index must hold integers, got dtype {keep.dtype}")
        keep = keep.astype(np.int64)
        if keep.size and (keep.min() < 0 or keep.max() >= n_features_in):
            bad = keep[(keep < 0) | (keep >= n_features_in)]
            raise ValueError(
                f"keep_index has term indices outside 0..{n_features_in - 1}: {bad[:5].tolist()}"
            )
        if np.count_nonzero(np.bincount(keep, minlength=n_features_in) > 1):  # O(n), no sort
            raise ValueError("keep_index has duplicate term indices")
    if keep.size > n_features:
        if keep_index is None:
            raise ValueError(
                f"n_features = {n_features} is below the model's {n_features_in} terms: pass "
                "keep_index, the terms to keep"
            )
        raise ValueError(f"keep_index keeps {keep.size} terms, more than n_features = {n_features}")
    return keep
