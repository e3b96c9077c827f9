"""Non-negative least squares for the coefficients of a chunk, and the projections it needs.

The coefficient step of OR-NMF (Guan et al., TNNLS 2012, Algorithm 1, and problem (27) for a
chunk) solves, for every column ``v`` of a chunk ``V`` (``m x n``) and fixed bases ``W``
(``m x r``)::

    min_{0 <= h <= u}  1/2 ||v - W h||^2 + alpha ||h||_1 + beta/2 ||h||^2

Only ``G = W^T W + beta I`` (``r x r``) and ``C = W^T V - alpha`` (``r x n``) enter, so the whole
chunk is solved at once:

* :func:`nnls_bpp`: block principal pivoting (Kim and Park, SIAM J. Sci. Comput. 2011, Alg. 2,
  full exchange with the backup rule), exact, the passive-set systems of all columns solved in
  a few batched calls (one per passive-set size). With an upper bound ``u`` (the box constraint
  of Section III of the OR-NMF paper) every variable is at 0, free or at ``u``, and the
  exchanges move infeasible variables between the free set and the bound they violate. Columns
  whose exchanges do not settle (rounding on a nearly singular ``G``) are finished by an exact
  active-set method: Lawson and Hanson's without an upper bound, Stark and Parker's
  bounded-variable least squares with one.
* :func:`nnls_pgd`: accelerated projected gradient (FISTA with restart), optional upper bound,
  exact too: FISTA's rate depends on the condition number of ``G`` (near-duplicate bases, e.g.
  ``init="data"`` drawing a sample twice when ``r`` exceeds the documents, give ``cond(G)`` of
  ``1e6`` and more, where its 500 steps stopped 0.8% above the optimal loss), so the columns
  whose optimality it cannot certify are finished by block principal pivoting, warm-started
  from the active set FISTA reached.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular
from scipy.optimize import lsq_linear, nnls

__all__ = ["nnls_bpp", "nnls_pgd", "solve_nnls"]


# Columns solved together by :func:`nnls_bpp`: its passive-set systems gather a ``k x k`` block of
# ``G`` per column (7 kB a column at ``r = 30``), so a window of documents is solved in blocks of
# this many (each column's solution does not depend on the others).
COLUMN_BLOCK = 2048

# Relative objective gap under which :func:`nnls_pgd` accepts a column from its certificate
# alone; the others are finished exactly.
CERTIFIED_GAP = 1e-12


def nnls_bpp(
    G: np.ndarray, C: np.ndarray, max_iter: int | None = None, upper: float | None = None
) -> np.ndarray:
    """Solve ``min_{0 <= X <= upper} 1/2 tr(X^T G X) - tr(C^T X)`` column by column, exactly.

    Block principal pivoting (Kim and Park 2011, Algorithm 2; with ``upper``, its box form) for
    many right-hand sides, in blocks of :data:`COLUMN_BLOCK` columns. ``G`` must be symmetric
    positive definite (``r x r``), ``C`` is ``r x n``; returns ``r x n`` (float64).
    """
    G, C, upper = _as_problem(G, C, upper)
    return _in_blocks(G, C, max_iter, upper, None)


def _in_blocks(
    G: np.ndarray, C: np.ndarray, max_iter: int | None, upper: float | None, X0: np.ndarray | None
) -> np.ndarray:
    """:func:`_nnls_bpp_block` on blocks of :data:`COLUMN_BLOCK` columns."""
    if C.shape[1] <= COLUMN_BLOCK:
        return _nnls_bpp_block(G, C, max_iter, upper, X0)
    return np.hstack(
        [
            _nnls_bpp_block(
                G,
                C[:, lo : lo + COLUMN_BLOCK],
                max_iter,
                upper,
                None if X0 is None else X0[:, lo : lo + COLUMN_BLOCK],
            )
            for lo in range(0, C.shape[1], COLUMN_BLOCK)
        ]
    )


def _as_problem(
    G: np.ndarray, C: np.ndarray, upper: float | None
) -> tuple[np.ndarray, np.ndarray, float | None]:
    """float64 ``G`` and ``C`` (float32 passive-set solves lost the exactness), and a positive
    upper bound (``None`` or infinite: no bound)."""
    if upper is not None:
        upper = float(upper)
        if not upper > 0.0:
            raise ValueError(f"upper must be None or > 0, got {upper!r}")
        if np.isinf(upper):
            upper = None
    return np.asarray(G, dtype=np.float64), np.asarray(C, dtype=np.float64), upper


def _nnls_bpp_block(
    G: np.ndarray,
    C: np.ndarray,
    max_iter: int | None,
    upper: float | None,
    X0: np.ndarray | None = None,
) -> np.ndarray:
    """Block principal pivoting on one block of columns, from ``X = 0`` or from the active set
    of ``X0`` (variables at 0, strictly inside, at ``upper``).

    Without ``upper`` this is Kim and Park's Algorithm 2. With it, a variable at ``upper`` has
    ``x = u`` and must have dual ``y = (G x - c) <= 0``; the exchanges move a free variable
    below 0 or above ``u`` to that bound, and a bound variable whose dual has the wrong sign
    to the free set (the backup rule moves only the last infeasible variable of a column). The
    free variables solve ``G_FF x_F = c_F - u G_FU 1``.
    """
    r, n = C.shape
    max_iter = 5 * r + 20 if max_iter is None else max_iter
    hi = np.inf if upper is None else upper
    if X0 is None:
        X = np.zeros((r, n))
        Y = -C
        passive = np.zeros((r, n), dtype=bool)
        at_upper = np.zeros((r, n), dtype=bool)
    else:
        passive = (X0 > 0.0) & (hi > X0)
        at_upper = hi <= X0
        X, Y = _solve_sets(G, C, passive, at_upper, hi)
    backup = np.full(n, 3)
    best = np.full(n, r + 1)
    infeasible = _infeasible(X, Y, passive, at_upper, hi)
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
        flip = infeasible & full
        if use_backup.any():
            cols = np.flatnonzero(use_backup)
            last = r - 1 - np.argmax(infeasible[::-1, cols], axis=0)
            flip[last, cols] = True
        if upper is not None:  # a free variable above u goes to u, one at u leaves it
            at_upper = (at_upper & ~flip) | (flip & (hi < X))
        passive ^= flip
        cols = np.flatnonzero(todo)
        X[:, cols], Y[:, cols] = _solve_sets(G, C[:, cols], passive[:, cols], at_upper[:, cols], hi)
        infeasible = _infeasible(X, Y, passive, at_upper, hi)
        n_inf = infeasible.sum(axis=0)
    unsettled = np.flatnonzero(n_inf > 0)
    if unsettled.size:  # clipping such an iterate gave objectives worse than X = 0
        X[:, unsettled] = (
            _nnls_active_set(G, C[:, unsettled])
            if upper is None
            else _bvls(G, C[:, unsettled], upper)
        )
    return np.clip(X, 0.0, hi)


def _solve_sets(
    G: np.ndarray, C: np.ndarray, passive: np.ndarray, at_upper: np.ndarray, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """Iterate and dual of the given sets: :func:`_solve_passive` on ``c - u G 1_U``, with
    ``x = u`` on the variables at the upper bound (``y = G x - c`` then is the true dual)."""
    if not at_upper.any():
        return _solve_passive(G, C, passive)
    X, Y = _solve_passive(G, C - hi * (G @ at_upper.astype(np.float64)), passive)
    X[at_upper] = hi
    return X, Y


def _infeasible(
    X: np.ndarray, Y: np.ndarray, passive: np.ndarray, at_upper: np.ndarray, hi: float
) -> np.ndarray:
    """Variables breaking the KKT conditions: free ones outside ``[0, u]``, ones at 0 with a
    negative dual, ones at ``u`` with a positive dual."""
    if hi == np.inf:
        return ((X < 0) & passive) | ((Y < 0) & ~passive)
    return (
        (((X < 0) | (hi < X)) & passive) | ((Y < 0) & ~passive & ~at_upper) | ((Y > 0) & at_upper)
    )


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


def _bvls(G: np.ndarray, C: np.ndarray, upper: float) -> np.ndarray:
    """:func:`_nnls_active_set` with the upper bound: ``min_{0 <= x <= u} 1/2 ||L^T x - b||^2``
    by Stark and Parker's bounded-variable least squares (:func:`scipy.optimize.lsq_linear`,
    ``method="bvls"``), an active-set method that lowers the objective at every exchange.

    Its stopping test on the first-order optimality is absolute (scale-dependent), so it is
    disabled (``tol`` far below any gradient): the method stops when an exchange no longer
    lowers the objective, which is at the optimum. A variable it moved onto a bound is left a
    rounding error away from it (``3e-15`` for 0 with a gradient of ``5e-3``); it is put on the
    bound its active mask reports.
    """
    L = np.linalg.cholesky(G)
    B = solve_triangular(L, C, lower=True)
    A = L.T
    r = G.shape[0]
    X = np.empty(C.shape)
    for j, b in enumerate(B.T):
        res = lsq_linear(
            A, b, bounds=(0.0, upper), method="bvls", tol=1e-300, max_iter=50 * r + 100
        )
        X[:, j] = np.where(res.active_mask < 0, 0.0, np.where(res.active_mask > 0, upper, res.x))
    return X


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
    """Solve ``min_{0 <= X <= upper} 1/2 tr(X^T G X) - tr(C^T X)`` by projected gradient, exactly.

    FISTA with step ``1 / L`` (``L = ||G||_2``) and adaptive restart, all columns at once, from
    ``X0`` (or 0); it stops when the KKT residual, the largest projected-gradient step
    ``R = x - P(x - (G x - c) / L)``, is at most ``tol`` times the largest entry of ``x``, or after
    ``max_iter`` steps. Its rate depends on ``cond(G)``: at ``1e6`` and above (near-duplicate
    bases) 500 steps stopped 0.8% above the optimal loss, so the result is certified column by
    column: with ``mu`` the smallest eigenvalue of ``G``, the projected point ``x+ = x - R`` is
    within ``L^2 ||R||^2 / (2 mu)`` of the optimal objective (strong convexity); a column whose
    bound exceeds :data:`CERTIFIED_GAP` of its objective is finished exactly by :func:`nnls_bpp`'s
    exchanges, warm-started from the active set FISTA reached. ``G`` must be symmetric positive
    definite; returns ``r x n`` (float64).
    """
    G, C, upper = _as_problem(G, C, upper)
    eigenvalues = np.linalg.eigvalsh(G)
    L = float(eigenvalues[-1])
    if L <= 0.0:
        return np.zeros(C.shape)
    hi = np.inf if upper is None else upper
    X = np.zeros(C.shape) if X0 is None else np.clip(X0, 0.0, hi)
    Z = X.copy()
    t = 1.0
    for _ in range(max_iter):
        X_new = np.clip(Z - (G @ Z - C) / L, 0.0, hi)
        step = X_new - X
        grad = G @ X_new - C
        X = X_new
        residual = X - np.clip(X - grad / L, 0.0, hi)
        if np.max(np.abs(residual), initial=0.0) <= tol * max(np.max(X, initial=0.0), 1e-300):
            break
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        restart = np.sum(grad * step, axis=0) > 0
        Z = X + ((t - 1.0) / t_new) * step
        Z[:, restart] = X[:, restart]
        t = 1.0 if restart.all() else t_new
    X_plus = np.clip(X - (G @ X - C) / L, 0.0, hi)
    mu = float(eigenvalues[0]) - G.shape[0] * np.finfo(np.float64).eps * L
    objective = 0.5 * np.sum(X_plus * (G @ X_plus), axis=0) - np.sum(C * X_plus, axis=0)
    squared = L * L * np.sum((X - X_plus) ** 2, axis=0)
    certified = squared <= 2.0 * max(mu, 0.0) * CERTIFIED_GAP * np.abs(objective)
    if not certified.all():
        cols = np.flatnonzero(~certified)
        X_plus[:, cols] = _in_blocks(G, C[:, cols], None, upper, X_plus[:, cols])
    return X_plus


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
    Both methods are exact: block principal pivoting (:func:`nnls_bpp`, with or without the
    upper bound) or, for ``method="pgd"``, projected gradient finished by it
    (:func:`nnls_pgd`); any other ``method`` raises ``ValueError`` (it ran projected gradient).
    ``W`` is read in float64.
    """
    if method not in ("bpp", "pgd"):
        raise ValueError(f"method must be 'bpp' or 'pgd', got {method!r}")
    W = np.asarray(W, dtype=np.float64)
    G = W.T @ W
    G = G + (alpha_l2 + 1e-12 * max(float(np.trace(G)), 1.0)) * np.eye(G.shape[0])
    C = WtV - alpha_l1
    if method == "bpp":
        return nnls_bpp(G, C, upper=upper)
    return nnls_pgd(G, C, upper=upper)
