"""Input checks shared by the NMF models (OR-/MOR-/WOR-NMF and dynamic NMF), :func:`is_sparse`,
and the scikit-learn tags of the models of TF-IDF rows (:func:`tfidf_model_tags`)."""

from __future__ import annotations

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
