"""Shared pieces of the DL-/DPL-/KDL-/KDPL-OCSVM anomaly detectors.

Irofti, Hîji, Pătraşcu, Cleju (2024), "Fusing Dictionary Learning and Support Vector Machines for
Unsupervised Anomaly Detection". This module holds what the four models share:

* input validation (NaN/inf, too few samples for the sparsity ``s``; constant features are
  accepted; scipy.sparse input is densified; a DataFrame's column names are recorded at fit as
  ``feature_names_in_`` and checked when scoring, as scikit-learn does);
* the OMP coding step of Algorithms 1 and 3, with a small ridge on its least-squares fits so that
  a code's norm is bounded by a multiple of the signal's (:func:`omp_codes`);
* the sphere sub-problem of Theorem 1, ``max_{||d|| = 1} ||B^T d + g||^2``, solved exactly as a
  trust-region sub-problem through the SVD of ``B`` (the paper's remark after Theorem 1) or by the
  power-method approximation;
* the row shrinkage of Theorem 1 (proximal map of ``beta ||.||_2``: uniform support, l2,1 penalty);
* the linear one-class SVM on the representations, fitted by scikit-learn and stored as support
  vectors, dual coefficients and intercept so that it can be checkpointed and scored without pickle;
* the optional signal normalisation (``normalize``: ``None``, ``"l2"`` or ``"lift"``, see
  :func:`fit_normalizer`), fitted on the training rows only and stored in the checkpoint;
* the PyOD-style base class (``decision_function`` higher = more anomalous, ``predict`` 1 = outlier,
  ``decision_scores_``, ``labels_``, ``threshold_``) and ``get_state``/``set_state``.

Scaling convention. scikit-learn's (libsvm's) one-class SVM solves
``min 1/2 ||w||^2 - nu N rho + sum_j xi_j`` s.t. ``w^T x_j >= rho - xi_j, xi >= 0``, with dual
variables in ``[0, 1]`` summing to ``nu N``. The paper (after Schölkopf et al.) writes the OC-SVM as
``min 1/2 ||w||^2 + 1/(nu N) sum_j xi_j - rho``, whose multipliers ``lambda_j`` lie in
``[0, 1/(nu N)]`` and sum to one, with ``w = sum_j lambda_j x_j``. The two differ by the factor
``nu N``: ``lambda = dual_coef_ / (nu N)``, ``w = coef_ / (nu N)``, ``rho = -intercept_ / (nu N)``,
and the paper's primal value is libsvm's divided by ``(nu N)^2``. This module returns the paper's
quantities, so that the weight ``alpha`` of the OC-SVM term does not depend on the sample size.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from sklearn.base import BaseEstimator, OutlierMixin
from sklearn.linear_model import orthogonal_mp_gram
from sklearn.svm import OneClassSVM
from sklearn.utils import Tags
from sklearn.utils.validation import _check_feature_names, check_is_fitted
from sparsewatch.models._validation import is_sparse

FloatArray = np.ndarray
# Bound on libsvm's iterations in the OC-SVM fits (a converging fit needs far fewer, about the
# number of rows or a few times it): max(LIBSVM_MIN_ITER, LIBSVM_ITER_PER_ROW * rows).
LIBSVM_MIN_ITER = 100_000
LIBSVM_ITER_PER_ROW = 100
# Root-mean-square row norm outside [1/LIBSVM_SAFE_NORM, LIBSVM_SAFE_NORM]: rescaled for libsvm
# (its single-precision kernel cache, :func:`fit_linear_ocsvm`).
LIBSVM_SAFE_NORM = 1e6
# The data-scaled libsvm tolerance is refitted on the support vectors' mean squared norm when that
# is under LIBSVM_TOL_SV_SHORTER times the rows' one, in at most LIBSVM_TOL_REFITS further fits
# (:func:`fit_linear_ocsvm`).
LIBSVM_TOL_SV_SHORTER = 0.01
LIBSVM_TOL_REFITS = 2


def check_training_data(X: object, n_nonzero_coefs: int | None, model: str) -> FloatArray:
    """Validate a training matrix (samples x features) and return it as float64.

    Raises ``ValueError`` with a readable message for non-2-D or empty input, NaN or infinite
    entries, training rows that are all identical, and fewer samples than the model can be
    built on: 3, and ``s + 1`` for a model coding with the OMP sparsity ``s``
    (``n_nonzero_coefs``; ``None`` for the models without one, DPL-OCSVM's codes are the dense
    ``P y``). ``model`` names the
    estimator in that message, which mentions a sparsity only when the model has one (DPL's
    named "sparsity 1", a parameter it does not have). The messages follow scikit-learn's
    wording (``"1 sample(s)"``, ``"0 feature(s) (shape=...)"``, ``"Reshape your data"``), so
    that tools matching them work.

    Constant features are accepted, as scikit-learn's ``OneClassSVM`` accepts them: every
    normalisation handles them (``"lift"`` gives them the scale 1, so they are 0 after the
    z-score and a scored row's deviation from the constant counts in the feature's own units;
    ``"l2"`` and ``None`` code them as any other coordinate). Only data in which every feature
    is constant are refused: all training codes are one point, every training row lies on the
    OC-SVM's boundary and which of them are flagged is decided by rounding (``"lift"`` cannot
    even place them: its lift coordinate is the training rows' spread, 0).
    """
    X = _as_matrix(X)
    n_samples = X.shape[0]
    if n_nonzero_coefs is not None and n_nonzero_coefs < 1:
        raise ValueError(f"n_nonzero_coefs must be >= 1, got {n_nonzero_coefs}")
    needed = 3 if n_nonzero_coefs is None else max(n_nonzero_coefs + 1, 3)
    if n_samples < needed:
        sparsity = "" if n_nonzero_coefs is None else f" with sparsity {n_nonzero_coefs}"
        raise ValueError(
            f"too few samples: found {n_samples} sample(s) (shape={X.shape}), {model}"
            f"{sparsity} needs at least {needed}"
        )
    if not np.ptp(X, axis=0).any():
        raise ValueError(
            f"every feature is constant over the {n_samples} training rows (they are all "
            f"identical): {model} has no spread to learn a boundary from"
        )
    return X


RAW_MAGNITUDE = 1e50


def check_raw_magnitude(X: FloatArray) -> None:
    """Refuse raw training signals (``normalize=None``) whose largest entry is outside
    ``[1/RAW_MAGNITUDE, RAW_MAGNITUDE]``: the models square and sum them (residuals, SVDs, the
    sphere sub-problem, OC-SVM kernel values), which overflowed or lost every digit further out
    and gave an opaque failure or arbitrary scores. The normalised options are scale-free."""
    peak = float(np.abs(X).max())
    if not 1.0 / RAW_MAGNITUDE <= peak <= RAW_MAGNITUDE:
        raise ValueError(
            f"X has entries of magnitude up to {peak:.3g}: with normalize=None the raw signals "
            f"must lie within {1.0 / RAW_MAGNITUDE:.0e}..{RAW_MAGNITUDE:.0e} in magnitude; "
            "rescale X or use normalize='l2' or 'lift'"
        )


def check_scoring_data(X: object, n_features: int, model: str) -> FloatArray:
    """Validate rows to score: 2-D, finite, ``n_features`` columns (``model`` names the fitted
    estimator in scikit-learn's feature-count message)."""
    X = _as_matrix(X)
    if X.shape[1] != n_features:
        raise ValueError(
            f"X has {X.shape[1]} features, but {model} is expecting {n_features} features as input"
        )
    return X


def _as_matrix(X: object) -> FloatArray:
    """``X`` as a float64 ndarray; scipy.sparse input is densified (these models work on dense,
    low-dimensional signals: ``np.asarray`` would wrap the sparse object itself). Complex input
    is refused (the cast dropped the imaginary part with only a warning)."""
    X = np.asarray(X.toarray() if is_sparse(X) else X)
    if np.iscomplexobj(X):
        raise ValueError("Complex data not supported")
    X = X.astype(np.float64, copy=False)
    if X.ndim != 2:
        raise ValueError(
            f"expected a 2-D array (samples x features), got shape {X.shape}. Reshape your data: "
            "X.reshape(-1, 1) for a single feature, X.reshape(1, -1) for a single sample"
        )
    for axis, what in enumerate(("sample(s)", "feature(s)")):
        if X.shape[axis] == 0:
            raise ValueError(
                f"Found array with 0 {what} (shape={X.shape}) while a minimum of 1 is required."
            )
    bad = ~np.isfinite(X)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise ValueError(
            f"X contains NaN or infinite values in {rows.size} row(s), first row {rows[0]}"
        )
    return X


def _is_real(value: object) -> bool:
    """Whether ``value`` is a real number (not a boolean, a string or ``None``)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


NORMALIZE_OPTIONS = (None, "l2", "lift")
ATOM_SOLVERS = ("exact", "power")


def fit_normalizer(X: FloatArray, normalize: str | None) -> tuple[FloatArray, FloatArray, float]:
    """Statistics of the signal normalisation, from training rows only: ``(mean, scale, lift)``.

    ``None``: identity (``mean = 0``, ``scale = 1``, ``lift = 0``). ``"l2"``: each row divided by
    its l2 norm, the standard normalisation of dictionary-learning anomaly detection (the codes then
    measure directions, not magnitudes). ``"lift"``: z-score with the training mean and standard
    deviation, one extra coordinate equal to ``lift`` = the median training row norm after the
    z-score, then unit l2 norm: ``z -> [z, l] / sqrt(||z||^2 + l^2)``. This maps the rows onto a
    sphere with the training centre at the pole ``e_{m+1}``; the last coordinate
    ``l / sqrt(||z||^2 + l^2)`` decreases with the distance from the centre, so a linear OC-SVM
    separating the lifted rows from the origin (Section 3 of the paper) keeps the rows near the
    bulk of the data and rejects the far ones, whatever the sign of the outliers' features; so
    does one on codes linear in the rows (DPL-OCSVM's ``P y``). Without it, on non-negative
    (e.g. min-max scaled) data the linear OC-SVM treats large signals as normal. DL-OCSVM's
    sparse OMP codes are not linear in the row: a far row's code can load on atoms the bulk
    uses (its correlation with a data atom at the median distance is about 0.7), and such rows
    are rejected less often than by the linear OC-SVM on the lifted rows (which rejects all of
    them), though far more often than the rows of the bulk: on rows 99 % of which are identical,
    all the far rows are flagged; on rows 70 % of which lie on a line, 78-96 % of those 16-1000
    standard deviations away (the worker's configuration, four seeds).
    Both options are computed without over- or underflow for any finite input (statistics and
    row norms of rows beyond ~1e154 or under ~1e-154 are taken after an exact power-of-two
    rescaling), so they stay scale-free at the ends of the float range.
    """
    if normalize not in NORMALIZE_OPTIONS:
        raise ValueError(f"normalize must be one of {NORMALIZE_OPTIONS}, got {normalize!r}")
    m = X.shape[1]
    if normalize != "lift":
        return np.zeros(m), np.ones(m), 0.0
    # The mean and the standard deviation of rows beyond ~1e154 overflowed (squares, sums) and
    # those of rows under ~1e-154 lost their digits: computed on the rows divided by a power of
    # two (exact), then scaled back. Untouched in between, so the usual results do not change.
    unit = _power_of_two_scale(float(np.abs(X).max()), SAFE_MAGNITUDE)
    mean, scale = (X / unit).mean(axis=0) * unit, (X / unit).std(axis=0) * unit
    scale[scale == 0.0] = 1.0
    lift = float(np.median(_safe_row_norms((X - mean) / scale)))
    return mean, scale, max(lift, 1e-12)


def apply_normalizer(
    X: FloatArray, normalize: str | None, mean: FloatArray, scale: FloatArray, lift: float
) -> FloatArray:
    """Normalise rows with the statistics of :func:`fit_normalizer` (row-wise, batch-free)."""
    if normalize is None:
        return X
    Z = (X - mean) / scale
    if normalize == "lift":
        Z = np.hstack([Z, np.full((Z.shape[0], 1), lift)])
    with np.errstate(over="ignore"):  # (such rows are redone below)
        norms = row_norms(Z)[:, None]
    out = Z / np.where(norms > 0.0, norms, 1.0)
    # A row whose squared norm overflows (entries beyond ~1e154, or standardised to inf) became
    # the zero row and one whose squared norm underflows (under ~1e-154) lost its digits: both
    # are normalised after dividing by their largest entry (an infinite entry: its sign, the
    # limit direction). Both options are invariant to that scaling (``"l2"``: of any row).
    bad = np.flatnonzero(_imprecise_norms(norms[:, 0]) & np.any(Z != 0.0, axis=1))
    if bad.size:
        out[bad] = _unit_rows(Z[bad])
    return out


def _imprecise_norms(norms: FloatArray) -> FloatArray:
    """Where an l2 norm computed from the squares is inf, or under 1e-150 (0 included: the
    squares lost their digits or vanished); the row may still be 0."""
    return ~np.isfinite(norms) | (norms < 1e-150)


SAFE_MAGNITUDE = 1e100


def _power_of_two_scale(peak: float, bound: float) -> float:
    """1 for ``peak`` in ``[1/bound, bound]`` or 0, else the power of two nearest ``peak``
    (dividing by it is exact and brings ``peak`` near 1)."""
    if peak == 0.0 or 1.0 / bound <= peak <= bound:
        return 1.0
    return float(np.ldexp(1.0, int(np.frexp(peak)[1])))


def _unit_rows(Z: FloatArray) -> FloatArray:
    """Rows of ``Z`` (nonzero, possibly with infinite entries) scaled to unit l2 norm without
    over- or underflow: divided by their largest entry first (an infinite entry counts as its
    sign and the finite ones as 0)."""
    inf = np.isinf(Z)
    Z = np.where(inf.any(axis=1, keepdims=True), np.where(inf, np.sign(Z), 0.0), Z)
    Z = Z / np.abs(Z).max(axis=1, keepdims=True)
    return Z / row_norms(Z)[:, None]


def row_products(Z: FloatArray, W: FloatArray) -> FloatArray:
    """``Z @ W`` with each row's result a function of that row alone, bit for bit: every sum
    over ``Z``'s columns is taken in column order, by elementwise products and additions (each
    entry one correctly rounded operation after another), whatever the number of rows, their
    place in the batch or the memory layout. ``W`` is a vector (one weight per column of ``Z``)
    or a matrix (a row per column of ``Z``).

    BLAS (``@``) blocks and vectorises its sums by the shape of the whole batch, and numpy calls
    another kernel for a single row: the same row scored alone or at another place in another
    batch differed in its last bits, and one identical to the training rows that set the
    threshold (more than the ``contamination`` share of them identical: the threshold is their
    score) was flagged or not by its batch. numpy's own row reductions (``einsum``,
    ``sum(axis=1)``, ``np.linalg.norm``) change their order with the layout: the rows of an
    F-ordered batch (OMP's codes, a DataFrame's values) are summed column by column, a single
    row pairwise. The loop runs over the columns (atoms or features, a few), not the rows.
    """
    out = np.zeros((Z.shape[0], *W.shape[1:]))
    for j in range(Z.shape[1]):
        out += np.multiply.outer(Z[:, j], W[j])
    return out


def row_matmul(Z: FloatArray, W: FloatArray) -> FloatArray:
    """``Z @ W`` (``W`` a matrix) with each row's result a function of that row alone, at BLAS
    speed: every row is multiplied by ``W`` in a BLAS matrix-vector product (gemv) of its own,
    all of one shape and layout, whatever the number of rows, their place in the batch or the
    batch's memory layout. numpy's ``matmul`` over the stack of 1 x k matrices ``Z[:, None, :]``
    calls gemv once per row (a single row alone too; a dot product when ``W`` has one column, a
    product when ``Z`` has one); the rows are made C-contiguous first (a
    strided row is not BLAS-able, and numpy summed it in its own loop, in another order), and
    ``W`` too (its layout picks gemv's variant).

    For products over many columns, where :func:`row_products`' loop over them is slow: a kernel
    row against a few hundred landmarks took about 15 times as long as BLAS's matrix product
    that way, two to three times as long this way. Unlike :func:`row_products`, the bits depend
    on the BLAS library, the CPU it picked its kernels for and its number of threads (gemv
    splits a product's outputs between them): all fixed within a process, so the same row gets
    the same value in every batch there.
    """
    Z = np.ascontiguousarray(Z)
    return np.matmul(Z[:, None, :], np.ascontiguousarray(W))[:, 0, :]


def row_norms(Z: FloatArray) -> FloatArray:
    """The l2 norms of the rows of ``Z``, each a function of its row alone
    (:func:`row_products`); ``inf`` where the squares overflow."""
    return np.sqrt(row_products(Z * Z, np.ones(Z.shape[1])))


def _safe_row_norms(Z: FloatArray) -> FloatArray:
    """l2 norms of the rows of ``Z`` without over- or underflow of the squares (``inf`` only
    where the norm itself exceeds the float range)."""
    with np.errstate(over="ignore"):  # (such rows are redone below)
        norms = np.linalg.norm(Z, axis=1)
    bad = np.flatnonzero(_imprecise_norms(norms) & np.any(Z != 0.0, axis=1))
    if bad.size:
        peak = np.abs(Z[bad]).max(axis=1)
        with np.errstate(over="ignore", invalid="ignore"):
            norms[bad] = peak * np.linalg.norm(Z[bad] / peak[:, None], axis=1)
    return norms


# Ridge of OMP's least-squares fits, relative to the unit atoms (:func:`omp_codes`).
OMP_RIDGE = 1e-3


def omp_codes(
    D: FloatArray, Y: FloatArray, n_nonzero_coefs: int, ridge: float = OMP_RIDGE
) -> FloatArray:
    """Sparse codes (atoms x signals) of the columns of ``Y`` over ``D`` by OMP, without centring.

    scikit-learn's ``orthogonal_mp_gram`` on the Gram ``D^T D + ridge I`` and correlations
    ``D^T Y`` (the paper's Algorithm 1 step 1 and Algorithm 3 step 1). ``s`` bounds the number of
    nonzeros, so it is capped by the number of atoms and by the signal dimension
    (:func:`effective_sparsity`).

    The ridge ``lambda`` (``OMP_RIDGE``; 0 is plain OMP, kept to score states saved before the
    ridge) makes this exactly OMP on the augmented dictionary
    ``[D; sqrt(lambda) I]`` and signal ``[y; 0]``: the same greedy selection, each coefficient
    fit the Tikhonov least squares ``min ||y - D_S x||^2 + lambda ||x||^2`` over the chosen atoms
    ``S``. Whatever the atoms, ``||x|| <= ||y|| / (2 sqrt(lambda))`` (about ``16 ||y||``; each
    singular value ``sigma`` of ``D_S`` passes as ``sigma / (sigma^2 + lambda)``), while codes
    over well-separated atoms change by a relative ``lambda / (sigma_min^2 + lambda)``, 0.1 % or
    less for ``sigma_min^2 >= 1``. Plain OMP solved the least squares over nearly dependent atoms
    (coherence 0.9998, the data initialisation on repeated rows): a unit signal outside their
    span got coefficients in the hundreds, and the linear OC-SVM on such codes scored a clear
    outlier as the most normal row. A ridge bounds every code, also over atoms that the K-SVD
    sweep has made coherent, and needs no threshold on the atoms' dependence (a rule that stopped
    OMP at a nearly dependent atom would bound the codes only by a product of such thresholds).
    """
    n_atoms = D.shape[1]
    codes = np.zeros((n_atoms, Y.shape[1]))
    if n_atoms == 0:
        return codes
    s = effective_sparsity(n_nonzero_coefs, D.shape)
    # scikit-learn's OMP stops when the squared largest correlation is under the machine epsilon,
    # an absolute threshold: raw signals of size 1e-9 got all-zero codes (1e-6: codes cut after
    # one atom). OMP is scale-equivariant per signal, so a signal whose largest correlation is
    # outside [2^-10, 2^10] is coded divided by a power of two (exact) and its code scaled back.
    # (each signal's correlations computed from it alone: its code does not depend on its batch)
    DtY = row_products(Y.T, D).T
    peak = np.abs(DtY).max(axis=0)
    unit = np.ones_like(peak)
    odd = (peak > 0.0) & ((peak < 2.0**-10) | (peak > 2.0**10))
    unit[odd] = np.ldexp(1.0, np.frexp(peak[odd])[1])
    gram = D.T @ D + ridge * np.eye(n_atoms)
    with warnings.catch_warnings():
        # OMP stops early (and warns) when no atom correlates with the residual any more: the
        # codes are final. (Its other warning, dependent atoms, cannot occur with a ridge: it
        # makes every squared pivot of the Cholesky factor at least ``ridge``.)
        warnings.simplefilter("ignore", RuntimeWarning)
        out = orthogonal_mp_gram(gram, DtY / unit, n_nonzero_coefs=s, copy_Gram=False)
    codes[:] = out.reshape(n_atoms, -1) * unit
    return codes


def effective_sparsity(n_nonzero_coefs: int, dictionary_shape: tuple[int, ...]) -> int:
    """The number of atoms OMP selects per signal: ``min(s, n_atoms, signal dimension)``.

    ``s`` is an upper bound (at most ``s`` nonzeros). Above the number of atoms the bound does
    not constrain anything; above the signal dimension the first ``dimension`` atoms already
    represent the signal exactly (the residual vanishes, OMP has nothing more to pick).
    """
    return int(min(n_nonzero_coefs, *dictionary_shape))


def maximize_on_sphere(
    B: FloatArray,
    g: FloatArray,
    method: str = "exact",
    d0: FloatArray | None = None,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> FloatArray:
    """Return ``argmax_{||d|| = 1} ||B^T d + g||^2`` (the atom update of Theorem 1).

    ``method="exact"``: trust-region sub-problem solved through the SVD ``B = U S V^T``. Writing
    ``d = U y`` and ``b = S V^T g``, the maximiser is ``y = (mu I - S^2)^{-1} b`` with
    ``mu >= s_1^2`` the root of the secular equation ``sum_k b_k^2 / (mu - s_k^2)^2 = 1``
    (found by Brent's method on ``1/sqrt(phi) - 1``); the "hard case" (``b`` orthogonal to the top
    singular space) is handled explicitly. ``method="power"``: the ascent iteration
    ``d <- B (B^T d + g) / ||B (B^T d + g)||`` (a power method shifted by ``g``; each step does not
    decrease the convex objective), started from ``d0`` and from ``-d0``, the better end kept.
    """
    if method == "exact":
        return _sphere_exact(B, g)
    if method == "power":
        return _sphere_power(B, g, d0, max_iter, tol)
    raise _solver_error(method)


def _solver_error(method: object) -> ValueError:
    """The error for an unknown ``atom_solver`` (raised at fit and by the solver)."""
    return ValueError(f"atom_solver must be 'exact' or 'power', got {method!r}")


def _sphere_exact(B: FloatArray, g: FloatArray) -> FloatArray:
    U, S, Vt = np.linalg.svd(B, full_matrices=False)
    if S.size == 0 or S[0] <= 0.0:
        d = np.zeros(B.shape[0])
        d[0] = 1.0
        return d
    b = S * (Vt @ g)
    s2 = S**2
    bnorm = float(np.linalg.norm(b))
    if bnorm <= 1e-14 * s2[0]:
        return U[:, 0].copy()
    lo = s2[0] * (1.0 + 1e-15) + 1e-300
    hi = s2[0] + bnorm

    def psi(mu: float) -> float:
        return 1.0 / np.sqrt(max(float(np.sum((b / (mu - s2)) ** 2)), 1e-300)) - 1.0

    hard = _sphere_hard_case(b, s2)
    if psi(lo) >= 0.0:
        return U @ hard
    mu = hi if psi(hi) <= 0.0 else brentq(psi, lo, hi, xtol=1e-15 * hi, rtol=1e-15)
    y = b / (mu - s2)
    y /= np.linalg.norm(y)
    # Near the hard case (b's top part at rounding level, not exactly 0) the root mu lies within
    # rounding of s_1^2 and b_1 / (mu - s_1^2) is noise: keep the better of the two unit vectors.
    if float(hard @ (s2 * hard) + 2.0 * (b @ hard)) > float(y @ (s2 * y) + 2.0 * (b @ y)):
        y = hard
    return U @ y


def _sphere_hard_case(b: FloatArray, s2: FloatArray) -> FloatArray:
    """The trust-region hard-case solution ``y`` (unit norm) of ``max y^T S^2 y + 2 b^T y``.

    Off the top singular space ``y_k = b_k / (s_1^2 - s_k^2)`` (the limit ``mu -> s_1^2``); the
    rest of the unit norm goes along the top space, in the direction of ``b``'s top part (its
    sign raises ``2 b^T y``; the first top axis when that part is 0). It is the maximiser when
    the off-top part has norm at most one and ``b``'s top part vanishes.
    """
    top = s2 >= s2[0] * (1.0 - 1e-12)
    y = np.zeros_like(b)
    y[~top] = b[~top] / (s2[0] - s2[~top])
    fill = np.sqrt(max(0.0, 1.0 - float(y @ y)))
    b_top = np.where(top, b, 0.0)
    norm_top = float(np.linalg.norm(b_top))
    if norm_top > 0.0:
        y += fill * b_top / norm_top
    else:
        y[np.flatnonzero(top)[0]] = fill
    return y / np.linalg.norm(y)


def _sphere_power(
    B: FloatArray, g: FloatArray, d0: FloatArray | None, max_iter: int, tol: float
) -> FloatArray:
    start = np.ones(B.shape[0]) if d0 is None else np.asarray(d0, dtype=float)
    norm = np.linalg.norm(start)
    start = start / norm if norm > 0 else np.eye(B.shape[0])[0]
    # The maximisation has at most one local non-global maximiser, on the far side of the top
    # singular direction: ascend from both +d0 and -d0 and keep the better end point.
    ends = [_power_ascent(B, g, sign * start, max_iter, tol) for sign in (1.0, -1.0)]
    values = [float(np.sum((B.T @ d + g) ** 2)) for d in ends]
    return ends[int(np.argmax(values))]


def _power_ascent(
    B: FloatArray, g: FloatArray, d: FloatArray, max_iter: int, tol: float
) -> FloatArray:
    for _ in range(max_iter):
        z = B @ (B.T @ d + g)
        nz = np.linalg.norm(z)
        if nz == 0.0:
            break
        z /= nz
        if np.linalg.norm(z - d) <= tol:
            return z
        d = z
    return d


def group_shrink(v: FloatArray, beta: float) -> FloatArray:
    """Theorem 1's row update: ``(1 - beta/||v||) v`` if ``||v|| >= beta`` else the zero row."""
    nv = np.linalg.norm(v)
    if nv <= beta or nv == 0.0:
        return np.zeros_like(v)
    return (1.0 - beta / nv) * v


def atom_objective(
    r_sq: float,
    x: FloatArray,
    rt_d: FloatArray,
    penalty: float,
    hinge_base: FloatArray,
    w_i: float,
    rho: float,
    hinge_weight: float,
) -> float:
    """The part of a composite objective that one atom update changes (unit atom ``d``).

    ``1/2 ||R - d x^T||^2 = 1/2 (||R||^2 - 2 x^T R^T d + ||x||^2)``, plus the regulariser value
    ``penalty``, plus ``hinge_weight * sum_j max(0, rho - hinge_base_j - w_i x_j)``.
    """
    fit = 0.5 * (r_sq - 2.0 * float(x @ rt_d) + float(x @ x))
    hinge = float(np.maximum(0.0, rho - hinge_base - w_i * x).sum())
    return fit + penalty + hinge_weight * hinge


@dataclass
class LinearOCSVM:
    """A fitted linear one-class SVM stored as support vectors, dual coefficients, intercept.

    ``decision(Z) = Z w + intercept`` equals scikit-learn's
    ``OneClassSVM(kernel="linear").decision_function`` (positive = inlier), to rounding.
    ``w = SV^T lambda_SV`` is the normal vector ``sum_j lambda_j z_j``.
    """

    support_vectors: FloatArray
    dual_coef: FloatArray
    intercept: float

    @property
    def w(self) -> FloatArray:
        return self.dual_coef @ self.support_vectors

    @property
    def rho(self) -> float:
        return -self.intercept

    def decision(self, Z: FloatArray) -> FloatArray:
        """scikit-learn sign convention: ``w^T z - rho`` (negative = outlier); each row's value
        depends on that row alone, bit for bit (:func:`row_products`): the training scores, and
        so the threshold, are what the same rows score in any batch. Through ``w``, not the
        kernel values ``z^T sv_i`` it was the weighted sum of: those of a row far out overflowed
        (to ``inf - inf``) where its score does not."""
        return row_products(Z, self.w) + self.intercept


def fit_linear_ocsvm(Z: FloatArray, nu: float, tol: float | None) -> tuple[LinearOCSVM, FloatArray]:
    """Fit scikit-learn's linear OneClassSVM on rows ``Z``; return it and the paper's ``lambda``.

    ``lambda`` (one per row, summing to one) is ``dual_coef_ / (nu N)``. ``tol=None`` scales
    libsvm's stopping tolerance (a dual-gradient gap, in units of ``||z||^2``) to the data:
    ``1e-5`` times the mean squared row norm, times ``min(1, nu N)``: libsvm's multipliers sum to
    ``nu N``, and so shrink its gradients and their gap (at ``nu N = 0.05`` it stopped with a
    primal 18 times the optimum's distance from 0 short of it).

    That gap is in the units of the decision values ``w^T z`` (libsvm's gradients), and
    ``w = sum_j alpha_j z_j`` is made of the support vectors: the mean squared norm stands for
    their scale only when they are about as long as the mean row. They can be far shorter:
    KDL-OCSVM's codes under its narrow default kernel are mostly of norm 1e-4 or less next to a
    few of norm 1, the support vectors are short ones, ``rho`` came out near 1e-9 with a
    tolerance near 1e-7, the tolerance decided the signs of the training scores and ``nu`` did
    not set the share flagged (at ``n_iter=0`` on 300 Gaussian rows, 0.05 flagged 36 % of the
    training rows, 0.1 flagged 28 %, 0.3 flagged 32 %). So with ``tol=None`` a fit is repeated
    with the same rule on the support vectors (their squared norms weighted by ``alpha``) when
    that gives a tolerance under ``LIBSVM_TOL_SV_SHORTER`` times the one used, at most
    ``LIBSVM_TOL_REFITS`` times; the usual fit, whose support vectors are about as long as the
    rows, is not repeated. (Scaling the rows by a scalar would not help: the dual solution is
    invariant to it and the default tolerance scales with it. Nor would a tolerance relative to
    ``rho``: codes of both signs can put the origin inside the set the OC-SVM separates from it,
    where the optimum is ``w = 0``, ``rho = 0`` and such a tolerance only chases rounding.) An
    explicit ``tol`` is used as given.
    """
    # libsvm caches kernel values in single precision: rows with ||z||^2 beyond ~3e38 made them
    # infinite ("The dual coefficients or intercepts are not finite"; raw signals of size 1e20
    # failed DL-OCSVM's fit) and those under ~1e-38 made them 0. The linear OC-SVM is
    # scale-equivariant (same multipliers; the support vectors scale with the rows, the
    # intercept with their square), so rows out of range are divided by a power of two (exact)
    # for libsvm and the solution is scaled back; rows in range are fitted as they are.
    unit = _power_of_two_scale(
        float(np.sqrt(np.mean(np.einsum("ij,ij->i", Z, Z)))), LIBSVM_SAFE_NORM
    )
    Z = Z / unit
    auto_tol = tol is None
    if tol is None:
        mean_sq = max(float(np.mean(np.einsum("ij,ij->i", Z, Z))), 1e-12)
        tol = 1e-5 * mean_sq * min(1.0, nu * Z.shape[0])
    else:
        tol = tol / unit**2
    # libsvm's solver can cycle for ever on degenerate rows (a few distinct codes, repeated,
    # with a tolerance tiny next to their scale): with no bound the anomaly worker's fit never
    # returned. Stopped at the bound, it keeps its last iterate (scikit-learn warns).
    max_iter = max(LIBSVM_MIN_ITER, LIBSVM_ITER_PER_ROW * Z.shape[0])
    svm = OneClassSVM(kernel="linear", nu=nu, tol=tol, shrinking=True, max_iter=max_iter)
    svm.fit(Z)
    for _ in range(LIBSVM_TOL_REFITS if auto_tol else 0):
        sv, coef = np.asarray(svm.support_vectors_), np.abs(svm.dual_coef_[0])
        sv_sq = float(coef @ np.einsum("ij,ij->i", sv, sv)) / max(float(coef.sum()), 1e-300)
        sv_tol = 1e-5 * sv_sq * min(1.0, nu * Z.shape[0])
        if not 0.0 < sv_tol < LIBSVM_TOL_SV_SHORTER * svm.tol:
            break
        svm.set_params(tol=sv_tol).fit(Z)
    lam = np.zeros(Z.shape[0])
    lam[svm.support_] = svm.dual_coef_[0] / (nu * Z.shape[0])
    model = LinearOCSVM(
        support_vectors=np.array(svm.support_vectors_) * unit,
        dual_coef=np.array(svm.dual_coef_[0]),
        intercept=float(svm.intercept_[0]) * unit**2,
    )
    return model, lam


def refit_linear_ocsvm(
    Z: FloatArray,
    nu: float,
    tol: float | None,
    previous: tuple[LinearOCSVM, FloatArray],
) -> tuple[LinearOCSVM, FloatArray]:
    """:func:`fit_linear_ocsvm` on the codes after a sweep, unless the ``previous`` OC-SVM and
    its ``lambda`` have the lower primal on them: libsvm stops at a tolerance, and a refit
    stopped short could be worse than the solution it replaces (``F`` rose across outer
    iterations, against Proposition 3)."""
    fitted = fit_linear_ocsvm(Z, nu, tol)
    if ocsvm_primal(Z, fitted[0], nu) > ocsvm_primal(Z, previous[0], nu):
        return previous
    return fitted


def ocsvm_primal(Z: FloatArray, svm: LinearOCSVM, nu: float) -> float:
    """The paper's OC-SVM primal ``1/2||w||^2 - rho + 1/(nu N) sum_j max(0, rho - w^T z_j)``.

    Evaluated at ``w = coef_ / (nu N)``, ``rho = -intercept_ / (nu N)`` (module docstring).
    """
    scale = nu * Z.shape[0]
    w = svm.w / scale
    rho = svm.rho / scale
    hinge = np.maximum(0.0, rho - Z @ w)
    return 0.5 * float(w @ w) - rho + float(hinge.sum()) / scale


class OCSVMDetectorBase(OutlierMixin, BaseEstimator):
    """PyOD-style scoring, thresholding and checkpointing shared by the four detectors.

    Subclasses implement ``_fit(X)`` (learning every attribute listed in ``_state_keys``) and
    ``_codes(X)`` (the representations of rows, samples x atoms); the OC-SVM part lives in
    ``ocsvm_support_vectors_``, ``ocsvm_dual_coef_``, ``ocsvm_intercept_``. Subclasses code the
    signals that ``_fit_features`` (training rows; fits the normalisation) and ``_features`` (any
    rows) return: the normalised rows, which the kernel variants map further.

    Output conventions (PyOD's, kept for the benchmarks and the pipeline that read them):
    ``decision_function`` is higher = more anomalous (positive = outside the OC-SVM boundary),
    ``predict`` and ``fit_predict`` return 1 for outliers and 0 for inliers (not scikit-learn's
    ``-1``/``+1``); ``score_samples`` follows scikit-learn (higher = more normal). The estimator
    type is scikit-learn's ``"outlier_detector"`` (``OutlierMixin``).
    """

    _state_keys: tuple[str, ...] = ()
    # training diagnostics, checkpointed too; a state written before they were is still taken
    _diagnostic_state_keys: tuple[str, ...] = ("objective_", "n_rejected_updates_")
    # fitted attributes checkpointed since a later version, each with the value that a state
    # written before it stands for (set_state restores that value when the key is absent)
    _versioned_state_defaults: tuple[tuple[str, float], ...] = ()
    _common_state_keys = (
        "n_features_in_",
        "ocsvm_support_vectors_",
        "ocsvm_dual_coef_",
        "ocsvm_intercept_",
        "threshold_",
        "decision_scores_",
        "labels_",
        "normalize_mean_",
        "normalize_scale_",
        "normalize_lift_",
    )

    def _fit_normalize(self, X: FloatArray) -> FloatArray:
        """Fit the ``normalize`` statistics on training rows and return the normalised rows."""
        mean, scale, lift = fit_normalizer(X, self.normalize)
        self.normalize_mean_, self.normalize_scale_ = mean, scale
        self.normalize_lift_ = float(lift)
        return self._normalize(X)

    def _normalize(self, X: FloatArray) -> FloatArray:
        return apply_normalizer(
            X,
            self.normalize,
            self.normalize_mean_,
            self.normalize_scale_,
            float(self.normalize_lift_),
        )

    def _fit_features(self, X: FloatArray) -> FloatArray:
        """Signals the model is learned on (rows): the training rows, normalised by statistics
        fitted on them (:meth:`_fit_normalize`)."""
        return self._fit_normalize(X)

    def _features(self, X: FloatArray) -> FloatArray:
        """Signals of rows to score, as :meth:`_fit_features` gave the training ones."""
        return self._normalize(X)

    def _sparsity(self) -> int | None:
        """The OMP sparsity the training data must support: ``n_nonzero_coefs`` capped at
        ``n_components`` (OMP never selects more atoms than exist, ``effective_sparsity``);
        ``None`` for a model that codes without OMP."""
        return min(int(self.n_nonzero_coefs), int(self.n_components))

    def _nu(self) -> float:
        """``nu`` in (0, 1): at 1 every training point is a support vector and libsvm's dual
        coefficients are not finite (it failed inside the fit, as scikit-learn's OneClassSVM
        does)."""
        nu = self.nu if self.nu is not None else self.contamination
        nu = 0.1 if nu is None else nu
        if not (_is_real(nu) and 0.0 < nu < 1.0):  # (a string such as "0.3" was parsed)
            raise ValueError(f"nu must be in (0, 1), got {nu}")
        return float(nu)

    def _check_counts(self) -> None:
        """``ValueError`` naming the parameter for counts out of range (``n_iter=-1`` was taken
        as 0 sweeps, ``n_components=0`` failed in the OC-SVM with "Mean of empty slice",
        ``n_landmarks=0`` in ``check_pairwise_arrays``; a fractional ``n_nonzero_coefs`` or
        ``degree`` was truncated, a ``degree`` under 1 fitted silently). Parameters the estimator
        does not have are skipped."""
        low = {
            "n_components": 1,
            "n_nonzero_coefs": 1,
            "n_iter": 0,
            "power_iter": 1,
            "n_landmarks": 1,
            "degree": 1,
        }
        for name, least in low.items():
            if not hasattr(self, name):  # (a parameter of another of the four models)
                continue
            value = getattr(self, name)
            if value is None and name == "n_landmarks":  # None: every training row
                continue
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")

    def _check_weights(self) -> None:
        """``ValueError`` naming the parameter for real parameters out of range, NaN included:
        a negative ``beta`` or ``alpha`` turned the penalty into a reward (``group_shrink``
        enlarged the codes) and was fitted silently; a NaN ``beta`` failed in the SVD ("did not
        converge"), an explicit ``gamma`` of 0 made every kernel value 1 and a negative one made
        them grow with the distance; ``eig_floor`` >= 1 or NaN kept no eigenvalue, so OMP failed
        on 0 atoms; a non-finite ``coef0`` made the polynomial Gram NaN; ``gamma_scale`` was
        checked only when ``gamma`` is None; a non-positive ``ocsvm_tol`` was refused by libsvm
        as its ``tol``. Parameters the estimator does not have are skipped."""
        ranges = {
            "alpha": (0.0, True, "in [0, inf)"),
            "beta": (0.0, True, "in [0, inf)"),
            "gamma": (0.0, False, "None or in (0, inf)"),
            "gamma_scale": (0.0, False, "> 0 and finite"),
            "coef0": (-np.inf, False, "a finite number"),
            "ocsvm_tol": (0.0, False, "None or in (0, inf)"),
        }
        for name, (low, closed, what) in ranges.items():
            if not hasattr(self, name):
                continue
            value = getattr(self, name)
            if name in ("gamma", "ocsvm_tol") and value is None:  # None: the data-scaled default
                continue
            if not (
                _is_real(value) and np.isfinite(value) and (value >= low if closed else value > low)
            ):
                raise ValueError(f"{name} must be {what}, got {value!r}")
        if hasattr(self, "eig_floor"):
            floor = self.eig_floor
            if not _is_real(floor) or not 0.0 <= floor < 1.0:
                raise ValueError(f"eig_floor must be in [0, 1), got {floor!r}")

    def _check_contamination(self) -> None:
        c = self.contamination
        if c is not None and not (_is_real(c) and 0.0 < c < 0.5):
            raise ValueError(f"contamination must be None or in (0, 0.5), got {c}")

    def _check_choices(self) -> None:
        """``ValueError`` for an unknown ``atom_solver`` (the solver checked it only when an atom
        with a support was updated: with ``n_iter=0`` any value was accepted) and a flag that is
        not a boolean (``omp_refresh="no"`` meant True). Parameters the estimator does not have
        are skipped."""
        if self.atom_solver not in ATOM_SOLVERS:
            raise _solver_error(self.atom_solver)
        for name in ("omp_refresh", "replace_dead_atoms"):
            value = getattr(self, name, False)
            if not isinstance(value, bool | np.bool_):
                raise ValueError(f"{name} must be a boolean, got {value!r}")

    def __sklearn_tags__(self) -> Tags:
        """scipy.sparse input is accepted (densified, :func:`_as_matrix`)."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def fit(self, X: object, y: object = None) -> OCSVMDetectorBase:
        """Learn the model on rows of ``X`` (unsupervised; ``y`` is ignored).

        A fit that raises (an invalid parameter such as ``nu``, ``tau`` or ``init``, or data the
        model cannot be built on) leaves the previously learned state as it was: the learned
        attributes are set as training goes, so they are restored on failure (the
        normalisation statistics and ``n_features_in_`` of the failed data were kept before,
        and the old dictionary scored with them).

        A DataFrame's column names (all strings) are recorded as ``feature_names_in_``, which
        scoring checks (scikit-learn's convention): the rows were converted with
        ``np.asarray``, so a frame with its columns in another order was scored silently, each
        value against another feature's atoms, where scikit-learn's ``OneClassSVM`` refuses it.
        Input without names removes those of an earlier fit.
        """
        self._check_contamination()
        self._check_counts()
        self._check_weights()
        self._check_choices()
        raw = X
        X = check_training_data(X, self._sparsity(), type(self).__name__)
        if self.normalize is None:
            check_raw_magnitude(X)
        learned = {k: v for k, v in vars(self).items() if k.endswith("_")}
        try:
            _check_feature_names(self, raw, reset=True)
            self.n_features_in_ = int(X.shape[1])
            self._fit(X)
            self.decision_scores_ = self._decision(X)
        except BaseException:
            for k in [k for k in vars(self) if k.endswith("_")]:
                delattr(self, k)
            self.__dict__.update(learned)
            raise
        if self.contamination is None:
            self.threshold_ = 0.0
        else:
            q = 100.0 * (1.0 - float(self.contamination))
            self.threshold_ = float(np.percentile(self.decision_scores_, q))
        self.labels_ = (self.decision_scores_ > self.threshold_).astype(np.int64)
        return self

    @property
    def ocsvm_(self) -> LinearOCSVM:
        return LinearOCSVM(
            self.ocsvm_support_vectors_, self.ocsvm_dual_coef_, float(self.ocsvm_intercept_)
        )

    def _store_ocsvm(self, svm: LinearOCSVM) -> None:
        self.ocsvm_support_vectors_ = svm.support_vectors
        self.ocsvm_dual_coef_ = svm.dual_coef
        self.ocsvm_intercept_ = float(svm.intercept)

    def decision_function(self, X: object) -> FloatArray:
        """Anomaly scores, higher = more anomalous: ``rho - w^T x`` on the codes of the rows, in
        libsvm's scale (``nu N`` times the paper's, N training rows): scores of models fitted on
        as many rows compare; the labels do not depend on the scale.

        Zero is the OC-SVM's own boundary (positive = outside, i.e. outlier). A finite row
        whose score overflows the float range with both signs (``inf - inf``: raw signals or a
        polynomial kernel far beyond the training rows) scores ``+inf``, outside every boundary;
        it was NaN, which ``predict`` took for an inlier.

        A DataFrame whose column names differ from ``feature_names_in_`` (other names, or the
        same in another order) is refused with scikit-learn's ``ValueError``; names on one side
        only warn, as in scikit-learn. ``score_samples`` and ``predict`` score through here.
        """
        check_is_fitted(self, "ocsvm_intercept_")
        _check_feature_names(self, X, reset=False)
        X = check_scoring_data(X, int(self.n_features_in_), type(self).__name__)
        return self._decision(X)

    def _decision(self, X: FloatArray) -> FloatArray:
        """:meth:`decision_function` on validated rows (the training rows, scored at fit
        without a second validation or a feature-name check of the converted array)."""
        scores = -self.ocsvm_.decision(self._codes(X))
        return np.where(np.isnan(scores), np.inf, scores)

    def score_samples(self, X: object) -> FloatArray:
        """scikit-learn convention (higher = more normal): ``-decision_function(X)``."""
        return -self.decision_function(X)

    def predict(self, X: object) -> FloatArray:
        """1 for outliers, 0 for inliers, by ``threshold_`` (PyOD convention)."""
        return (self.decision_function(X) > self.threshold_).astype(np.int64)

    def fit_predict(self, X: object, y: object = None) -> FloatArray:
        """Fit on ``X`` and return its labels: 1 for outliers, 0 for inliers (PyOD convention,
        unlike scikit-learn's ``-1``/``+1``); equal to ``labels_``."""
        return self.fit(X).predict(X)

    def get_state(self) -> dict[str, np.ndarray]:
        """The fitted state as plain numeric arrays (``np.savez``-able, no pickle), with the
        training diagnostics (``objective_``, ``n_rejected_updates_``, DPL's ``tau_``) and, for
        a model fitted on a DataFrame, ``feature_names_in_`` as a unicode array (scikit-learn
        keeps an object array, which ``np.load(allow_pickle=False)`` refuses)."""
        check_is_fitted(self, "ocsvm_intercept_")
        keys = self._common_state_keys + self._state_keys
        versioned = [k for k, _ in self._versioned_state_defaults]
        diagnostics = [k for k in self._diagnostic_state_keys if hasattr(self, k)]
        state = {k: np.array(getattr(self, k)) for k in (*keys, *versioned, *diagnostics)}
        if hasattr(self, "feature_names_in_"):
            state["feature_names_in_"] = np.asarray(self.feature_names_in_, dtype=str)
        return state

    def set_state(self, state: dict[str, np.ndarray]) -> OCSVMDetectorBase:
        """Restore ``get_state()`` output on an instance built with the same parameters.

        The diagnostics are optional (a state saved before they were checkpointed scores the
        same): those absent from ``state`` are left unset, not invented. A versioned attribute
        (``_versioned_state_defaults``, e.g. DL-OCSVM's ``omp_ridge_``) absent from ``state``
        takes the value that states written before it stand for. ``feature_names_in_`` is
        optional too (a model fitted without names, or a state saved before names were kept):
        when present it is restored as scikit-learn's object array of ``str``, and must
        name ``n_features_in_`` columns.
        """
        keys = self._common_state_keys + self._state_keys
        missing = [k for k in keys if k not in state]
        if missing:
            raise ValueError(f"state is missing {missing}")
        names = None
        if "feature_names_in_" in state:
            names = np.asarray(state["feature_names_in_"])
            if names.dtype.kind != "U" or names.shape != (
                int(np.asarray(state["n_features_in_"])),
            ):
                raise ValueError(
                    "state's feature_names_in_ must be a 1-D unicode array with one name per "
                    f"feature, got dtype {names.dtype} and shape {names.shape}"
                )
        for k in (*self._diagnostic_state_keys, "feature_names_in_"):
            if hasattr(self, k):
                delattr(self, k)  # none left over from an earlier fit or state
        for k in (*keys, *(k for k in self._diagnostic_state_keys if k in state)):
            value = np.array(state[k])
            setattr(self, k, value.item() if value.ndim == 0 else value)  # scalars as in fit
        for k, before in self._versioned_state_defaults:
            setattr(self, k, float(np.asarray(state[k])) if k in state else before)
        if names is not None:
            self.feature_names_in_ = np.array([str(n) for n in names], dtype=object)
        return self
