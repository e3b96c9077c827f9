"""NNLS for the coefficient step of OR-NMF against exact references (scipy nnls, lsq_linear)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import lsq_linear, nnls
from sparsewatch.models import nnls as nnls_module
from sparsewatch.models.nnls import _solve_passive, nnls_bpp, nnls_pgd, solve_nnls


def _instance(seed: int, m: int, r: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((m, r)) + 0.5 * rng.random((m, r))
    V = rng.standard_normal((m, n))
    return W, V


def _reference(W: np.ndarray, V: np.ndarray) -> np.ndarray:
    return np.column_stack([nnls(W, V[:, j])[0] for j in range(V.shape[1])])


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.integers(4, 30),
    r=st.integers(1, 8),
    n=st.integers(1, 40),
)
def test_bpp_matches_scipy_nnls(seed: int, m: int, r: int, n: int) -> None:
    """Same objective as scipy's NNLS, and the KKT conditions hold (robust to conditioning)."""
    r = min(r, m)
    W, V = _instance(seed, m, r, n)
    H = nnls_bpp(W.T @ W, W.T @ V)
    ref = _reference(W, V)
    ours = np.sum((V - W @ H) ** 2, axis=0)
    theirs = np.sum((V - W @ ref) ** 2, axis=0)
    scale = np.sum(V**2, axis=0) + 1.0
    assert np.all(ours <= theirs + 1e-9 * scale)
    grad = W.T @ (W @ H - V)
    assert H.min() >= 0.0
    tol = 1e-7 * (np.abs(W).sum() * np.abs(V).max() + 1.0)
    assert np.all(grad >= -tol)
    assert np.all(np.abs(grad[H > 0]) <= tol)
    if np.linalg.cond(W) < 1e4:
        np.testing.assert_allclose(H, ref, atol=1e-8, rtol=1e-7)


@pytest.mark.parametrize("seed", range(4))
def test_bpp_on_nonnegative_data_like_nmf(seed: int) -> None:
    rng = np.random.default_rng(seed)
    W = rng.random((60, 12)) ** 3
    V = rng.random((60, 300))
    np.testing.assert_allclose(solve_nnls(W, W.T @ V), _reference(W, V), atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_pgd_matches_scipy_nnls_and_box_reference(seed: int) -> None:
    W, V = _instance(seed, 25, 6, 30)
    G, C = W.T @ W, W.T @ V
    np.testing.assert_allclose(nnls_pgd(G, C, max_iter=20000), _reference(W, V), atol=1e-6)
    upper = 0.3
    boxed = nnls_pgd(G, C, upper=upper, max_iter=20000)
    ref = np.column_stack(
        [lsq_linear(W, V[:, j], bounds=(0.0, upper), tol=1e-12).x for j in range(V.shape[1])]
    )
    np.testing.assert_allclose(boxed, ref, atol=1e-6)
    assert boxed.max() <= upper


@pytest.mark.parametrize("alpha", [0.05, 0.5])
def test_l1_regularised_coefficients(alpha: float) -> None:
    """``1/2||v - Wh||^2 + alpha 1^T h`` equals NNLS on ``v' = v - W (W^T W)^-1 alpha 1``."""
    W, V = _instance(7, 30, 5, 20)
    H = solve_nnls(W, W.T @ V, alpha_l1=alpha)
    shift = W @ np.linalg.solve(W.T @ W, np.full(5, alpha))
    np.testing.assert_allclose(H, _reference(W, V - shift[:, None]), atol=1e-7)
    assert np.count_nonzero(H) <= np.count_nonzero(solve_nnls(W, W.T @ V))


def test_passive_set_solves_grouped_by_size() -> None:
    """Every column solved on its own passive set (full, empty and every size in between)."""
    rng = np.random.default_rng(11)
    r, n = 7, 60
    F = rng.standard_normal((r + 3, r))
    G = F.T @ F
    C = rng.standard_normal((r, n))
    passive = rng.random((r, n)) < rng.random(n)
    passive[:, 0], passive[:, 1] = True, False
    X, Y = _solve_passive(G, C, passive)
    for j in range(n):
        P = passive[:, j]
        ref = np.zeros(r)
        ref[P] = np.linalg.solve(G[np.ix_(P, P)], C[P, j]) if P.any() else 0.0
        np.testing.assert_allclose(X[:, j], ref, atol=1e-10)
    np.testing.assert_allclose(Y[~passive], (G @ X - C)[~passive], atol=1e-10)
    assert np.all(Y[passive] == 0.0)


def test_bpp_on_a_chunk_of_sparse_documents() -> None:
    """A chunk shaped like text (many documents, sparse non-negative rows) against scipy."""
    rng = np.random.default_rng(12)
    W = rng.random((300, 10)) ** 4
    W /= W.sum(axis=0)
    V = rng.random((300, 200)) * (rng.random((300, 200)) < 0.05)
    H = solve_nnls(W, W.T @ V)
    np.testing.assert_allclose(H, _reference(W, V), atol=1e-8)


def test_bpp_solves_a_wide_chunk_in_column_blocks_with_each_column_exact(monkeypatch) -> None:
    """More columns than a block: every block's columns match scipy, and the solution does not
    depend on the block size (each column is its own problem)."""
    rng = np.random.default_rng(13)
    W = rng.random((60, 6)) ** 3
    V = rng.random((60, 45)) * (rng.random((60, 45)) < 0.2)
    whole = solve_nnls(W, W.T @ V)
    monkeypatch.setattr(nnls_module, "COLUMN_BLOCK", 7)  # 7 blocks, the last of 3 columns
    blocked = solve_nnls(W, W.T @ V)
    assert blocked.shape == (6, 45)
    np.testing.assert_allclose(blocked, _reference(W, V), atol=1e-8)
    np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-12)
