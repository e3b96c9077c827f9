"""Long documents (thousands of terms, nearly every atom active): the block entries are found
from the dictionary's stored rows instead of every (term, atom) pair, with the same result."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.l1_coding import _block_entries, l1_sparse_code

from tests.support.l1_coding import lp_optimum


def sparse_dictionary(rng: np.random.Generator, m: int, k: int, terms: int) -> sp.csc_matrix:
    """``k`` unit-l1 atoms of ``terms`` random terms each."""
    rows = np.concatenate([rng.choice(m, terms, replace=False) for _ in range(k)])
    cols = np.repeat(np.arange(k), terms)
    A = sp.csc_matrix((rng.random(rows.size) + 0.1, (rows, cols)), shape=(m, k))
    return sp.csc_matrix(A @ sp.diags(1.0 / np.asarray(A.sum(axis=0)).ravel()))


def documents(rng: np.random.Generator, m: int, lengths: list[int]) -> sp.csc_matrix:
    cols = [rng.choice(m, n, replace=False) for n in lengths]
    P = sp.csc_matrix(
        (
            rng.random(sum(lengths)) + 0.05,
            (np.concatenate(cols), np.repeat(np.arange(len(lengths)), lengths)),
        ),
        shape=(m, len(lengths)),
    )
    P = sp.csc_matrix(P @ sp.diags(1.0 / np.asarray(P.sum(axis=0)).ravel()))
    P.sort_indices()
    return P


def entries(P: sp.csc_matrix, A: np.ndarray | sp.csc_matrix, lam: float, w: float):
    Pb = P.copy()
    Pb.data[:] = 1
    mass = np.asarray((Pb.T @ A).todense() if sp.issparse(A) else Pb.T @ A)
    colnorm = np.asarray(A.sum(axis=0)).ravel()
    active = sp.csr_matrix(w * colnorm + lam - (1 + w) * mass < 0)
    active.sort_indices()
    doc_of_nnz = np.repeat(np.arange(P.shape[1]), np.diff(P.indptr))
    return _block_entries(P, A, active, doc_of_nnz), active


@pytest.mark.parametrize("seed", range(3))
def test_entries_from_stored_rows_equal_those_from_every_pair(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = 400
    A = sparse_dictionary(rng, m, 120, 12)
    P = documents(rng, m, [5, 40, 350, 8, 390, 3])  # short and long documents together
    (row, var, val), active = entries(P, A, 0.01, 0.1)
    assert np.diff(active.indptr)[[2, 4]].min() > 100  # the long ones: most atoms active
    (row_d, var_d, val_d), _ = entries(P, A.toarray(), 0.01, 0.1)  # dense: every pair
    np.testing.assert_array_equal(row, row_d)
    np.testing.assert_array_equal(var, var_d)
    np.testing.assert_array_equal(val, val_d)
    assert val.size and (val != 0).all()


def test_long_documents_are_coded_to_the_lp_optimum() -> None:
    rng = np.random.default_rng(7)
    m, lam = 300, 0.05
    A = sparse_dictionary(rng, m, 60, 10)
    P = documents(rng, m, [250, 12, 280])
    res = l1_sparse_code(P, A, lam)
    Ad = A.toarray()
    for j in range(P.shape[1]):
        opt = lp_optimum(P[:, j].toarray().ravel(), Ad, lam)
        assert res.objective[j] == pytest.approx(opt, rel=1e-3, abs=1e-7)


def test_a_long_document_does_not_enumerate_every_term_atom_pair() -> None:
    rng = np.random.default_rng(3)
    m = 6000
    A = sparse_dictionary(rng, m, 800, 30)
    P = documents(rng, m, [5500])  # 5,500 terms by 800 active atoms: 4.4 M pairs
    Pb = P.copy()
    Pb.data[:] = 1
    active = sp.csr_matrix(0.1 + 0.01 - 1.1 * np.asarray((Pb.T @ A).todense()) < 0)
    assert active.nnz > 700
    tracemalloc.start()
    try:
        _block_entries(P, A, active, np.zeros(P.nnz, dtype=np.int64))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20e6  # every pair: index and value arrays of 4.4 M entries, over 100 MB
