"""A small L1 coding problem of sparse codes and noise, and the problem as a linear program
solved by HiGHS: the reference optimum for the coding solvers."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog


def lp_optimum(p: np.ndarray, A: np.ndarray, lam: float) -> float:
    """``min_{x>=0, t>=0} 1't + lam 1'x  s.t.  -t <= p - A x <= t`` by HiGHS."""
    m, k = A.shape
    As = sp.csr_matrix(A)
    eye = sp.identity(m, format="csr")
    A_ub = sp.vstack([sp.hstack([As, -eye]), sp.hstack([-As, -eye])]).tocsr()
    r = linprog(
        np.r_[np.full(k, lam), np.ones(m)],
        A_ub=A_ub,
        b_ub=np.r_[p, -p],
        bounds=(0, None),
        method="highs",
    )
    assert r.status == 0
    return float(r.fun)


def noisy_sparse_problem(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(P, A)``: 20 documents (columns of unit l1 mass) over 30 terms, each a sparse code over
    the 12 sparse atoms (columns of unit l1 mass) of ``A`` plus sparse noise."""
    rng = np.random.default_rng(seed)
    A = rng.random((30, 12)) * (rng.random((30, 12)) < 0.2)
    A /= np.maximum(A.sum(axis=0), 1e-12)
    codes = rng.random((12, 20)) * (rng.random((12, 20)) < 0.15)
    noise = 0.3 * rng.random((30, 20)) * (rng.random((30, 20)) < 0.05)
    P = A @ codes + noise
    P /= np.maximum(P.sum(axis=0), 1e-12)
    return P, A
