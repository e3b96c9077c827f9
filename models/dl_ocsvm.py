"""DL-OCSVM: dictionary learning fused with a one-class SVM (Irofti et al. 2024, Section 4.1).

Composite objective (Proposition 3), with signals as the columns of ``Y`` (features x samples),
dictionary ``D`` with unit atoms, representations ``X`` (atoms x samples) and the OC-SVM
``(w, rho)`` in the paper's scaling (see :mod:`sparsewatch.models._ocsvm_base`)::

    F(D, X, w, rho) = 1/2 ||Y - D X||_F^2 + beta ||X||_{2,1}
                      + alpha (1/2 ||w||^2 - rho + 1/(nu N) sum_j max(0, rho - w^T x_j)).

Algorithm 1 (training): OMP codes with sparsity ``s`` on an initial dictionary (no centring;
a small ridge on OMP's least squares bounds the codes, :func:`._ocsvm_base.omp_codes`; the
initial atoms are distinct, :func:`init_dictionary`), an OC-SVM on the codes, then ``n_iter``
outer iterations of Algorithm 2, the modified K-SVD sweep: for atom ``i`` with residual ``R``
restricted to the signals that use it and ``c = alpha w_i lambda`` (``lambda`` the OC-SVM
multipliers of those signals), Theorem 1 gives

    d* = argmax_{||d|| = 1} ||R^T d + c||^2,   v = R^T d* + c,
    x* = (1 - beta / ||v||) v  if ||v|| >= beta, else 0 (the atom's row is trimmed),

with ``d*`` exact (trust-region sub-problem through the SVD of ``R``) or by the power method;
the OC-SVM is refitted after each sweep. Theorem 1 minimises ``F`` with the hinge replaced by its
Lagrangian at the current ``lambda`` (a minorant tight at the current codes); an atom update that
would nevertheless raise ``F`` is not taken (counted in ``n_rejected_updates_``), so that ``F``
never increases across sweeps and refits, which is Proposition 3's monotonicity (with the default
``omp_refresh=False``: OMP re-coding between sweeps is greedy, not a descent step, and can raise
``F`` by a little).

Algorithm 3 (inference): OMP with the learned dictionary, then each code row scaled by the factor
``1 - beta/||v||`` that the training rule gave that atom (zero for the trimmed atoms: a signal that
needs atoms the inliers do not use loses those coefficients), so one row's score never depends on
the other rows of its batch; then the OC-SVM decision ``rho - w^T x`` (higher = more anomalous).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.utils.validation import check_is_fitted
from sparsewatch.models._ocsvm_base import (
    OMP_RIDGE,
    FloatArray,
    LinearOCSVM,
    OCSVMDetectorBase,
    atom_objective,
    effective_sparsity,
    fit_linear_ocsvm,
    group_shrink,
    maximize_on_sphere,
    ocsvm_primal,
    omp_codes,
    refit_linear_ocsvm,
)

# Largest coherence |d_i^T d_j| between two initial atoms, and the Gaussian draws tried for each
# atom the data do not provide (:func:`init_dictionary`).
INIT_MAX_COHERENCE = 0.99
INIT_FILL_DRAWS = 100


@dataclass
class DLOCSVMResult:
    """What Algorithm 1 learns: dictionary, codes, per-atom row scales, OC-SVM, diagnostics."""

    dictionary: FloatArray
    codes: FloatArray
    row_scale: FloatArray
    ocsvm: LinearOCSVM
    objective: list[float] = field(default_factory=list)
    n_rejected: int = 0


def init_dictionary(Y: FloatArray, n_atoms: int, init: str, rng: np.random.Generator) -> FloatArray:
    """Initial unit-norm dictionary (features x atoms) for Algorithm 1's first OMP step.

    ``"data"`` takes training signals (columns of ``Y``) in a random order, the paper's data
    initialisation; ``"random"`` takes Gaussian directions. Either way a candidate is kept only
    if its coherence ``|d_i^T d_j|`` with every atom kept before is at most
    ``INIT_MAX_COHERENCE`` (0.99), so a repeated signal (coherence 1), its negative and nearly
    parallel signals give one atom, and zero signals none. The atoms still missing (fewer distinct
    directions in the data than atoms) are Gaussian directions, each the first of
    ``INIT_FILL_DRAWS`` draws within that bound, or the least coherent draw where the signal
    dimension cannot hold that many atoms that far apart (2 or 3 dimensions).

    The data initialisation used to pick random signals and add 0.1 % noise to separate repeated
    picks: on data with many identical rows all atoms were one row plus noise (coherence
    0.9998), and OMP's codes of any signal outside that row's direction were noise-fitted
    coefficients in the hundreds (see :func:`~sparsewatch.models._ocsvm_base.omp_codes`, whose
    ridge bounds the codes over any atoms).
    """
    m, n = Y.shape
    if init == "data":
        candidates = Y[:, rng.permutation(n)].T
    elif init == "random":
        candidates = rng.standard_normal((n_atoms, m))
    else:
        raise ValueError(f"init must be 'data' or 'random', got {init!r}")
    norms = np.linalg.norm(candidates, axis=1)
    candidates = candidates[norms > 0.0] / norms[norms > 0.0, None]
    atoms: list[FloatArray] = []
    # greedy in the candidates' order: the largest coherence of each with the atoms kept so far
    coherence = np.zeros(candidates.shape[0])
    while len(atoms) < n_atoms:
        free = np.flatnonzero(coherence <= INIT_MAX_COHERENCE)
        if free.size == 0:
            break
        atoms.append(candidates[free[0]])
        coherence = np.maximum(coherence, np.abs(candidates @ atoms[-1]))
    while len(atoms) < n_atoms:
        draws = rng.standard_normal((INIT_FILL_DRAWS, m))
        draws /= np.linalg.norm(draws, axis=1, keepdims=True)
        worst = np.abs(draws @ np.array(atoms).T).max(axis=1) if atoms else np.zeros(len(draws))
        within = np.flatnonzero(worst <= INIT_MAX_COHERENCE)
        atoms.append(draws[within[0] if within.size else int(np.argmin(worst))])
    return np.array(atoms).T


def composite_objective(
    Y: FloatArray,
    D: FloatArray,
    X: FloatArray,
    svm: LinearOCSVM,
    beta: float,
    alpha: float,
    nu: float,
) -> float:
    """Proposition 3's composite objective ``F(D, X, w, rho)`` (module docstring)."""
    E = Y - D @ X
    fit = 0.5 * float(np.einsum("ij,ij->", E, E))
    l21 = float(np.linalg.norm(X, axis=1).sum())
    return fit + beta * l21 + alpha * ocsvm_primal(X.T, svm, nu)


def train_dl_ocsvm(
    Y: FloatArray,
    *,
    n_atoms: int,
    s: int,
    beta: float,
    alpha: float,
    nu: float,
    n_iter: int,
    atom_solver: str,
    power_iter: int,
    omp_refresh: bool,
    replace_dead_atoms: bool,
    init: str,
    ocsvm_tol: float | None,
    rng: np.random.Generator,
) -> DLOCSVMResult:
    """Algorithms 1-2 on signals ``Y`` (features x samples); see the module docstring."""
    D = init_dictionary(Y, n_atoms, init, rng)
    X = omp_codes(D, Y, s)
    svm, lam = fit_linear_ocsvm(X.T, nu, ocsvm_tol)
    row_scale = np.ones(n_atoms)
    result = DLOCSVMResult(D, X, row_scale, svm)
    result.objective.append(composite_objective(Y, D, X, svm, beta, alpha, nu))
    for it in range(n_iter):
        if omp_refresh and it > 0:
            active = np.linalg.norm(X, axis=1) > 0.0
            X = np.zeros_like(X)
            X[active] = omp_codes(D[:, active], Y, s)
            row_scale = np.where(active, 1.0, 0.0)
            svm, lam = fit_linear_ocsvm(X.T, nu, ocsvm_tol)
        result.n_rejected += _ksvd_ocsvm_sweep(
            Y,
            D,
            X,
            row_scale,
            svm,
            lam,
            nu,
            beta,
            alpha,
            atom_solver,
            power_iter,
            replace_dead_atoms,
        )
        svm, lam = refit_linear_ocsvm(X.T, nu, ocsvm_tol, (svm, lam))
        result.objective.append(composite_objective(Y, D, X, svm, beta, alpha, nu))
    result.dictionary, result.codes, result.row_scale, result.ocsvm = D, X, row_scale, svm
    return result


def _ksvd_ocsvm_sweep(
    Y: FloatArray,
    D: FloatArray,
    X: FloatArray,
    row_scale: FloatArray,
    svm: LinearOCSVM,
    lam: FloatArray,
    nu: float,
    beta: float,
    alpha: float,
    atom_solver: str,
    power_iter: int,
    replace_dead_atoms: bool,
) -> int:
    """One Algorithm 2 sweep over the atoms, in place; returns the number of rejected updates."""
    E = Y - D @ X
    scale = nu * Y.shape[1]
    w, rho = svm.w / scale, svm.rho / scale
    margins = X.T @ w
    rejected = 0
    for i in range(D.shape[1]):
        support = np.flatnonzero(X[i])
        if support.size == 0:
            if replace_dead_atoms:
                _replace_dead_atom(i, E, D, X, row_scale, margins, w)
            continue
        x_old = X[i, support]
        R = E[:, support] + np.outer(D[:, i], x_old)
        c = alpha * w[i] * lam[support]
        d = maximize_on_sphere(R, c, atom_solver, d0=D[:, i], max_iter=power_iter)
        v = R.T @ d + c
        x_new = group_shrink(v, beta)
        base = margins[support] - w[i] * x_old
        r_sq = float(np.einsum("ij,ij->", R, R))
        hw = alpha / scale
        new = atom_objective(
            r_sq, x_new, R.T @ d, beta * float(np.linalg.norm(x_new)), base, w[i], rho, hw
        )
        old = atom_objective(
            r_sq, x_old, R.T @ D[:, i], beta * float(np.linalg.norm(x_old)), base, w[i], rho, hw
        )
        if new > old:
            rejected += 1
            continue
        D[:, i] = d
        X[i, support] = x_new
        E[:, support] = R - np.outer(d, x_new)
        margins[support] = base + w[i] * x_new
        nv = float(np.linalg.norm(v))
        row_scale[i] = 1.0 - beta / nv if nv > beta else 0.0
    return rejected


def _replace_dead_atom(
    i: int,
    E: FloatArray,
    D: FloatArray,
    X: FloatArray,
    row_scale: FloatArray,
    margins: FloatArray,
    w: FloatArray,
) -> None:
    """Restart atom ``i`` on the worst-represented signal (K-SVD's heuristic; may raise F)."""
    j = int(np.argmax(np.einsum("ij,ij->j", E, E)))
    norm = float(np.linalg.norm(E[:, j]))
    if norm == 0.0:
        return
    D[:, i] = E[:, j] / norm
    X[i, j] = norm
    E[:, j] = 0.0
    margins[j] += w[i] * norm
    row_scale[i] = 1.0


class DLOCSVM(OCSVMDetectorBase):
    """DL-OCSVM anomaly detector (Irofti et al. 2024, Algorithms 1-3, Theorem 1).

    Parameters
    ----------
    n_components : number of atoms ``n`` of the dictionary.
    n_nonzero_coefs : OMP sparsity ``s`` (training initialisation and inference), an upper
        bound on the atoms per signal: OMP uses ``min(s, n_components, signal dimension)``
        (``n_nonzero_coefs_``), since beyond either the bound constrains nothing. Training needs
        at least ``max(s + 1, 3)`` rows, ``s`` capped at ``n_components`` (``ValueError``
        otherwise).
    beta : weight of the l2,1 penalty (row trimming threshold of Theorem 1), in the data's units.
        A ``beta`` that trims the codes of every training row leaves all scores equal (nothing
        is flagged): the fit warns (``UserWarning``).
    alpha : weight of the OC-SVM term in the composite objective (1 = the issue's update formula).
    n_iter : outer iterations (K-SVD sweep + OC-SVM refit).
    nu : OC-SVM ``nu`` (default 0.5, scikit-learn's); ``None`` takes ``contamination`` (the
        seed paper's choice; 0.1 when that is ``None`` too). ``threshold_`` comes from
        ``contamination``, so ``nu`` only shapes ``w``: with ``nu`` = a 1-5 % contamination, ``w``
        rests on a handful of rows and the ranking is unstable (see ``benchmarks/anomaly.md``).
    contamination : expected outlier fraction; sets ``threshold_`` from the training scores.
        ``None`` uses the OC-SVM's own sign (score > 0 is an outlier); the share flagged is
        then ``nu`` on the training codes only: the rows' inference codes (OMP on the learned
        dictionary) differ from them, and with ``beta`` > 0 a training set's flagged share was
        2-4 times ``nu`` (0.18 at ``nu`` = 0.05, ``beta`` = 0.5).
    atom_solver : ``"exact"`` (SVD trust-region sub-problem) or ``"power"``.
    power_iter : iterations of the power method.
    omp_refresh : re-run OMP on the current dictionary between outer iterations (greedy codes:
        ``F`` may then rise between sweeps).
    replace_dead_atoms : restart unused atoms on the worst-represented signal during the sweep.
    init : initial dictionary, ``"data"`` (random training signals) or ``"random"`` (Gaussian);
        no two initial atoms more coherent than 0.99, Gaussian atoms where the data have too few
        distinct directions (:func:`init_dictionary`).
    ocsvm_tol : libsvm tolerance; ``None`` scales it to the codes (1e-5 of the mean ||x||^2,
        refined on the support vectors' when they are much shorter,
        :func:`~sparsewatch.models._ocsvm_base.fit_linear_ocsvm`).
    random_state : seed of the dictionary initialisation (runs are reproducible).
    normalize : signal normalisation before coding, fitted on the training rows: ``"lift"``
        (default; z-score, extra coordinate, unit norm: the linear OC-SVM then keeps the rows near
        the training centre), ``"l2"`` (unit-norm rows) or ``None`` (raw rows, as in the paper;
        their largest entry must lie within 1e-50..1e50, ``ValueError`` otherwise); see
        :func:`sparsewatch.models._ocsvm_base.fit_normalizer`.

    Attributes
    ----------
    dictionary_ : (n_features, n_components) unit atoms.
    n_nonzero_coefs_ : the sparsity OMP uses (``n_nonzero_coefs`` capped as above).
    row_scale_ : (n_components,) inference row factors (0 for trimmed atoms).
    omp_ridge_ : the ridge of OMP's least squares (``OMP_RIDGE``,
        :func:`~sparsewatch.models._ocsvm_base.omp_codes`); 0 in a model restored from a state
        saved before it, whose scores and ``threshold_`` came from plain OMP.
    ocsvm_support_vectors_, ocsvm_dual_coef_, ocsvm_intercept_ : the OC-SVM on the codes.
    objective_ : composite objective after the initialisation and after each outer iteration.
    n_rejected_updates_ : atom updates not taken because they would have raised the objective.
    decision_scores_, labels_, threshold_ : PyOD-style training scores, labels and threshold.
    n_features_in_ : number of features seen at fit.
    feature_names_in_ : (n_features_in_,) column names of a DataFrame fitted on (all strings;
        absent otherwise). Scoring a DataFrame with other names, or the same in another order,
        raises ``ValueError``, as scikit-learn's estimators do.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.dl_ocsvm import DLOCSVM
    >>> X = np.random.default_rng(0).standard_normal((60, 4))
    >>> model = DLOCSVM(n_components=8, n_iter=2, random_state=0).fit(X)
    >>> int(model.labels_.sum())  # contamination=0.1: the 6 highest training scores
    6
    >>> model.predict(np.full((1, 4), 8.0))  # far from the training rows: 1 = outlier
    array([1])
    >>> model.decision_function(X[:3]).shape  # higher = more anomalous
    (3,)
    >>> model.n_nonzero_coefs_  # n_nonzero_coefs=3 atoms per row
    3
    """

    _state_keys: tuple[str, ...] = ("dictionary_", "row_scale_")
    # states saved before the OMP ridge were fitted, and their threshold_ set, with plain OMP
    _versioned_state_defaults = (("omp_ridge_", 0.0),)

    def __init__(
        self,
        n_components: int = 32,
        n_nonzero_coefs: int = 3,
        beta: float = 0.0,
        alpha: float = 1.0,
        n_iter: int = 6,
        nu: float | None = 0.5,
        contamination: float | None = 0.1,
        atom_solver: str = "exact",
        power_iter: int = 50,
        omp_refresh: bool = False,
        replace_dead_atoms: bool = False,
        init: str = "data",
        ocsvm_tol: float | None = None,
        random_state: int | None = None,
        normalize: str | None = "lift",
    ) -> None:
        self.n_components = n_components
        self.n_nonzero_coefs = n_nonzero_coefs
        self.beta = beta
        self.alpha = alpha
        self.n_iter = n_iter
        self.nu = nu
        self.contamination = contamination
        self.atom_solver = atom_solver
        self.power_iter = power_iter
        self.omp_refresh = omp_refresh
        self.replace_dead_atoms = replace_dead_atoms
        self.init = init
        self.ocsvm_tol = ocsvm_tol
        self.random_state = random_state
        self.normalize = normalize

    def _fit(self, X: FloatArray) -> None:
        Y = self._fit_features(X).T
        result = train_dl_ocsvm(
            Y,
            n_atoms=int(self.n_components),
            s=int(self.n_nonzero_coefs),
            beta=float(self.beta),
            alpha=float(self.alpha),
            nu=self._nu(),
            n_iter=int(self.n_iter),
            atom_solver=self.atom_solver,
            power_iter=int(self.power_iter),
            omp_refresh=bool(self.omp_refresh),
            replace_dead_atoms=bool(self.replace_dead_atoms),
            init=self.init,
            ocsvm_tol=self.ocsvm_tol,
            rng=np.random.default_rng(self.random_state),
        )
        if float(self.beta) > 0.0 and not result.codes.any():
            warnings.warn(
                f"beta={float(self.beta)} trimmed every atom (each code row's norm stayed under "
                "beta): the codes of all training rows are zero, every score is equal and nothing "
                "is flagged; lower beta (it is in the units of the signals)",
                UserWarning,
                stacklevel=3,
            )
        self.dictionary_ = result.dictionary
        self.row_scale_ = result.row_scale
        self.omp_ridge_ = OMP_RIDGE
        self.objective_ = np.asarray(result.objective)
        self.n_rejected_updates_ = result.n_rejected
        self._store_ocsvm(result.ocsvm)

    @property
    def n_nonzero_coefs_(self) -> int:
        """The sparsity OMP uses: ``min(n_nonzero_coefs, n_components, signal dimension)``."""
        check_is_fitted(self, "dictionary_")
        return effective_sparsity(int(self.n_nonzero_coefs), self.dictionary_.shape)

    def _codes(self, X: FloatArray) -> FloatArray:
        """Algorithm 3: OMP on the learned dictionary, then rows scaled by ``row_scale_``."""
        codes = omp_codes(
            self.dictionary_,
            self._features(X).T,
            int(self.n_nonzero_coefs),
            float(self.omp_ridge_),
        )
        return codes.T * self.row_scale_
