"""Box-constrained coefficients (``0 <= h <= h_max``, Section III of OR-NMF) are exact.

They were solved by 500 FISTA steps, whose rate depends on ``cond(W^T W)``: with near-duplicate
bases (``init="data"`` drawing a document twice when there are more topics than documents) the
result stayed up to 0.8% above the optimal loss, 11% on random instances at ``cond >= 1e7``.
Every solver path is checked here against an exact reference on small instances: enumeration of
all ``3^r`` active sets (lower bound, free, upper bound) for ``r <= 6``, and the best of
bounded-variable least squares (:func:`scipy.optimize.lsq_linear`) and L-BFGS-B for larger ``r``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import lsq_linear, minimize
from sparsewatch.models import nnls as nnls_module
from sparsewatch.models.nmf_online import ORNMF
from sparsewatch.models.nnls import nnls_bpp, nnls_pgd, solve_nnls

RTOL_OBJECTIVE = 1e-6


def _gram(W: np.ndarray, alpha_l2: float = 0.0) -> np.ndarray:
    """``G`` exactly as :func:`solve_nnls` forms it (float64, with its tiny ridge)."""
    W = np.asarray(W, dtype=np.float64)
    G = W.T @ W
    return G + (alpha_l2 + 1e-12 * max(float(np.trace(G)), 1.0)) * np.eye(G.shape[0])


def _objective(G: np.ndarray, C: np.ndarray, X: np.ndarray) -> np.ndarray:
    return 0.5 * np.sum(X * (G @ X), axis=0) - np.sum(C * X, axis=0)


def _enumerate(G: np.ndarray, c: np.ndarray, upper: float) -> np.ndarray:
    """Exact: the optimum is the solution of its own active set, which is feasible; every other
    active set's solution, clipped to the box, is feasible and no better."""
    r = c.size
    best, best_f = np.zeros(r), 0.0
    states = (0, 1) if np.isinf(upper) else (0, 1, 2)
    for pattern in itertools.product(states, repeat=r):
        state = np.array(pattern)
        free, at_upper = state == 1, state == 2
        x = np.where(at_upper, upper, 0.0)
        if free.any():
            rhs = c[free] - G[np.ix_(free, at_upper)] @ x[at_upper]
            x[free] = np.linalg.solve(G[np.ix_(free, free)], rhs)
        x = np.clip(x, 0.0, upper)
        f = 0.5 * x @ G @ x - c @ x
        if f < best_f:
            best, best_f = x, f
    return best


def _bvls_and_lbfgsb(G: np.ndarray, c: np.ndarray, upper: float) -> np.ndarray:
    """The better of bounded-variable least squares on the Cholesky factor and L-BFGS-B (from
    that point and from 0) with tight tolerances."""
    L = np.linalg.cholesky(G)
    b = np.linalg.solve(L, c)
    hi = None if np.isinf(upper) else upper
    candidates = [np.clip(lsq_linear(L.T, b, bounds=(0.0, upper), method="bvls").x, 0.0, upper)]
    for x0 in (candidates[0], np.zeros(c.size)):
        res = minimize(
            lambda h: 0.5 * h @ G @ h - c @ h,
            x0,
            jac=lambda h: G @ h - c,
            bounds=[(0.0, hi)] * c.size,
            method="L-BFGS-B",
            options={"ftol": 1e-16, "gtol": 1e-14, "maxiter": 20000},
        )
        candidates.append(np.clip(res.x, 0.0, upper))
    return min(candidates, key=lambda x: 0.5 * x @ G @ x - c @ x)


def _reference(G: np.ndarray, C: np.ndarray, upper: float | None) -> np.ndarray:
    u = np.inf if upper is None else upper
    solve = _enumerate if G.shape[0] <= 6 else _bvls_and_lbfgsb
    return np.column_stack([solve(G, C[:, j], u) for j in range(C.shape[1])])


def _assert_exact(
    G: np.ndarray,
    C: np.ndarray,
    X: np.ndarray,
    upper: float | None,
    constant: np.ndarray | None = None,
) -> None:
    """Feasible, objective within ``RTOL_OBJECTIVE`` of the reference, KKT conditions hold.

    With ``constant`` (``1/2 ||v||^2`` of each column) the objective is the loss itself, and its
    relative gap is also bounded (stricter where the bases fit the documents almost exactly)."""
    hi = np.inf if upper is None else upper
    assert X.dtype == np.float64
    assert X.min() >= 0.0 and X.max() <= hi
    ref = _reference(G, C, upper)
    ours, theirs = _objective(G, C, X), _objective(G, C, ref)
    scale = np.abs(theirs)
    if constant is not None:
        scale = np.minimum(scale, theirs + constant)
    rounding = 1e-13 * (np.abs(theirs) + (0.0 if constant is None else constant)) + 1e-300
    gap = (ours - theirs) / np.maximum(scale, rounding)
    assert np.all(ours - theirs <= RTOL_OBJECTIVE * scale + rounding), gap.max()
    grad = G @ X - C
    tol = 1e-9 * (np.abs(G) @ np.abs(X) + np.abs(C)).max(axis=0)
    lower, at_upper = X <= 0.0, hi <= X
    free = ~lower & ~at_upper
    assert np.all(grad[lower] >= -np.broadcast_to(tol, X.shape)[lower])
    assert np.all(grad[at_upper] <= np.broadcast_to(tol, X.shape)[at_upper])
    assert np.all(np.abs(grad[free]) <= np.broadcast_to(tol, X.shape)[free])


def _bases(seed: int, m: int, r: int, cond: float, kind: str) -> np.ndarray:
    """``m x r`` bases: ``cond(W^T W) = cond`` by its singular values, or with the last column
    a duplicate (exact or to 1e-7) of the first."""
    rng = np.random.default_rng(seed)
    if kind == "spectrum":
        U = np.linalg.qr(rng.standard_normal((m, r)))[0]
        V = np.linalg.qr(rng.standard_normal((r, r)))[0]
        return (U * np.logspace(0.0, -0.5 * np.log10(cond), r)) @ V.T
    W = rng.random((m, r)) ** 3
    W /= W.sum(axis=0)
    if kind == "duplicate":
        W[:, -1] = W[:, 0]
    elif kind == "near-duplicate":
        W[:, -1] = W[:, 0] * (1.0 + 1e-7 * rng.random(m))
    return W


def _bounds(G: np.ndarray, C: np.ndarray) -> dict[str, float]:
    """An upper bound above every unbounded optimum (inactive) and one at half the median of
    their positive entries (active for many)."""
    X = nnls_bpp(G, C)
    return {"inactive": 2.0 * float(X.max()) + 1.0, "active": 0.5 * float(np.median(X[X > 0]))}


CASES = [
    # (seed, m, r, cond, kind)
    (0, 30, 5, 1.0, "well-conditioned"),
    (1, 40, 12, 1.0, "well-conditioned"),
    (2, 30, 6, 1e6, "spectrum"),
    (3, 30, 5, 1e7, "spectrum"),
    (4, 30, 6, 1e8, "spectrum"),
    (5, 30, 6, 1e9, "spectrum"),
    (6, 40, 10, 1e9, "spectrum"),
    (7, 20, 6, 1.0, "duplicate"),
    (8, 20, 5, 1.0, "near-duplicate"),
    (9, 40, 12, 1.0, "near-duplicate"),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bound", ["inactive", "active"])
@pytest.mark.parametrize("method", ["bpp", "pgd"])
@pytest.mark.parametrize(("seed", "m", "r", "cond", "kind"), CASES)
def test_box_constrained_coefficients_are_exact(
    seed: int, m: int, r: int, cond: float, kind: str, method: str, bound: str, dtype: type
) -> None:
    """``solve_nnls`` with an upper bound, both methods, against the exact reference, including
    ``cond(G)`` from 1e6 to 1e9 and duplicate bases (singular up to the ridge)."""
    W = _bases(seed, m, r, cond, kind)
    rng = np.random.default_rng(100 + seed)
    V = rng.standard_normal((m, 8)) if kind == "spectrum" else rng.random((m, 8))
    W, V = W.astype(dtype), V.astype(dtype)
    WtV = W.T @ V
    G = _gram(W)
    upper = _bounds(G, WtV.astype(np.float64))[bound]
    H = solve_nnls(W, WtV, upper=upper, method=method)
    constant = 0.5 * np.sum(V.astype(np.float64) ** 2, axis=0)
    _assert_exact(G, WtV.astype(np.float64), H, upper, constant)
    if bound == "active":
        assert np.any(upper == H)


@pytest.mark.parametrize("seed", range(3))
def test_exchanges_that_do_not_settle_are_finished_exactly(seed: int) -> None:
    """No exchanges at all: every column goes to the bounded-variable least squares fallback."""
    W = _bases(seed, 30, 6, 1e9, "spectrum")
    C = W.T @ np.random.default_rng(seed).standard_normal((30, 10))
    G = _gram(W)
    upper = _bounds(G, C)["active"]
    _assert_exact(G, C, nnls_bpp(G, C, max_iter=0, upper=upper), upper)


@pytest.mark.parametrize("upper", [None, 0.05])
def test_projected_gradient_far_from_converged_is_finished_exactly(upper: float | None) -> None:
    """Five FISTA steps on ``cond(G) = 1e8``: the warm-started exchanges finish the job."""
    W = _bases(11, 30, 6, 1e8, "spectrum")
    C = W.T @ np.random.default_rng(11).standard_normal((30, 10))
    G = _gram(W)
    _assert_exact(G, C, nnls_pgd(G, C, upper=upper, max_iter=5), upper)


def test_well_conditioned_projected_gradient_needs_no_exchanges(monkeypatch) -> None:
    """Where FISTA converges its certificate alone accepts every column (the fast path)."""
    rng = np.random.default_rng(12)
    W = rng.random((50, 6)) ** 3 + np.eye(50, 6)
    C = W.T @ rng.random((50, 40))
    G = _gram(W)

    def no_exchanges(*args: object) -> None:
        raise AssertionError("block principal pivoting ran")

    monkeypatch.setattr(nnls_module, "_in_blocks", no_exchanges)
    X = nnls_pgd(G, C, upper=0.5)
    monkeypatch.undo()
    _assert_exact(G, C, X, 0.5)


def test_box_constrained_ornmf_transform_with_duplicate_topics_is_exact() -> None:
    """The reviewer's case: 6 topics from 3 documents (``init="data"`` draws a document twice),
    ``h_max=100`` never active; ``transform`` was 0.81% above the optimal loss."""
    X = np.random.default_rng(0).random((3, 40)) ** 4
    model = ORNMF(n_components=6, batch_size=None, h_max=100.0, random_state=0).fit(X)
    W = model.components_.T
    G = _gram(W)
    assert np.linalg.cond(G) > 1e5
    H = model.transform(X).T
    C = W.T @ X.T
    loss = lambda H: 0.5 * np.sum((X.T - W @ H) ** 2, axis=0)  # noqa: E731
    exact = _reference(G, C, 100.0)
    assert np.all(loss(H) <= loss(exact) * (1.0 + 1e-9) + 1e-15), loss(H) / loss(exact) - 1.0
    _assert_exact(G, C, H, 100.0, 0.5 * np.sum(X**2, axis=1))
    unbounded = model.set_params(h_max=None).transform(X).T  # the bound is inactive
    np.testing.assert_allclose(loss(H), loss(unbounded), rtol=1e-9, atol=1e-15)
