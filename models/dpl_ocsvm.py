"""DPL-OCSVM: dictionary pair learning fused with a one-class SVM (Irofti et al. 2024, Sec. 4.2).

A synthesis dictionary ``D`` (unit atoms) and an analysis dictionary ``P`` (atoms x features) give
the representations ``X = P Y`` directly, so there is no sparse coding step and no sparsity
constraint. Composite objective, OC-SVM in the paper's scaling (:mod:`._ocsvm_base`)::

    F(D, P, w, rho) = 1/2 ||Y - D P Y||_F^2 + tau/2 ||P||_F^2
                      + alpha (1/2 ||w||^2 - rho + 1/(nu N) sum_j max(0, rho - w^T P y_j)).

Atom-pair update (Theorem 5, the DPL analogue of Theorem 1): with the residual
``R = Y - sum_{k != i} d_k p_k^T Y`` and ``c = alpha w_i lambda``, replacing the hinge by its
Lagrangian at the current ``lambda``,

    p(d) = S^{-1} Y (R^T d + c),   S = Y Y^T + tau I,
    d*   = argmax_{||d|| = 1} ||T (R^T d + c)||^2,   T = S^{-1/2} Y,

the same sphere problem as Theorem 1 with ``B = R T^T`` (features x features) and ``g = T c``,
solved exactly through the SVD of ``B`` or by the power method. ``E T^T`` is kept up to date by
rank-one corrections so a sweep costs ``O(n m N)``. An update that would raise ``F`` is not taken
(as in DL-OCSVM), so ``F`` never increases; the OC-SVM is refitted after each sweep.

Inference: ``x = P y`` and the OC-SVM decision ``rho - w^T x`` (higher = more anomalous), each
row's score a function of that row alone, bit for bit, whatever batch it is scored in.

Scale of ``tau``. The fit term sums over the ``N`` training signals while ``tau/2 ||P||_F^2`` does
not, so a fixed ``tau`` regularises less and less as ``N`` grows (and a value chosen by k-fold on a
fold's training part means something else once the model is refitted on all training rows).
The default ``tau="auto"`` is therefore ``TAU_PER_SAMPLE * N`` (``0.02 N``): the same objective
divided by ``N`` is a mean fit plus ``0.01 ||P||_F^2``. It matters because the codes ``P y`` are
the OC-SVM's input: with a weak ridge ``P`` approaches the pseudo-inverse of the (coherent,
data-initialised) atoms, its rows are far from orthonormal, and the linear OC-SVM on those codes
works in a badly distorted metric (validation numbers in ``benchmarks/anomaly.md``). A number
keeps the paper's absolute ``tau``.
"""

from __future__ import annotations

import numpy as np
from sparsewatch.models._ocsvm_base import (
    FloatArray,
    LinearOCSVM,
    OCSVMDetectorBase,
    _is_real,
    atom_objective,
    fit_linear_ocsvm,
    maximize_on_sphere,
    ocsvm_primal,
    refit_linear_ocsvm,
    row_matmul,
)
from sparsewatch.models.dl_ocsvm import init_dictionary

TAU_PER_SAMPLE = 0.02


def dpl_objective(
    Y: FloatArray,
    D: FloatArray,
    P: FloatArray,
    svm: LinearOCSVM,
    tau: float,
    alpha: float,
    nu: float,
) -> float:
    """The DPL-OCSVM composite objective ``F(D, P, w, rho)`` (module docstring)."""
    X = P @ Y
    E = Y - D @ X
    return (
        0.5 * float(np.einsum("ij,ij->", E, E))
        + 0.5 * tau * float(np.einsum("ij,ij->", P, P))
        + alpha * ocsvm_primal(X.T, svm, nu)
    )


def train_dpl_ocsvm(
    Y: FloatArray,
    *,
    n_atoms: int,
    tau: float,
    alpha: float,
    nu: float,
    n_iter: int,
    atom_solver: str,
    power_iter: int,
    init: str,
    ocsvm_tol: float | None,
    rng: np.random.Generator,
) -> tuple[FloatArray, FloatArray, LinearOCSVM, list[float], int]:
    """Alternate atom-pair sweeps and OC-SVM refits; return ``D, P, svm, objective, rejected``."""
    D = init_dictionary(Y, n_atoms, init, rng)
    P = np.linalg.solve(D.T @ D + tau * np.eye(n_atoms), D.T)  # ridge analysis operator
    vals, vecs = np.linalg.eigh(Y @ Y.T)
    vals = np.maximum(vals, 0.0)
    S_inv_half = (vecs / np.sqrt(vals + tau)) @ vecs.T
    T = S_inv_half @ Y
    svm, lam = fit_linear_ocsvm((P @ Y).T, nu, ocsvm_tol)
    objective = [dpl_objective(Y, D, P, svm, tau, alpha, nu)]
    rejected = 0
    for _ in range(n_iter):
        rejected += _dpl_sweep(
            Y, T, S_inv_half, D, P, svm, lam, nu, tau, alpha, atom_solver, power_iter
        )
        svm, lam = refit_linear_ocsvm((P @ Y).T, nu, ocsvm_tol, (svm, lam))
        objective.append(dpl_objective(Y, D, P, svm, tau, alpha, nu))
    return D, P, svm, objective, rejected


def _dpl_sweep(
    Y: FloatArray,
    T: FloatArray,
    S_inv_half: FloatArray,
    D: FloatArray,
    P: FloatArray,
    svm: LinearOCSVM,
    lam: FloatArray,
    nu: float,
    tau: float,
    alpha: float,
    atom_solver: str,
    power_iter: int,
) -> int:
    """One sweep of Theorem 5's atom-pair updates, in place; returns the rejected count."""
    X = P @ Y
    E = Y - D @ X
    G = E @ T.T
    scale = nu * Y.shape[1]
    w, rho = svm.w / scale, svm.rho / scale
    margins = X.T @ w
    rejected = 0
    for i in range(D.shape[1]):
        d_old, x_old, p_old = D[:, i].copy(), X[i].copy(), P[i].copy()
        Tx_old = T @ x_old
        B = G + np.outer(d_old, Tx_old)
        c = alpha * w[i] * lam
        g = T @ c
        d = maximize_on_sphere(B, g, atom_solver, d0=d_old, max_iter=power_iter)
        u = B.T @ d + g
        p_new = S_inv_half @ u
        x_new = T.T @ u
        base = margins - w[i] * x_old
        Rt_d_new = E.T @ d + x_old * float(d_old @ d)
        Rt_d_old = E.T @ d_old + x_old
        r_sq = (
            float(np.einsum("ij,ij->", E, E)) + 2.0 * float(x_old @ Rt_d_old) - float(x_old @ x_old)
        )

        hw = alpha / scale
        new = atom_objective(
            r_sq, x_new, Rt_d_new, 0.5 * tau * float(p_new @ p_new), base, w[i], rho, hw
        )
        old = atom_objective(
            r_sq, x_old, Rt_d_old, 0.5 * tau * float(p_old @ p_old), base, w[i], rho, hw
        )
        if new > old:
            rejected += 1
            continue
        D[:, i], P[i], X[i] = d, p_new, x_new
        E += np.outer(d_old, x_old) - np.outer(d, x_new)
        G += np.outer(d_old, Tx_old) - np.outer(d, T @ x_new)
        margins = base + w[i] * x_new
    return rejected


class DPLOCSVM(OCSVMDetectorBase):
    """DPL-OCSVM anomaly detector (Irofti et al. 2024, Section 4.2, Theorem 5).

    Parameters
    ----------
    n_components : number of atom pairs.
    tau : ridge weight on the analysis dictionary ``P``: a number (the paper's absolute weight) or
        ``"auto"`` (default), ``TAU_PER_SAMPLE * n_samples`` = ``0.02 N`` (module docstring); the
        value used is ``tau_``.
    alpha, n_iter, nu, contamination, atom_solver, power_iter, init, ocsvm_tol, random_state,
    normalize : as in :class:`~sparsewatch.models.dl_ocsvm.DLOCSVM`.

    Attributes
    ----------
    dictionary_ : (n_features, n_components) synthesis atoms.
    analysis_ : (n_components, n_features) analysis dictionary ``P``.
    tau_ : the ridge weight used in training.
    objective_, n_rejected_updates_, decision_scores_, labels_, threshold_, n_features_in_,
    feature_names_in_ : as in DL-OCSVM.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.dpl_ocsvm import DPLOCSVM
    >>> X = np.random.default_rng(0).standard_normal((60, 4))
    >>> model = DPLOCSVM(n_components=8, n_iter=2, random_state=0).fit(X)
    >>> int(model.labels_.sum())  # contamination=0.1: the 6 highest training scores
    6
    >>> model.predict(np.full((1, 4), 8.0))  # far from the training rows: 1 = outlier
    array([1])
    >>> model.decision_function(X[:3]).shape  # higher = more anomalous
    (3,)
    """

    _state_keys: tuple[str, ...] = ("dictionary_", "analysis_")
    _diagnostic_state_keys = (*OCSVMDetectorBase._diagnostic_state_keys, "tau_")

    def __init__(
        self,
        n_components: int = 32,
        tau: float | str = "auto",
        alpha: float = 1.0,
        n_iter: int = 6,
        nu: float | None = 0.5,
        contamination: float | None = 0.1,
        atom_solver: str = "exact",
        power_iter: int = 50,
        init: str = "data",
        ocsvm_tol: float | None = None,
        random_state: int | None = None,
        normalize: str | None = "lift",
    ) -> None:
        self.n_components = n_components
        self.tau = tau
        self.alpha = alpha
        self.n_iter = n_iter
        self.nu = nu
        self.contamination = contamination
        self.atom_solver = atom_solver
        self.power_iter = power_iter
        self.init = init
        self.ocsvm_tol = ocsvm_tol
        self.random_state = random_state
        self.normalize = normalize

    def _sparsity(self) -> None:
        """``None``: DPL has no sparsity, its codes ``P y`` are dense (the paper's Section 4.2),
        so the too-few-samples message names none (it claimed "sparsity 1")."""
        return None

    def _tau(self, n_samples: int) -> float:
        """The ridge weight for ``n_samples`` training signals (``"auto"``: ``0.02 N``)."""
        if isinstance(self.tau, str):
            if self.tau != "auto":
                raise ValueError(f"tau must be a positive number or 'auto', got {self.tau!r}")
            return TAU_PER_SAMPLE * n_samples
        # (NaN fails too: libsvm's tol became NaN; None raised TypeError, True was taken as 1)
        if not (_is_real(self.tau) and 0.0 < self.tau < np.inf):
            raise ValueError(f"tau must be > 0 and finite, got {self.tau}")
        return float(self.tau)

    def _fit(self, X: FloatArray) -> None:
        self.tau_ = self._tau(X.shape[0])
        Y = self._fit_features(X).T
        D, P, svm, objective, rejected = train_dpl_ocsvm(
            Y,
            n_atoms=int(self.n_components),
            tau=self.tau_,
            alpha=float(self.alpha),
            nu=self._nu(),
            n_iter=int(self.n_iter),
            atom_solver=self.atom_solver,
            power_iter=int(self.power_iter),
            init=self.init,
            ocsvm_tol=self.ocsvm_tol,
            rng=np.random.default_rng(self.random_state),
        )
        self.dictionary_, self.analysis_ = D, P
        self.objective_ = np.asarray(objective)
        self.n_rejected_updates_ = rejected
        self._store_ocsvm(svm)

    def _codes(self, X: FloatArray) -> FloatArray:
        """Representations ``X = P Y`` of the rows (samples x atoms), each row's a function of
        that row alone, bit for bit (:func:`~._ocsvm_base.row_matmul`): through BLAS's matrix
        product a row got another code, and so another score, alone or at another place in
        another batch, and one identical to the training rows that set the threshold was
        flagged or not by its batch. (:func:`~._ocsvm_base.row_products`, exact on any BLAS,
        scored 2,000 rows of 50 features 4-7 times as slowly as the matrix product; this about
        as fast.)"""
        return row_matmul(self._features(X), self.analysis_.T)
