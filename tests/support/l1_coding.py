"""The L1 coding problem as a linear program solved by HiGHS: the reference optimum for the coding
solvers."""

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
