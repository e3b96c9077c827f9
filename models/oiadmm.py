"""OIADMM: online inexact ADMM for the l1 dictionary (Kasiviswanathan et al., NIPS 2012, Alg. 2).

At step ``t`` the codes ``X_t`` (``k x n_t``) of the window ``P_t`` (``m x n_t``) are fixed and the
dictionary takes one linearised ADMM step on ``min_{A in A} ||P_t - A X_t||_1`` written as
``P_t = A X_t + E``:

    Z       = P_t - A_t X_t + Delta_t / beta
    E_{t+1} = soft(Z, 1 / beta)                                              (E-update)
    A_{t+1} = Pi_A(A_t + tau_t (Z - E_{t+1}) X_t^T)                          (linearised A-update)
    Delta_{t+1} = Delta_t + beta (P_t - A_{t+1} X_t - E_{t+1})               (dual update)

with ``tau_t = 1 / (2 Psi_max(X_t))`` (``Psi_max`` the largest eigenvalue of ``X_t X_t^T``),
``beta = 5`` and ``Pi_A`` the exact projection onto non-negative atoms of l1 norm at most one
(:func:`~sparsewatch.models.projections.project_l1_ball_nonneg`).
``Z - E`` is ``clip(Z, +-1/beta)``.

The dual ``Delta`` has one column per document of a window; windows differ in size, so it is
zero-padded (or truncated) to the new width, and its rows follow the vocabulary (new rows zero,
evicted rows dropped, :meth:`OIADMM.remap_rows`), as the paper's footnote prescribes for growth.
Running the same step repeatedly on one fixed batch is the batch dictionary update (Algorithm 6),
:func:`l1_dictionary_update`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sparsewatch.models.projections import project_l1_ball_nonneg
from sparsewatch.models.text_features import remap_rows

__all__ = ["OIADMM", "l1_dictionary_update", "psi_max"]


def psi_max(X: sp.spmatrix | np.ndarray) -> float:
    """Largest eigenvalue of ``X X^T`` (``X`` is ``k x n``)."""
    G = X @ X.T
    G = G.toarray() if sp.issparse(G) else np.asarray(G)
    return float(np.linalg.eigvalsh(G.astype(np.float64))[-1]) if G.size else 0.0


def _oiadmm_step(
    P: sp.spmatrix,
    X: sp.spmatrix,
    A: np.ndarray,
    Delta: np.ndarray,
    beta: float,
    tau: float,
) -> tuple[np.ndarray, np.ndarray, float]:
    """One step of Algorithm 2; returns ``(A_{t+1}, Delta_{t+1}, ||P - A_{t+1} X - E||_F)``."""
    dt = A.dtype
    Xc = sp.csr_matrix(X, dtype=dt)
    Pd = P.toarray() if sp.issparse(P) else np.asarray(P)
    Z = Pd.astype(dt, copy=True)
    Z -= np.asarray((Xc.T @ A.T).T)
    Z += Delta / dt.type(beta)
    R = np.clip(Z, -1.0 / beta, 1.0 / beta).astype(dt, copy=False)  # Z - E
    A_new = project_l1_ball_nonneg(A + dt.type(tau) * np.asarray((Xc @ R.T).T), axis=0)
    A_new = A_new.astype(dt, copy=False)
    # P - A_new X - E = (Z - Delta/beta + A X) - A_new X - (Z - R) = R - Delta/beta - (A_new - A) X
    resid = R - Delta / dt.type(beta) - np.asarray((Xc.T @ (A_new - A).T).T)
    Delta_new = Delta + dt.type(beta) * resid
    return A_new, Delta_new, float(np.linalg.norm(resid))


class OIADMM(BaseEstimator):
    """Online l1 dictionary update (Algorithm 2) with a dual carried across windows.

    Parameters
    ----------
    beta : augmented-Lagrangian penalty (paper default 5).
    tau : step size; ``None`` uses ``1 / (2 Psi_max(X_t))`` at every step.
    dtype : float type of ``A`` and ``Delta``.

    Attributes
    ----------
    components_ : (m, k) dictionary ``A``; dual_ : (m, n_last) dual ``Delta``;
    n_steps_ : steps taken; violation_ : ``||P_t - A_{t+1} X_t - E_{t+1}||_F`` of each step.
    """

    def __init__(self, beta: float = 5.0, tau: float | None = None, dtype: type = np.float32):
        self.beta = beta
        self.tau = tau
        self.dtype = dtype

    def initialize(self, A: np.ndarray) -> OIADMM:
        """Start from dictionary ``A`` (projected onto the constraint set) and a zero dual."""
        self.components_ = project_l1_ball_nonneg(np.asarray(A, dtype=self.dtype)).astype(
            self.dtype
        )
        self.dual_ = np.zeros((self.components_.shape[0], 0), dtype=self.dtype)
        self.n_steps_ = 0
        self.violation_: list[float] = []
        return self

    def remap_rows(self, kept_rows: np.ndarray, n_new: int) -> OIADMM:
        """Vocabulary update: keep ``kept_rows``, append ``n_new`` zero rows (``A``, ``Delta``)."""
        self.components_ = remap_rows(self.components_, kept_rows, n_new)
        self.dual_ = remap_rows(self.dual_, kept_rows, n_new)
        return self

    def add_atoms(self, atoms: np.ndarray) -> OIADMM:
        """Append columns (projected) to the dictionary; the dual does not depend on ``k``."""
        new = project_l1_ball_nonneg(np.asarray(atoms, dtype=self.dtype)).astype(self.dtype)
        self.components_ = np.hstack([self.components_, new])
        return self

    def partial_fit(self, P: sp.spmatrix | np.ndarray, X: sp.spmatrix | np.ndarray) -> OIADMM:
        """One OIADMM step on the window ``P`` (``m x n``) with its codes ``X`` (``k x n``)."""
        m, n = P.shape
        if self.components_.shape[0] < m:  # vocabulary grew without an explicit remap
            self.remap_rows(np.arange(self.components_.shape[0]), m - self.components_.shape[0])
        D = self.dual_
        if D.shape[1] != n:  # windows differ in size: zero-pad or truncate the dual's columns
            D = np.hstack([D[:, :n], np.zeros((m, max(n - D.shape[1], 0)), dtype=self.dtype)])
        psi = psi_max(X)
        if psi <= 0:  # no document used any atom: nothing moves A; keep the dual
            self.dual_ = D
            self.n_steps_ += 1
            return self
        tau = self.tau if self.tau is not None else 1.0 / (2.0 * psi)
        self.components_, self.dual_, viol = _oiadmm_step(P, X, self.components_, D, self.beta, tau)
        self.violation_.append(viol)
        self.n_steps_ += 1
        return self

    def get_state(self) -> dict[str, np.ndarray]:
        return {
            "components": self.components_,
            "dual": self.dual_,
            "n_steps": np.asarray(self.n_steps_, dtype=np.int64),
        }

    def set_state(self, state: dict[str, np.ndarray]) -> OIADMM:
        self.components_ = np.array(state["components"], dtype=self.dtype)
        self.dual_ = np.array(state["dual"], dtype=self.dtype)
        self.n_steps_ = int(state["n_steps"])
        self.violation_ = []
        return self


def l1_dictionary_update(
    P: sp.spmatrix | np.ndarray,
    X: sp.spmatrix | np.ndarray,
    A: np.ndarray,
    *,
    beta: float = 5.0,
    n_iter: int = 50,
) -> np.ndarray:
    """Batch l1 dictionary update (Algorithm 6): ``min_{A in A} ||P - A X||_1`` by ``n_iter``
    linearised ADMM steps on the fixed batch (``tau = 1 / (2 Psi_max(X))``), from ``A``."""
    psi = psi_max(X)
    A = np.asarray(A)
    if psi <= 0:
        return A
    tau = 1.0 / (2.0 * psi)
    D = np.zeros(P.shape, dtype=A.dtype)
    for _ in range(n_iter):
        A, D, _ = _oiadmm_step(P, X, A, D, beta, tau)
    return A
