"""OIADMM's converted windows and dual remap (the per-window core's speed-ups) change no result.

The batch update converts its window once and carries ``A_{t+1} X`` to the next step; a step
adds the window's entries to ``Z`` from its CSR form; the dense dual's rows are remapped by a
block copy (no term evicted) or ``np.take``. Each must give bit for bit what the plain step and
plain indexing give.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.l1_coding import l1_sparse_code
from sparsewatch.models.oiadmm import (
    OIADMM,
    _oiadmm_step,
    _remap_dual_rows,
    l1_dictionary_update,
    psi_max,
)
from sparsewatch.models.projections import project_l1_ball_nonneg

from tests.support.arrays import to_dense

M, K = 200, 8


def _problem(seed: int, n: int = 60) -> tuple[sp.csc_matrix, sp.csr_matrix, np.ndarray]:
    """A window ``P`` (``M x n``, unit-l1 columns), a start dictionary and the window's codes."""
    rng = np.random.default_rng(seed)
    A = np.zeros((M, K))
    for j in range(K):
        A[rng.choice(M, 12, replace=False), j] = rng.random(12)
    A /= A.sum(axis=0)
    X = np.zeros((K, n))
    for i in range(n):
        X[rng.choice(K, 2, replace=False), i] = rng.random(2) + 0.2
    P = (A @ X) * (rng.random((M, n)) < 0.8) + 0.02 * (rng.random((M, n)) < 0.03)
    P = sp.csc_matrix(P / P.sum(axis=0))
    A0 = project_l1_ball_nonneg(A * (rng.random((M, K)) < 0.7) + 0.01 * rng.random((M, K)))
    return P, l1_sparse_code(P, A0, 0.1).codes.T.tocsr(), A0.astype(np.float32)


@pytest.mark.parametrize("layout", ["dense", "csc"])
@pytest.mark.parametrize("over_weight", [1.0, 0.1])
def test_batch_update_takes_the_plain_steps(layout: str, over_weight: float) -> None:
    """The batch update (one converted window, ``A X`` carried between steps) returns bit for
    bit the dictionary of the same steps taken one by one, each converting the window afresh."""
    P, X, A0 = _problem(1)
    A = A0 if layout == "dense" else sp.csc_matrix(A0)
    got = l1_dictionary_update(P, X, A.copy(), n_iter=12, over_weight=over_weight)
    tau = 1.0 / (2.0 * psi_max(X))
    ref, D = A.copy(), sp.csc_matrix(P.shape, dtype=np.float32)
    for _ in range(12):
        ref, D, _ = _oiadmm_step(P, X, ref, D, 5.0, tau, over_weight)
    assert isinstance(D, np.ndarray)  # the steps after the first were dense ones
    assert sp.issparse(got) == (layout == "csc")
    np.testing.assert_array_equal(to_dense(got), to_dense(ref))
    assert not np.array_equal(to_dense(got), to_dense(A0))  # the steps moved the dictionary


def _messy(P: sp.csc_matrix, rng: np.random.Generator) -> sp.csc_matrix:
    """``P`` with each column's entries in random order and about half of them split into two
    stored halves (duplicates; halving is exact, so they sum to the entry)."""
    data, indices, indptr = [], [], [0]
    for j in range(P.shape[1]):
        rows, vals = P.indices[P.indptr[j] : P.indptr[j + 1]], P.data[P.indptr[j] : P.indptr[j + 1]]
        split = rng.random(rows.size) < 0.5
        rows = np.r_[rows, rows[split]]
        vals = np.r_[np.where(split, vals / 2, vals), vals[split] / 2]
        order = rng.permutation(rows.size)
        indices.append(rows[order])
        data.append(vals[order])
        indptr.append(indptr[-1] + rows.size)
    return sp.csc_matrix((np.concatenate(data), np.concatenate(indices), indptr), shape=P.shape)


def test_dense_step_sums_duplicate_window_entries_and_leaves_the_window_alone() -> None:
    """A window with duplicate entries (their sum is the entry) and unsorted indices takes the
    same dense step as its canonical form, and the caller's matrix is not canonicalised."""
    P, X, A0 = _problem(2)
    messy = _messy(P, np.random.default_rng(3))
    assert not messy.has_canonical_format and messy.nnz > P.nnz
    before = [a.copy() for a in (messy.data, messy.indices, messy.indptr)]
    D = np.zeros((P.shape[1], M), dtype=np.float32).T  # a dense dual: the dense step
    tau = 1.0 / (2.0 * psi_max(X))
    A1, D1, v1 = _oiadmm_step(messy, X, A0.copy(), D.copy(), 5.0, tau)
    A2, D2, v2 = _oiadmm_step(P, X, A0.copy(), D.copy(), 5.0, tau)
    np.testing.assert_array_equal(A1, A2)
    np.testing.assert_array_equal(D1, D2)
    assert v1 == v2
    for got, want in zip((messy.data, messy.indices, messy.indptr), before, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("evicted", [[], [0, 5, M - 1]], ids=["grown", "evicted"])
def test_dense_dual_rows_follow_the_vocabulary(evicted: list[int]) -> None:
    """Kept rows in order (a block copy when no term is evicted, ``np.take`` otherwise), then
    zero rows for the new terms; the dual stays the transpose of a C-ordered array."""
    rng = np.random.default_rng(4)
    D = np.ascontiguousarray(rng.random((30, M)), dtype=np.float32).T  # m x n, as OIADMM keeps it
    kept = np.setdiff1d(np.arange(M), evicted)
    got = _remap_dual_rows(D, kept, 7)
    want = np.vstack([D[kept], np.zeros((7, 30), dtype=np.float32)])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32 and got.T.flags.c_contiguous
    o = OIADMM().initialize(np.ones((M, K)))
    o.dual_ = D
    o.remap_rows(kept, 7)
    np.testing.assert_array_equal(o.dual_, want)
