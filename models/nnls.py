"""Non-negative least squares for the coefficients of a chunk, and the projections it needs.

The coefficient step of OR-NMF (Guan et al., TNNLS 2012, Algorithm 1, and problem (27) for a
chunk) solves, for every column ``v`` of a chunk ``V`` (``m x n``) and fixed bases ``W``
(``m x r``)::

    min_{0 <= h <= u}  1/2 ||v - W h||^2 + alpha ||h||_1 + beta/2 ||h||^2

Only ``G = W^T W + beta I`` (``r x r``) and ``C = W^T V - alpha`` (``r x n``) enter, so the whole
chunk is solved at once:

* :func:`nnls_bpp`: block principal pivoting (Kim and Park, SIAM J. Sci. Comput. 2011, Alg. 2,
  full exchange with the backup rule), exact, the passive-set systems of all columns solved in
  a few batched calls (one per passive-set size); no upper bound. Columns whose exchanges do
  not settle (rounding on a nearly singular ``G``) are finished by Lawson and Hanson's
  active-set method.
* :func:`nnls_pgd`: accelerated projected gradient (FISTA with restart) with optional upper
  bounds (the box constraint of Section III of the OR-NMF paper).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular
from scipy.optimize import nnls

__all__ = ["nnls_bpp", "nnls_pgd", "solve_nnls"]


# Columns solved together by :func:`nnls_bpp`: its passive-set systems gather a ``k x k`` block of
# ``G`` per column (7 kB a column at ``r = 30``), so a window of documents is solved in blocks of
# this many (each column's solution does not depend on the others).
COLUMN_BLOCK = 2048


def nnls_bpp(G: np.ndarray, C: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """Solve ``min_{X >= 0} 1/2 tr(X^T G X) - tr(C^T X)`` column by column, exactly.

    Block principal pivoting (Kim and Park 2011, Algorithm 2) for many right-hand sides, in
    blocks of :data:`COLUMN_BLOCK` columns. ``G`` must be symmetric positive definite
    (``r x r``), ``C`` is ``r x n``; returns ``r x n``.
    """
    if C.shape[1] <= COLUMN_BLOCK:
        return _nnls_bpp_block(G, C, max_iter)
    return np.hstack(
        [
            _nnls_bpp_block(G, C[:, lo : lo + COLUMN_BLOCK], max_iter)
            for lo in range(0, C.shape[1], COLUMN_BLOCK)
        ]
    )


def _nnls_bpp_block(G: np.ndarray, C: np.ndarray, max_iter: int | None) -> np.ndarray:
    r, n = C.shape
    max_iter = 5 * r + 20 if max_iter is None else max_iter
    X = np.zeros((r, n))
    Y = -C.astype(np.float64, copy=True)
    passive = np.zeros((r, n), dtype=bool)
    backup = np.full(n, 3)
    best = np.full(n, r + 1)
    infeasible = (Y < 0) & ~passive
    n_inf = infeasible.sum(axis=0)
    for _ in range(max_iter):
        todo = n_inf > 0
        if not todo.any():
            break
        improved = todo & (n_inf < best)
        best[improved] = n_inf[improved]
        backup[improved] = 3
        stalled = todo & ~improved
        use_backup = stalled & (backup <= 0)
        backup[stalled & ~use_backup] -= 1
        full = todo & ~use_backup
        passive[:, full] ^= infeasible[:, full]
        if use_backup.any():
            cols = np.flatnonzero(use_backup)
            last = r - 1 - np.argmax(infeasible[::-1, cols], axis=0)
            passive[last, cols] ^= True
        cols = np.flatnonzero(todo)
        X[:, cols], Y[:, cols] = _solve_passive(G, C[:, cols], passive[:, cols])
        infeasible = ((X < 0) & passive) | ((Y < 0) & ~passive)
        n_inf = infeasible.sum(axis=0)
    unsettled = np.flatnonzero(n_inf > 0)
    if unsettled.size:  # clipping such an iterate gave objectives worse than X = 0
        X[:, unsettled] = _nnls_active_set(G, C[:, unsettled])
    return np.maximum(X, 0.0)


def _nnls_active_set(G: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Exact solution of the columns block principal pivoting left unsettled.

    Kim and Park's finite termination assumes exact arithmetic; on a nearly singular ``G``
    (more topics than terms with two equal topics: ``W^T W`` singular up to the ridge
    :func:`solve_nnls` adds) rounding makes the exchanges cycle for ever. With the Cholesky
    factor ``G = L L^T`` the problem is ``min_{x >= 0} 1/2 ||L^T x - L^{-1} c||^2`` (the same
    objective up to a constant), solved by Lawson and Hanson's active-set method
    (:func:`scipy.optimize.nnls`), which adds one variable at a time and terminates.
    """
    L = np.linalg.cholesky(G)
    B = solve_triangular(L, C, lower=True)
    r = G.shape[0]
    return np.column_stack([nnls(L.T, b, maxiter=50 * r + 100)[0] for b in B.T])


def _solve_passive(
    G: np.ndarray, C: np.ndarray, passive: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Unconstrained solve of every column on its own passive set: ``x_P = G_PP^{-1} c_P``.

    Columns are grouped by the size ``k`` of their passive set (at most ``r`` groups): a full
    passive set shares ``G`` (one solve with many right-hand sides); the others gather their
    ``k x k`` blocks ``G_PP`` and are solved in one batched LAPACK call per size. ``x`` is 0 off
    the passive set, and the dual ``y = G x - c`` is 0 on it.
    """
    r, n = C.shape
    X = np.zeros((r, n))
    counts = passive.sum(axis=0)
    full = counts == r
    if full.any():
        X[:, full] = np.linalg.solve(G, C[:, full])
    for k in np.unique(counts[(counts > 0) & ~full]):
        cols = np.flatnonzero(counts == k)
        rows = np.nonzero(passive[:, cols].T)[1].reshape(cols.size, k)
        blocks = G[rows[:, :, None], rows[:, None, :]]
        X[rows, cols[:, None]] = np.linalg.solve(blocks, C[rows, cols[:, None]][:, :, None])[..., 0]
    Y = G @ X - C
    Y[passive] = 0.0
    return X, Y


def nnls_pgd(
    G: np.ndarray,
    C: np.ndarray,
    upper: float | None = None,
    X0: np.ndarray | None = None,
    max_iter: int = 500,
    tol: float = 1e-10,
) -> np.ndarray:
    """Solve ``min_{0 <= X <= upper} 1/2 tr(X^T G X) - tr(C^T X)`` by projected gradient.

    FISTA with step ``1 / ||G||_2`` and adaptive restart, all columns at once; stops when the
    largest change of an iterate is below ``tol`` times the largest entry.
    """
    L = float(np.linalg.eigvalsh(G)[-1])
    if L <= 0.0:
        return np.zeros(C.shape)
    hi = np.inf if upper is None else upper
    X = np.zeros(C.shape) if X0 is None else np.clip(X0, 0.0, hi)
    Z = X.copy()
    t = 1.0
    for _ in range(max_iter):
        X_new = np.clip(Z - (G @ Z - C) / L, 0.0, hi)
        step = X_new - X
        if np.max(np.abs(step), initial=0.0) <= tol * max(np.max(X_new, initial=0.0), 1e-300):
            return X_new
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        momentum = (t - 1.0) / t_new
        restart = np.sum((G @ X_new - C) * step, axis=0) > 0
        Z = X_new + momentum * step
        Z[:, restart] = X_new[:, restart]
        X, t = X_new, (1.0 if restart.all() else t_new)
    return X


def solve_nnls(
    W: np.ndarray,
    WtV: np.ndarray,
    alpha_l1: float = 0.0,
    alpha_l2: float = 0.0,
    upper: float | None = None,
    method: str = "bpp",
) -> np.ndarray:
    """Coefficients of a chunk, problem (27) with the Section III l1/l2/box variants.

    ``W`` is ``m x r``, ``WtV = W^T V`` is ``r x n``; returns ``H`` (``r x n``) minimising
    ``1/2||V - W H||^2 + alpha_l1 |H|_1 + alpha_l2/2 ||H||^2`` over ``0 <= H <= upper``.
    Block principal pivoting unless an upper bound is given or ``method="pgd"``; any other
    ``method`` raises ``ValueError`` (it ran projected gradient).
    """
    if method not in ("bpp", "pgd"):
        raise ValueError(f"method must be 'bpp' or 'pgd', got {method!r}")
    G = W.T @ W
    G = G + (alpha_l2 + 1e-12 * max(float(np.trace(G)), 1.0)) * np.eye(G.shape[0])
    C = WtV - alpha_l1
    if upper is None and method == "bpp":
        return nnls_bpp(G, C)
    return nnls_pgd(G, C, upper=upper)
