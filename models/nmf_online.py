"""Online NMF with robust stochastic approximation: OR-NMF, MOR-NMF and WOR-NMF.

Guan, Tao, Luo and Yuan, "Online Nonnegative Matrix Factorization With Robust Stochastic
Approximation", IEEE TNNLS 23(7), 2012.

Orientation (scikit-learn): ``X`` is documents x terms (``n_samples x n_features``), sparse or
dense, and ``X ~ H W^T`` with bases ``W`` (``n_features x r``, each column on the probability
simplex) and coefficients ``H`` (``n_samples x r``). ``components_`` is ``W^T``, ``transform``
returns ``H`` and ``predict`` the dominant topic of each document. In the paper's notation a
sample ``v`` is a row of ``X`` and ``h`` the matching row of ``H``.

* Algorithm 1 (OR-NMF): each step takes ``batch_size`` samples, computes their coefficients by
  non-negative least squares (problem (27) for a chunk, :mod:`sparsewatch.models.nnls`),
  accumulates ``A_t = sum h h^T`` and ``B_t = sum v h^T`` and updates ``W`` by Algorithm 2.
* Algorithm 2 (:mod:`sparsewatch.models.robust_sa`): robust stochastic approximation on
  ``f_t(W) = (1/n_t)(1/2 tr(W^T W A_t) - tr(W^T B_t)) + alpha_W/2 ||W||^2`` over the feasible set
  (simplex columns, optionally with box bounds): ``W^{k+1} = P(W^k - r_k grad f_t(W^k))`` with
  ``r_k = theta_t D_W / (M_* sqrt(k))``, ``D_W = sqrt(2 r)``, ``M_*`` the running maximum of the
  gradient norm in this call and ``theta_t = 0.1 cos((t - 1) pi / 2T)``. ``D_W`` is the diameter
  of the feasible set in Frobenius norm: ``r`` simplex columns, each of diameter ``sqrt(2)``,
  give ``sqrt(2 r)`` (the issue's ``sqrt(2) r`` over-estimates it by ``sqrt(r)``; measured on
  Reuters TF-IDF the exact diameter converges faster). The returned bases are
  the step-weighted average ``sum_k r_k W^k / sum_k r_k`` (feasible: a convex combination of
  feasible points). Stopping rule (9), read as: stop when the objective of the averaged iterate
  changes by at most ``tau`` relative to its value (objective including ``1/2 sum ||v||^2`` so it
  is a sum of squared residuals), or after ``max_inner_iter`` iterations.
* Algorithm 3 (MOR-NMF, :class:`MORNMF`): ``A_t`` and ``B_t`` summed over a ring buffer of the
  ``buffer_size`` most recent steps only: constant time and memory per step (``B_t`` is updated
  by the difference of the new and the evicted slot, and re-summed exactly once per turn).
* WOR-NMF (:class:`WORNMF`): the mini-batch (chunk) form, one step per ``batch_size`` samples.
* Section III extensions: l1-regularised ``h`` (``alpha_h_l1``), Tikhonov-regularised ``W``
  (``alpha_W``), box constraints (``h_max`` on coefficients, ``w_min``/``w_max`` on bases), and
  OR-NMF-IS (``beta_loss="itakura-saito"``): ``h`` by the multiplicative updates of Fevotte et al.
  (2009) for fixed ``W`` (each document scaled to a largest entry of 1 first: the IS divergence
  is scale-invariant, and ``y^2`` of documents of entries ``1e-170`` underflowed to NaN codes),
  and ``W`` minimising the majorised online objective: with ``W_0`` the bases when a sample
  arrived and ``y_0 = W_0 h``, Jensen's bound on ``v / y`` and the tangent of ``log y`` give
  ``sum_fk Q_fk / W_fk + P_fk W_fk`` with ``P = sum (1 / y_0) h^T`` and
  ``Q = W_0^2 * sum (v / y_0^2) h^T`` (stored in ``A_``/``B_``). It separates by column, so it is
  minimised exactly over the feasible set (:func:`_is_majoriser_minimum`: per entry
  ``P - Q / W^2 + n alpha_W W = lambda`` clipped to the box, ``lambda`` per column by bisection)
  instead of by Algorithm 2: its gradient is unbounded near ``W = 0``, which makes ``M_*``
  useless, and the step along the gradient preconditioned by ``W^2`` followed by the Euclidean
  projection stopped at points that are not KKT points of the majoriser (and could increase it).
  ``horizon``, ``tau`` and ``max_inner_iter`` are not used by this update.

Cost of one step on sparse text (Frobenius loss). ``X`` stays CSR: only ``X W`` (``n x r``),
``X^T H`` and the squared norms of the stored entries touch it. The chunk's NNLS needs only
``W^T W`` and ``W^T V`` (block principal pivoting, all documents at once). Algorithm 2 works on
``W^T`` (``r x m``, contiguous per topic) with one small product ``A_t W^T`` per iteration, the
objective of the averaged iterate tracked by linearity for stopping rule (9), and the simplex
projection by pivoting (no sort); on the plain simplex its iterates are float32 (the returned
average is renormalised in float64), which follows the float64 loop to about ``1e-6``.

Horizon. ``theta_t`` needs the horizon ``T``; an unbounded stream has none and the paper's
schedule reaches 0 at ``t = T + 1`` (then turns negative), which would freeze the bases. We use
the schedule with warm restarts, ``theta_t = 0.1 cos(((t - 1) mod T) pi / 2T)``: inside each
period it is exactly the paper's schedule (so a bounded run of at most ``T`` steps is the
paper's algorithm), and every ``T`` steps the step size re-opens so a drifting stream keeps
moving the bases (each restart starts from the current bases, not from scratch). Default
``T = 200`` steps: with one step per window (hourly windows) this is about a week, and 20 times
the default MOR-NMF buffer, so most of a period runs with small, averaging steps.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import Tags, check_random_state
from sklearn.utils.validation import check_is_fitted
from sparsewatch.models._validation import (
    check_feature_count,
    check_keep_index,
    nonnegative_matrix,
    require_samples_and_features,
    tfidf_model_tags,
)
from sparsewatch.models.nnls import COLUMN_BLOCK, solve_nnls
from sparsewatch.models.projections import project_simplex, project_simplex_box
from sparsewatch.models.robust_sa import robust_sa, robust_sa_frobenius, theta_schedule

__all__ = ["MORNMF", "ORNMF", "WORNMF"]

_IS = "itakura-saito"


def _as_float(X: np.ndarray | sp.spmatrix, model: str) -> np.ndarray | sp.csr_matrix:
    """``X`` as float64 (CSR when sparse), checked by :func:`nonnegative_matrix` (negative entries
    were learned from silently; ``1/2 sum ||v||^2`` is taken from the stored entries); errors
    name ``model``."""
    return nonnegative_matrix(X, model)


def _evicted(keep: np.ndarray, n_old: int) -> np.ndarray:
    """Mask of the old terms ``keep`` does not keep."""
    mask = np.ones(n_old, dtype=bool)
    mask[keep] = False
    return mask


def _dense(X: np.ndarray | sp.csr_matrix) -> np.ndarray:
    return X if isinstance(X, np.ndarray) else X.toarray()


def _check_statistics(A: np.ndarray, B: np.ndarray, sq: float) -> None:
    """``ValueError`` when statistics about to be stored are not finite: finite documents whose
    ``H^T H``, ``X^T H`` or squared norms overflow float64 made them inf or NaN, and Algorithm 2
    then froze the bases for good (its ``M_*`` stayed 0) with only runtime warnings."""
    if not (math.isfinite(sq) and np.isfinite(A).all() and np.isfinite(B).all()):
        raise ValueError(
            "the statistics of this chunk overflow float64 (inf or NaN): the documents are too "
            "large in magnitude; rescale them (nothing was learned from this chunk)"
        )


_SIGN = np.int64(-(2**63))  # the sign bit of a float64, as an int64
_MAGNITUDE = np.int64(2**63 - 1)


def _float_key(x: np.ndarray) -> np.ndarray:
    """Monotone map of float64 (no NaN) onto int64: consecutive floats, consecutive keys."""
    bits = np.ascontiguousarray(x, dtype=np.float64).view(np.int64)
    return np.where(bits < 0, -(bits & _MAGNITUDE), bits)


def _key_float(key: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_float_key`."""
    return np.ascontiguousarray(np.where(key < 0, (-key) | _SIGN, key)).view(np.float64)


# cap on Newton steps per entry (from a start within a factor 2 of the root, on the left, the
# relative error falls 0.25, 0.1, 2e-2, 6e-4, 5e-7, 3e-13, 1e-16)
_NEWTON_STEPS = 30


def _is_entries(
    P: np.ndarray, Q: np.ndarray, a: float, lam: np.ndarray, lo: float, hi: float
) -> np.ndarray:
    """Minimiser of ``P w + Q / w + a/2 w^2 - lam w`` over ``lo <= w <= hi`` for every entry
    (``lam``: one multiplier per column): the root of the increasing
    ``g(w) = P - Q / w^2 + a w = lam`` clipped to the box.

    ``a = 0``: ``w = sqrt(Q / (P - lam))`` (``hi`` when ``P <= lam``). ``a > 0``: Newton on the
    concave increasing ``g - lam`` from a lower bound within a factor 2 of the root (monotone
    from the left): ``c = P - lam > 0`` puts the root in ``[min((Q/2a)^(1/3), (Q/2c)^(1/2)),
    min((Q/a)^(1/3), (Q/c)^(1/2))]``, ``c <= 0`` in ``[b, 2 b]`` with
    ``b = max(-c/a, (Q/a)^(1/3))``. The step is written ``w (a w^3 + c w^2 - Q) / (a w^3 + 2Q)``
    so that no ``Q / w^3`` overflows at small ``lo``."""
    c = P - lam
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if a == 0.0:
            w = np.where(c > 0, np.sqrt(Q / np.where(c > 0, c, 1.0)), np.inf)
            return np.clip(w, lo, hi)
        left = np.minimum(np.cbrt(Q / (2.0 * a)), np.sqrt(Q / (2.0 * c)))
        w = np.clip(np.where(c > 0, left, np.maximum(-c / a, np.cbrt(Q / a))), lo, hi)
        for _ in range(_NEWTON_STEPS):
            cube = a * w**3
            den = cube + 2.0 * Q
            step = np.where(den > 0, w * (cube + c * w**2 - Q) / np.where(den > 0, den, 1.0), 0.0)
            new = np.clip(w - step, lo, hi)
            done = np.all(np.abs(new - w) <= 4.0 * np.finfo(np.float64).eps * w)
            w = new
            if done:  # (the last ulp can cycle)
                break
    return w


def _is_majoriser_minimum(
    P: np.ndarray, Q: np.ndarray, a: float, lo: float, hi: float, W: np.ndarray
) -> np.ndarray:
    """Exact minimiser of the majorised Itakura-Saito objective ``sum_fk P_fk W_fk + Q_fk /
    W_fk + a/2 W_fk^2`` (``n f_t`` with ``a = n alpha_W``, Section III) over the feasible set:
    columns on the simplex with ``lo <= W_fk <= hi`` (``lo > 0``, ``m lo <= 1 <= m hi``).

    The objective separates by column, and each column's KKT conditions are
    ``P - Q / w^2 + a w = lambda`` on its free entries (:func:`_is_entries`: the entry's
    minimiser for a multiplier ``lambda``, nondecreasing in ``lambda``) with the one ``lambda``
    that makes the column sum to 1. ``lambda`` is found for all columns at once by bisection on
    the bit patterns of float64 (:func:`_float_key`: at most 64 halvings from the bracket
    ``[min g(lo), max g(hi)]``, widened by one float, whatever the scale of ``P`` and ``Q``)
    down to two adjacent floats; the column is then the convex combination of their minimisers
    that sums to 1 (which also resolves ties, entries with ``Q = 0`` and ``a = 0`` whose ``g``
    is constant). Columns
    with ``P = Q = 0`` and ``a = 0`` (statistics forgotten by :meth:`ORNMF.replace_components`)
    have a constant objective and keep their ``W``."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        g_lo = P - Q / lo**2 + a * lo
        g_hi = P - Q / hi**2 + a * hi
    # one float outside [min g(lo), max g(hi)]: every entry at lo, every entry at hi (also an
    # entry whose g is constant at the bound), kept within [-inf, inf]
    infinite = _float_key(np.array(np.inf))
    low = np.maximum(_float_key(g_lo.min(axis=0)) - 1, -infinite)
    high = np.minimum(_float_key(g_hi.max(axis=0)) + 1, infinite)
    for _ in range(70):  # 64 halvings reach adjacent keys
        active = low + 1 < high
        if not active.any():
            break
        mid = (low >> 1) + (high >> 1) + (low & high & 1)  # no int64 overflow
        below = _is_entries(P, Q, a, _key_float(mid), lo, hi).sum(axis=0) < 1.0
        low = np.where(active & below, mid, low)
        high = np.where(active & ~below, mid, high)
    w_low = _is_entries(P, Q, a, _key_float(low), lo, hi)
    w_high = _is_entries(P, Q, a, _key_float(high), lo, hi)
    s_low, s_high = w_low.sum(axis=0), w_high.sum(axis=0)
    gap = s_high - s_low
    t = np.clip((1.0 - s_low) / np.where(gap > 0, gap, 1.0), 0.0, 1.0)
    out = w_low + t * (w_high - w_low)
    if a == 0.0:
        flat = ~(P.any(axis=0) | Q.any(axis=0))
        out[:, flat] = W[:, flat]
    return out


class ORNMF(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """OR-NMF (Algorithms 1 and 2): online NMF with robust stochastic approximation.

    Parameters
    ----------
    n_components : rank ``r``.
    batch_size : samples per step; 1 is the paper's one-sample Algorithm 1, ``None`` makes each
        ``partial_fit`` call one step (one chunk, problem (27)).
    horizon : ``T`` of ``theta_t``, with warm restarts every ``T`` steps (module docstring).
    tau : tolerance of stopping rule (9).
    max_inner_iter : cap on Algorithm 2 iterations per step. ``horizon``, ``tau`` and
        ``max_inner_iter`` tune Algorithm 2 (Frobenius loss); under Itakura-Saito the bases
        minimise the majorised objective exactly (module docstring).
    alpha_h_l1, alpha_h_l2 : l1 and ridge weights on coefficients (Section III).
    alpha_W : Tikhonov weight on the bases (Section III).
    h_max : upper bound of the box constraint on coefficients (``None``: unbounded).
    w_min, w_max : box bounds on the bases inside the simplex (``w_min`` defaults to 0 for the
        Frobenius loss and ``1e-9`` for Itakura-Saito, where it must be positive).
    beta_loss : ``"frobenius"`` or ``"itakura-saito"`` (OR-NMF-IS; needs positive data).
    is_inner_iter : multiplicative updates for ``h`` under Itakura-Saito.
    nnls_method : ``"bpp"`` (block principal pivoting) or ``"pgd"`` (projected gradient).
    init : ``"data"`` (bases from random samples of the first chunk plus a little uniform mass),
        ``"random"`` or an ``n_features x r`` array (projected onto the feasible set).
    max_epochs : passes over the data in ``fit``.
    random_state : seed for the initialisation.

    Examples
    --------
    Two planted topics (terms 0-2 and terms 3-5), learned in steps of 10 documents:

    >>> import numpy as np
    >>> from sparsewatch.models.nmf_online import ORNMF
    >>> planted = np.repeat([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], 20, axis=0)
    >>> X = np.random.default_rng(0).random((40, 6)) * planted  # documents x terms
    >>> model = ORNMF(n_components=2, batch_size=10, random_state=0).fit(X)
    >>> model.n_steps_, model.components_.shape
    (4, (2, 6))
    >>> model.components_.sum(axis=1).round(6)  # each topic lies on the simplex
    array([1., 1.])
    >>> model.transform(X[:3]).shape  # coefficients of 3 documents
    (3, 2)
    >>> model.predict(X[[0, 1, 38, 39]])  # dominant topic
    array([0, 0, 1, 1])
    >>> model.get_feature_names_out()  # one output column per topic (``set_output``)
    array(['ornmf0', 'ornmf1'], dtype=object)
    """

    # learned state (the first step)
    n_features_in_: int
    components_: np.ndarray
    sq_: float

    @property
    def _n_features_out(self) -> int:
        """Columns of :meth:`transform` (one per topic), named by ``get_feature_names_out``
        (``ClassNamePrefixFeaturesOutMixin``; ``AttributeError`` until fitted)."""
        return int(self.components_.shape[0])

    def __init__(
        self,
        n_components: int = 10,
        *,
        batch_size: int | None = 1,
        horizon: int = 200,
        tau: float = 1e-3,
        max_inner_iter: int = 50,
        alpha_h_l1: float = 0.0,
        alpha_h_l2: float = 0.0,
        alpha_W: float = 0.0,
        h_max: float | None = None,
        w_min: float | None = None,
        w_max: float = 1.0,
        beta_loss: str = "frobenius",
        is_inner_iter: int = 50,
        nnls_method: str = "bpp",
        init: str | np.ndarray = "data",
        max_epochs: int = 1,
        random_state: int | None = None,
    ) -> None:
        self.n_components = n_components
        self.batch_size = batch_size
        self.horizon = horizon
        self.tau = tau
        self.max_inner_iter = max_inner_iter
        self.alpha_h_l1 = alpha_h_l1
        self.alpha_h_l2 = alpha_h_l2
        self.alpha_W = alpha_W
        self.h_max = h_max
        self.w_min = w_min
        self.w_max = w_max
        self.beta_loss = beta_loss
        self.is_inner_iter = is_inner_iter
        self.nnls_method = nnls_method
        self.init = init
        self.max_epochs = max_epochs
        self.random_state = random_state

    def __sklearn_tags__(self) -> Tags:
        """Sparse input is accepted (kept CSR) and must be non-negative."""
        return tfidf_model_tags(super().__sklearn_tags__(), None)

    # ------------------------------------------------------------------ public API
    def fit(self, X: np.ndarray | sp.spmatrix, y: None = None) -> ORNMF:
        """Forget any state and run ``max_epochs`` passes of :meth:`partial_fit` over ``X``.

        Invalid ``X`` or ``init`` raises ``ValueError`` before the state is forgotten, and so
        does ``X`` without samples or features (it returned a model without bases)."""
        X = _as_float(X, type(self).__name__)
        require_samples_and_features(X, type(self).__name__)
        self._check_loss(X)
        self._check_params()
        self._check_init(X.shape[1])
        self._check_box(X.shape[1])
        self._reset()
        for _ in range(self.max_epochs):
            self.partial_fit(X)
        return self

    def partial_fit(self, X: np.ndarray | sp.spmatrix, y: None = None) -> ORNMF:
        """Process ``X`` (documents x terms) as consecutive steps of ``batch_size`` samples.

        A wider ``X`` than seen so far means the vocabulary grew: the term dimension is
        extended with :meth:`resize_features` (new terms appended) first. Until a first ``X``
        with samples and features arrives nothing is learned (the bases need both; an empty
        vocabulary has no simplex to put them on). ``X`` with NaN or infinite entries raises
        ``ValueError`` before anything changes (they would poison ``B_`` for good), and so do
        box bounds (``set_params`` of ``w_min``/``w_max`` after fitting) that no basis over the
        vocabulary can meet (the statistics and ``n_steps_`` changed before the projection
        failed). A step whose statistics overflow float64 raises ``ValueError`` with nothing of
        that step stored (the steps before it in the same call are kept).
        """
        X = _as_float(X, type(self).__name__)
        self._check_loss(X)
        self._check_params()
        if not hasattr(self, "components_"):
            if 0 in X.shape:
                return self
            self._initialise(X)
        else:
            if self.components_.shape[0] != self.n_components:  # set_params after fitting
                raise ValueError(
                    f"n_components is {self.n_components} but the model has "
                    f"{self.components_.shape[0]} bases: fit it again, or clone it"
                )
            self._check_loss_statistics(
                np.shape(self.A_), self.n_features_in_, "the model", "fit it again, or clone it"
            )
            check_feature_count(X.shape[1], self.n_features_in_, type(self).__name__)
            self._check_box(max(X.shape[1], self.n_features_in_))
            if X.shape[1] > self.n_features_in_:
                self.resize_features(X.shape[1])
        step = X.shape[0] if self.batch_size is None else self.batch_size
        for start in range(0, X.shape[0], max(step, 1)):
            self._step(X[start : start + step])
        return self

    def transform(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """Coefficients ``H`` (``n_samples x r``) of ``X`` for the current bases.

        A wider ``X`` (terms the vocabulary appended since) is read with zero weight on the new
        terms, without changing the model; a narrower one raises ``ValueError``."""
        check_is_fitted(self, "components_")
        X = _as_float(X, type(self).__name__)
        self._check_loss(X)
        return self._codes(X, self._bases_for(X.shape[1]))

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """Dominant topic of each document (``argmax`` of its coefficients; -1 when all zero)."""
        H = self.transform(X)
        return np.where(H.max(axis=1) > 0, H.argmax(axis=1), -1)

    def replace_components(self, index: Sequence[int], bases: np.ndarray) -> ORNMF:
        """Replace the topics ``index`` by ``bases`` (one row per topic over the current terms,
        projected onto the feasible set) and forget their statistics, so that they learn from
        the next steps only.

        ``bases`` must have shape ``(len(index), n_features_in_)`` (a single index also takes a
        1-d row) and ``index`` distinct topics; anything else raises ``ValueError`` before
        anything changes (bases of another shape were reshaped, which scrambled the
        ``n_features x k`` layout of ``init``; a repeated index kept only its last row).

        Not part of Guan et al.'s algorithms: an extension for drifting streams. The averaged
        stochastic-approximation steps move a basis only by what its documents add to ``B_``,
        so a topic no document uses any more, or a second copy of another, stays as it is while
        new stories go unmodelled (the detector worker re-seeds such topics from documents the
        bases explain worst, :func:`sparsewatch.consumers.detector_core.reseed_topics`).
        """
        check_is_fitted(self, "components_")
        raw = np.asarray(index)
        if raw.ndim > 1 or (raw.size and raw.dtype.kind not in "iu"):
            raise ValueError(f"index must be a sequence of integer topic indices, got {index!r}")
        idx = raw.astype(np.int64).ravel()
        if not idx.size:  # nothing to replace
            if np.size(bases):
                raise ValueError("bases given, but no topic index to put them at")
            return self
        W = np.asarray(bases, dtype=np.float64)
        if W.ndim == 1 and idx.size == 1:
            W = W[None, :]
        expected = (idx.size, self.n_features_in_)
        if W.shape != expected:
            raise ValueError(
                f"bases have shape {np.shape(bases)}, expected (len(index), n_features_in_) = "
                f"{expected}: one row per topic"
            )
        if not (idx.min() >= 0 and idx.max() < self.n_components):
            raise ValueError(f"topic index out of range 0..{self.n_components - 1}: {idx}")
        if np.unique(idx).size != idx.size:
            raise ValueError(f"topic index has repeated topics: {idx}")
        if np.any(W < 0) or not np.all(np.isfinite(W)):
            raise ValueError("bases must be finite and non-negative")
        W = W / np.maximum(W.sum(axis=1, keepdims=True), 1e-300)
        self.components_[idx] = self._project(W, axis=1)
        self._forget(idx)
        return self

    def _forget(self, idx: np.ndarray) -> None:
        """Zero the statistics of topics ``idx`` (their rows and columns of ``A_``, columns of
        ``B_``)."""
        self.B_[:, idx] = 0.0
        self.A_[:, idx] = 0.0
        if self.beta_loss != _IS:
            self.A_[idx, :] = 0.0

    def resize_features(self, n_features: int, keep_index: np.ndarray | None = None) -> ORNMF:
        """Change the term dimension consistently in the bases and all statistics.

        Rows ``keep_index`` (old term indices, default all) move to positions
        ``0 .. len(keep_index) - 1`` in that order; the remaining rows up to ``n_features`` are
        new terms with zero weight. Columns of ``W`` that lost mass are rescaled to sum 1 (and
        projected when box bounds apply). Invalid ``keep_index`` or ``n_features`` raise
        ``ValueError`` before anything changes (:func:`check_keep_index`).
        """
        check_is_fitted(self, "components_")
        keep = check_keep_index(keep_index, self.n_features_in_, n_features)
        self._check_box(n_features)
        W = self._resize_rows(self.components_.T, keep, n_features)
        sums = W.sum(axis=0)
        W = np.where(sums > 0, W / np.where(sums > 0, sums, 1.0), 1.0 / n_features)
        if self._w_min() > 0.0 or self.w_max < 1.0:
            W = self._project(W)
        self.components_ = np.ascontiguousarray(W.T)
        for name in self._row_stats():
            arr = getattr(self, name)
            setattr(self, name, self._resize_rows(arr, keep, n_features, axis=arr.ndim - 2))
        self._resize_sq(keep, n_features)
        self.n_features_in_ = n_features
        return self

    def _resize_sq(self, keep: np.ndarray, n_features: int) -> None:
        """Drop the evicted terms' mass from ``sq_`` (``1/2 sum ||v||^2`` of stopping rule (9)):
        it kept it, so the objective after an eviction counted mass on terms the model no longer
        has, which the documents of later steps do not carry, and the relative test was looser.
        ``sq_terms_`` holds each term's part of ``sq_``."""
        terms = self._sq_terms()
        evicted = float(terms[_evicted(keep, terms.shape[0])].sum())  # exactly 0 if none
        self.sq_ = max(float(self.sq_) - evicted, 0.0)
        self.sq_terms_ = self._resize_rows(terms, keep, n_features)

    def objective(self, X: np.ndarray | sp.spmatrix) -> float:
        """Mean loss per sample of ``X`` with its optimal coefficients (no regularisers).

        ``ValueError`` for ``X`` without samples (no mean; it raised ``ZeroDivisionError``)."""
        X = _as_float(X, type(self).__name__)
        H = self.transform(X)
        if X.shape[0] == 0:
            raise ValueError("X has no samples: the mean loss per sample is undefined")
        return self._loss(X, H, self._bases_for(X.shape[1])) / X.shape[0]

    def get_state(self) -> dict[str, np.ndarray]:
        """Learned state as plain numeric arrays (``np.savez``-able, ``allow_pickle=False``)."""
        check_is_fitted(self, "components_")
        return {name: np.asarray(getattr(self, name)).copy() for name in self._state_names()}

    def set_state(self, state: dict[str, np.ndarray]) -> ORNMF:
        """Restore :meth:`get_state` output on an instance built with the same parameters.

        ``ValueError``, with nothing restored, for a state with missing entries (a ``KeyError``
        left a mix of both states).
        """
        optional = self._optional_state()
        missing = [n for n in self._state_names() if n not in state and n not in optional]
        if missing:
            raise ValueError(f"state is missing {missing}")
        if np.shape(state["components_"])[0] != self.n_components:
            raise ValueError(
                f"state has {np.shape(state['components_'])[0]} bases, but n_components is "
                f"{self.n_components}"
            )
        self._check_loss_statistics(
            np.shape(state["A_"]),
            np.shape(state["components_"])[1],
            "state",
            "restore it with that loss",
        )
        for name in self._state_names():
            if name not in state:
                continue
            value = np.array(state[name])
            setattr(self, name, value if value.ndim else value.item())
        for name in optional:
            if name not in state:
                setattr(self, name, optional[name]())
        return self

    def _optional_state(self) -> dict[str, Callable[[], np.ndarray]]:
        """State entries that older checkpoints lack, with the default they restore (called
        after the other entries are set): no per-term record of ``sq_`` (an eviction then
        leaves the mass recorded before the restore in ``sq_``, as before)."""
        return {"sq_terms_": lambda: np.zeros(int(self.n_features_in_))}

    def _check_loss_statistics(
        self, shape_a: tuple[int, ...], n_features: int, owner: str, advice: str
    ) -> None:
        """``ValueError``, before anything changes, when the statistic ``A_`` of ``owner`` (the
        fitted model, a state to restore; ``n_features`` terms) has the shape of the other
        ``beta_loss``: ``r x r`` under the Frobenius loss, ``m x r`` under Itakura-Saito (a
        ``beta_loss`` changed with ``set_params`` after fitting failed inside numpy at the next
        step). With as many terms as bases the shapes agree and nothing is checked."""
        r = self.n_components
        by_shape: dict[tuple[int, ...], str] = (
            {(r, r): "frobenius", (n_features, r): _IS} if n_features != r else {}
        )
        fitted = by_shape.get(tuple(shape_a), self.beta_loss)
        if fitted != self.beta_loss:
            raise ValueError(
                f"beta_loss is {self.beta_loss!r} but {owner} was fitted with {fitted!r}: {advice}"
            )

    # ------------------------------------------------------------------ internals
    def _state_names(self) -> list[str]:
        return [
            "components_",
            "A_",
            "B_",
            "sq_",
            "sq_terms_",
            "n_samples_seen_",
            "n_steps_",
            "n_features_in_",
        ]

    def _row_stats(self) -> list[str]:
        """Statistics with one row per term (resized with the vocabulary)."""
        return ["B_", "A_"] if self.beta_loss == _IS else ["B_"]

    def _reset(self) -> None:
        for name in self._state_names():
            if hasattr(self, name):
                delattr(self, name)

    def _check_loss(self, X: np.ndarray | sp.csr_matrix) -> None:
        if self.beta_loss not in ("frobenius", _IS):
            raise ValueError(f"unknown beta_loss {self.beta_loss!r}")
        if self.beta_loss == _IS and (sp.issparse(X) or np.any(X <= 0)):
            raise ValueError("Itakura-Saito OR-NMF needs dense, strictly positive data")

    def _check_params(self) -> None:
        """``ValueError`` before any state changes for a ``batch_size`` below 1 (0 ran one empty
        step per sample, so nothing of ``X`` was learned), a ``horizon`` below 1 (the step size
        raised ``ZeroDivisionError`` after the chunk was accumulated) or an unknown
        ``nnls_method`` (it ran projected gradient)."""
        batch = self.batch_size
        if batch is not None and not (isinstance(batch, numbers.Integral) and batch >= 1):
            raise ValueError(f"batch_size must be None or an integer >= 1, got {batch!r}")
        if self.nnls_method not in ("bpp", "pgd"):
            raise ValueError(f"nnls_method must be 'bpp' or 'pgd', got {self.nnls_method!r}")
        at_least = {
            "n_components": 1,  # 0: an empty model
            "max_inner_iter": 1,  # 0: the bases never moved
            "is_inner_iter": 1,
            "max_epochs": 1,  # 0: fit returned an unfitted model
            "horizon": 1,  # 0: ZeroDivisionError after the chunk was counted; 2.5: theta modulo 2.5
        }
        for name, low in at_least.items():
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("tau", "alpha_h_l1", "alpha_h_l2", "alpha_W"):
            value = getattr(self, name)
            # (not value < inf: NaN fails it too)
            if not isinstance(value, numbers.Real) or value < 0 or not value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.h_max is not None and not self.h_max > 0:  # <= 0 gave negative coefficients
            raise ValueError(f"h_max must be None or > 0, got {self.h_max!r}")
        self._check_basis_bounds()

    def _check_basis_bounds(self) -> None:
        """``ValueError`` for box bounds on the bases (Section III) outside the feasible set's
        definition: a ``w_min`` that is not ``None`` or a number in ``[0, 1]`` (a negative one
        made the box projection return negative bases, NaN gave NaN bases), ``w_min <= 0``
        under Itakura-Saito (the majorised objective ``Q / W`` needs ``W > 0``), a ``w_max``
        that is not a number ``> 0`` (NaN gave NaN bases) or below ``w_min``."""
        w_min = self.w_min
        if w_min is not None and (not isinstance(w_min, numbers.Real) or not 0 <= w_min <= 1):
            raise ValueError(f"w_min must be None or a finite number in [0, 1], got {w_min!r}")
        if self.beta_loss == _IS and not self._w_min() > 0:
            raise ValueError(f"w_min must be > 0 for Itakura-Saito, got {w_min!r}")
        if not isinstance(self.w_max, numbers.Real) or not self.w_max > 0:
            raise ValueError(f"w_max must be a number > 0, got {self.w_max!r}")
        if self.w_max < self._w_min():
            raise ValueError(f"w_max = {self.w_max!r} is below w_min = {self._w_min()!r}")

    def _w_min(self) -> float:
        if self.w_min is not None:
            return self.w_min
        return 1e-9 if self.beta_loss == _IS else 0.0

    def _plain_simplex(self) -> bool:
        return self._w_min() <= 0.0 and self.w_max >= 1.0

    def _project(self, W: np.ndarray, axis: int = 0) -> np.ndarray:
        """Columns (``axis=0``, ``m x r``) or rows (``axis=1``, ``r x m``) onto the feasible set."""
        if self._plain_simplex():
            return project_simplex(W, axis=axis, method="pivot")
        return project_simplex_box(W, self._w_min(), self.w_max, axis=axis)

    def _check_init(self, n_features: int) -> None:
        """``ValueError`` for an unknown ``init`` or an array not ``n_features x n_components``
        (it was taken as is: the first step failed in numpy with the bases already set) or
        with NaN or infinite entries (the bases were NaN from then on)."""
        if isinstance(self.init, np.ndarray):
            shape = (n_features, self.n_components)
            if self.init.shape != shape:
                raise ValueError(
                    f"init has shape {self.init.shape}, expected (n_features, n_components) = "
                    f"{shape}"
                )
            if not np.all(np.isfinite(self.init)):  # NaN bases for good
                raise ValueError("init must be finite: it has NaN or infinite entries")
        elif self.init not in ("data", "random"):
            raise ValueError(f"unknown init {self.init!r}")

    def _check_box(self, n_features: int) -> None:
        """``ValueError`` when no basis over ``n_features`` terms can give each at least
        ``w_min`` (the projection said only "empty set" once a vocabulary grew that far), or at
        most ``w_max`` (the same "empty set", from the first step on)."""
        if self._w_min() * n_features > 1.0:
            raise ValueError(
                f"w_min = {self._w_min():g} for {n_features} terms: the bases sum to 1, so w_min "
                f"must be at most 1 / n_features = {1.0 / n_features:.3g}"
            )
        if self.w_max * n_features < 1.0:
            raise ValueError(
                f"w_max = {self.w_max:g} for {n_features} terms: the bases sum to 1, so w_max "
                f"must be at least 1 / n_features = {1.0 / n_features:.3g}"
            )

    def _initialise(self, X: np.ndarray | sp.csr_matrix) -> None:
        m, r = X.shape[1], self.n_components
        self._check_init(m)
        self._check_box(m)
        rng = check_random_state(self.random_state)
        if isinstance(self.init, np.ndarray):
            W = np.array(self.init, dtype=np.float64)
        elif self.init == "data":
            rows = rng.choice(X.shape[0], size=r, replace=X.shape[0] < r)
            W = _dense(X[rows]).T.copy()
            W /= np.maximum(W.sum(axis=0), 1e-300)
            W += rng.random((m, r)) * (0.01 / m)
        else:
            W = rng.random((m, r))
        W /= np.maximum(W.sum(axis=0), 1e-300)
        self.components_ = np.ascontiguousarray(self._project(W).T)
        self.n_features_in_ = m
        self.n_steps_ = 0
        self.n_samples_seen_ = 0
        self.sq_ = 0.0
        self.sq_terms_ = np.zeros(m)
        shape_a = (m, r) if self.beta_loss == _IS else (r, r)
        self.A_ = np.zeros(shape_a)
        self.B_ = np.zeros((m, r))

    def _bases_for(self, n_features: int) -> np.ndarray:
        """Bases (``n_features x r``) for ``X`` of ``n_features`` terms, without changing the model.

        New terms get zero weight, projected onto the box when the feasible set has one: the
        bases :meth:`resize_features` would make. Under Itakura-Saito the box is ``w >= w_min >
        0``; zero rows gave ``v / (W h) = inf`` and NaN coefficients.
        """
        W = self.components_.T
        check_feature_count(n_features, W.shape[0], type(self).__name__)
        if n_features > W.shape[0]:
            W = np.vstack([W, np.zeros((n_features - W.shape[0], W.shape[1]))])
            if not self._plain_simplex():
                W = self._project(W)
        return W

    @staticmethod
    def _resize_rows(arr: np.ndarray, keep: np.ndarray, n: int, axis: int = 0) -> np.ndarray:
        arr = np.moveaxis(arr, axis, 0)
        out = np.zeros((n, *arr.shape[1:]))
        out[: keep.size] = arr[keep]
        return np.moveaxis(out, 0, axis)

    def _codes(self, X: np.ndarray | sp.csr_matrix, W: np.ndarray) -> np.ndarray:
        if self.beta_loss == _IS:
            return self._codes_is(X, W)
        H = np.empty((X.shape[0], W.shape[1]))
        for lo in range(0, X.shape[0], COLUMN_BLOCK):  # a block of samples at a time
            WtV = np.asarray(X[lo : lo + COLUMN_BLOCK] @ W).T
            H[lo : lo + COLUMN_BLOCK] = solve_nnls(
                W, WtV, self.alpha_h_l1, self.alpha_h_l2, upper=self.h_max, method=self.nnls_method
            ).T
        return H

    def _codes_is(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        """Coefficients under Itakura-Saito: :meth:`_codes_is_scaled`, scaled back."""
        _, H, scale = self._codes_is_scaled(X, W)
        return H * scale[:, None]

    def _codes_is_scaled(
        self, X: np.ndarray, W: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Multiplicative updates for ``h`` under Itakura-Saito (Fevotte et al. 2009), W fixed,
        on each document scaled to a largest entry of 1: returns the scaled documents
        ``X / c``, their coefficients ``H / c`` and the scales ``c``.

        ``d(c v | c y) = d(v | y)``, so with the l1 weight times ``c``, the ridge weight times
        ``c^2`` and ``h_max / c`` these are the iterates on ``X`` itself (from the same start,
        ``mean(X) / mean column sum of W``, unless that start over- or underflows in the
        scaled units; then the document's own mean), without ``y^2`` under- or overflowing
        (documents of entries ``1e-170`` gave NaN codes). No samples, no coefficients (the
        start ``mean(X)`` warned "Mean of empty slice")."""
        r = W.shape[1]
        if X.shape[0] == 0:
            return X, np.zeros((0, r)), np.ones(0)
        scale = X.max(axis=1)
        Xs = X / scale[:, None]
        mass = max(W.sum(axis=0).mean(), 1e-300)
        with np.errstate(over="ignore", under="ignore"):
            start = X.mean() / scale / mass
        start = np.where(np.isfinite(start) & (start > 0), start, Xs.mean(axis=1) / mass)
        H = np.repeat(start[:, None], r, axis=1)
        l1 = (self.alpha_h_l1 * scale)[:, None]
        with np.errstate(over="ignore", under="ignore"):  # inf: h at its lower clip
            l2 = (self.alpha_h_l2 * scale**2)[:, None]
        hi = np.inf if self.h_max is None else (self.h_max / scale)[:, None]
        for _ in range(self.is_inner_iter):
            Y = H @ W.T
            H *= (((Xs / Y) / Y) @ W) / ((1.0 / Y) @ W + l1 + l2 * H)
            np.clip(H, 1e-300, hi, out=H)
        return Xs, H, scale

    def _loss(self, X: np.ndarray | sp.csr_matrix, H: np.ndarray, W: np.ndarray) -> float:
        """Loss of ``X`` for coefficients ``H`` and bases ``W``. Frobenius:
        ``1/2 (||X||^2 - 2 sum((X W) * H) + sum((W^T W) * (H^T H)))``; for sparse ``X`` the
        cross term is taken from ``X W`` (``n x r``), never from the dense ``n x m`` product
        ``H W^T`` (200,000 documents over 100,000 terms: 160 GB)."""
        if self.beta_loss == _IS:
            R = X / (H @ W.T)
            return float(np.sum(R - np.log(R) - 1.0))
        if isinstance(X, np.ndarray):
            sq = float(np.sum(X * X))
            cross = float(np.sum(X * (H @ W.T)))
        else:
            sq = float(np.dot(X.data, X.data))
            cross = float(np.sum(np.asarray(X @ W) * H))
        return 0.5 * (sq - 2.0 * cross + float(np.sum((H.T @ H) * (W.T @ W))))

    def _chunk_stats(
        self, X: np.ndarray | sp.csr_matrix, W: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """Contribution of one chunk (coefficients for the bases ``W``) to ``A``, ``B`` and
        ``1/2 sum ||v||^2`` (Algorithm 1). Under Itakura-Saito ``P`` and ``Q`` are invariant
        under scaling a document and its coefficients, so they are taken from the scaled ones
        (:meth:`_codes_is_scaled`)."""
        if self.beta_loss == _IS:
            Xs, H, _ = self._codes_is_scaled(X, W)
            Y = H @ W.T
            return (1.0 / Y).T @ H, W**2 * (((Xs / Y) / Y).T @ H), 0.0
        H = self._codes(X, W)
        data = X.data if sp.issparse(X) else X.ravel()
        return H.T @ H, np.asarray(X.T @ H), 0.5 * float(np.dot(data, data))

    def _accumulate(self, A: np.ndarray, B: np.ndarray, sq: float, n: int) -> None:
        """Add one step's statistics; ``ValueError`` with nothing changed when the sums are not
        finite (:func:`_check_statistics`)."""
        A_sum, B_sum, sq_sum = self.A_ + A, self.B_ + B, self.sq_ + sq
        _check_statistics(A_sum, B_sum, sq_sum)
        self.A_, self.B_, self.sq_ = A_sum, B_sum, sq_sum
        self.n_samples_seen_ += n

    def _stat_count(self) -> int:
        return self.n_samples_seen_

    def _add_term_sq(self, out: np.ndarray, X: np.ndarray | sp.csr_matrix) -> None:
        """Add each term's part of the chunk's ``1/2 sum ||v||^2`` to ``out``, in place (nothing
        under Itakura-Saito, whose ``sq_`` is 0); a few stored entries cost what they are, not
        ``O(n_features)`` (the one-sample steps of OR-NMF)."""
        if self.beta_loss == _IS:
            return
        if isinstance(X, np.ndarray):
            out += 0.5 * np.einsum("ij,ij->j", X, X)
        elif 16 * X.nnz < out.size:
            np.add.at(out, X.indices, 0.5 * X.data * X.data)
        else:
            out += 0.5 * np.bincount(X.indices, weights=X.data * X.data, minlength=out.size)

    def _sq_terms(self) -> np.ndarray:
        """Each term's part of ``sq_`` (summed over the ring for MOR-NMF)."""
        return self.sq_terms_

    def _accumulate_sq_terms(self, X: np.ndarray | sp.csr_matrix) -> None:
        self._add_term_sq(self.sq_terms_, X)

    def _step(self, X: np.ndarray | sp.csr_matrix) -> None:
        self._accumulate(*self._chunk_stats(X, self.components_.T), X.shape[0])
        self._accumulate_sq_terms(X)
        self.n_steps_ += 1
        if self.beta_loss == _IS:
            self.components_ = self._update_bases_is()
        else:
            self.components_ = self._update_bases_frobenius()

    def _theta(self) -> float:
        return theta_schedule(self.n_steps_, self.horizon)

    def _grad_obj(self, W: np.ndarray, n: int) -> tuple[np.ndarray, float]:
        """Gradient and value of ``f_t`` (Frobenius loss)."""
        WA = W @ self.A_
        grad = (WA - self.B_) / n
        value = (0.5 * float(np.sum(W * WA)) - float(np.sum(W * self.B_)) + self.sq_) / n
        if self.alpha_W:
            grad = grad + self.alpha_W * W
            value += 0.5 * self.alpha_W * float(np.sum(W * W))
        return grad, value

    def _update_bases(self, W: np.ndarray) -> np.ndarray:
        """Algorithm 2 (Frobenius loss) as a plain float64 loop on ``W`` (``m x r``),
        :func:`~sparsewatch.models.robust_sa.robust_sa` on :meth:`_grad_obj`: the reference of
        the fast path :meth:`_update_bases_frobenius` (tested equal)."""
        n = max(self._stat_count(), 1)
        return robust_sa(
            W,
            lambda V: self._grad_obj(V, n),
            self._project,
            theta=self._theta(),
            tau=self.tau,
            max_iter=self.max_inner_iter,
        )

    def _update_bases_frobenius(self) -> np.ndarray:
        """Algorithm 2 (Frobenius loss) on ``W^T`` (``r x m``),
        :func:`~sparsewatch.models.robust_sa.robust_sa_frobenius`; returns the averaged bases."""
        return robust_sa_frobenius(
            self.components_,
            self.A_,
            self.B_,
            self.sq_,
            max(self._stat_count(), 1),
            alpha_W=self.alpha_W,
            theta=self._theta(),
            tau=self.tau,
            max_iter=self.max_inner_iter,
            project_rows=lambda V: self._project(V, axis=1),
            float32=self._plain_simplex(),
        )

    def _update_bases_is(self) -> np.ndarray:
        """OR-NMF-IS bases (``r x m``): the exact minimiser of the majorised objective
        ``(1/n) sum(P W + Q / W) + alpha_W/2 ||W||^2`` (``P = A_``, ``Q = B_``) over the
        feasible set, :func:`_is_majoriser_minimum` (module docstring)."""
        n = max(self._stat_count(), 1)
        W = _is_majoriser_minimum(
            self.A_,
            self.B_,
            n * self.alpha_W,
            self._w_min(),
            min(self.w_max, 1.0),
            self.components_.T,
        )
        return np.ascontiguousarray(W.T)


class WORNMF(ORNMF):
    """WOR-NMF: the mini-batch (chunk) form of OR-NMF, one step per ``batch_size`` samples.

    Same algorithm as :class:`ORNMF` (Algorithms 1-2 with problem (27) for the chunk's
    coefficients); only the default step is a window of 256 samples instead of one.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.nmf_online import WORNMF
    >>> planted = np.repeat([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], 20, axis=0)
    >>> X = np.random.default_rng(0).random((40, 6)) * planted  # documents x terms
    >>> model = WORNMF(n_components=2, batch_size=20, random_state=0).fit(X)
    >>> model.n_steps_  # two chunks of 20 documents
    2
    >>> model.predict(X[[0, 39]])
    array([0, 1])
    """

    def __init__(
        self,
        n_components: int = 10,
        *,
        batch_size: int | None = 256,
        horizon: int = 200,
        tau: float = 1e-3,
        max_inner_iter: int = 50,
        alpha_h_l1: float = 0.0,
        alpha_h_l2: float = 0.0,
        alpha_W: float = 0.0,
        h_max: float | None = None,
        w_min: float | None = None,
        w_max: float = 1.0,
        beta_loss: str = "frobenius",
        is_inner_iter: int = 50,
        nnls_method: str = "bpp",
        init: str | np.ndarray = "data",
        max_epochs: int = 1,
        random_state: int | None = None,
    ) -> None:
        super().__init__(
            n_components,
            batch_size=batch_size,
            horizon=horizon,
            tau=tau,
            max_inner_iter=max_inner_iter,
            alpha_h_l1=alpha_h_l1,
            alpha_h_l2=alpha_h_l2,
            alpha_W=alpha_W,
            h_max=h_max,
            w_min=w_min,
            w_max=w_max,
            beta_loss=beta_loss,
            is_inner_iter=is_inner_iter,
            nnls_method=nnls_method,
            init=init,
            max_epochs=max_epochs,
            random_state=random_state,
        )


class MORNMF(ORNMF):
    """MOR-NMF (Algorithm 3): OR-NMF whose statistics cover only the last ``buffer_size`` steps.

    A ring buffer holds each recent step's contribution to ``A`` and ``B`` (and its sample
    count and per-term squared mass); ``A_t``/``B_t`` are the sums over the ring, so memory is
    ``buffer_size * (r^2 + n_features * (r + 1))`` numbers and time per step is constant,
    whatever the length of the stream. ``batch_size=None`` (default) makes each ``partial_fit``
    call (one window of the pipeline) one step and one buffer slot. Default horizon for an unbounded
    stream: ``T = 200`` steps with warm restarts of ``theta_t`` (module docstring: the paper's
    schedule would reach 0 at ``t = T + 1`` and freeze the bases).

    Examples
    --------
    Four windows of 10 documents, one step each; the ring holds the last three:

    >>> import numpy as np
    >>> from sparsewatch.models.nmf_online import MORNMF
    >>> planted = np.repeat([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], 20, axis=0)
    >>> X = np.random.default_rng(0).random((40, 6)) * planted  # documents x terms
    >>> model = MORNMF(n_components=2, buffer_size=3, random_state=0)
    >>> for start in range(0, 40, 10):
    ...     model = model.partial_fit(X[start : start + 10])
    >>> model.n_steps_, model.n_samples_seen_, model.ring_n_
    (4, 40, array([10, 10, 10]))
    >>> model.predict(X[[0, 39]])
    array([0, 1])
    """

    # learned state (the first step)
    ring_sq_: np.ndarray
    ring_sq_terms_: np.ndarray

    def __init__(
        self,
        n_components: int = 10,
        *,
        buffer_size: int = 10,
        batch_size: int | None = None,
        horizon: int = 200,
        tau: float = 1e-3,
        max_inner_iter: int = 50,
        alpha_h_l1: float = 0.0,
        alpha_h_l2: float = 0.0,
        alpha_W: float = 0.0,
        h_max: float | None = None,
        w_min: float | None = None,
        w_max: float = 1.0,
        beta_loss: str = "frobenius",
        is_inner_iter: int = 50,
        nnls_method: str = "bpp",
        init: str | np.ndarray = "data",
        max_epochs: int = 1,
        random_state: int | None = None,
    ) -> None:
        super().__init__(
            n_components,
            batch_size=batch_size,
            horizon=horizon,
            tau=tau,
            max_inner_iter=max_inner_iter,
            alpha_h_l1=alpha_h_l1,
            alpha_h_l2=alpha_h_l2,
            alpha_W=alpha_W,
            h_max=h_max,
            w_min=w_min,
            w_max=w_max,
            beta_loss=beta_loss,
            is_inner_iter=is_inner_iter,
            nnls_method=nnls_method,
            init=init,
            max_epochs=max_epochs,
            random_state=random_state,
        )
        self.buffer_size = buffer_size

    def _check_params(self) -> None:
        """Also ``ValueError`` for a ``buffer_size`` below 1 (it failed with ``IndexError``)."""
        super()._check_params()
        if not (isinstance(self.buffer_size, numbers.Integral) and self.buffer_size >= 1):
            raise ValueError(f"buffer_size must be an integer >= 1, got {self.buffer_size!r}")

    def partial_fit(self, X: np.ndarray | sp.spmatrix, y: None = None) -> MORNMF:
        """Algorithm 3's step; ``ValueError`` before any state changes when ``buffer_size`` was
        changed (``set_params``) after the ring was built (the ring position ran modulo the new
        size over the old ring: slots past it never evicted, or an index past it): ``fit`` starts
        over with the new size."""
        if hasattr(self, "ring_n_") and self.ring_n_.shape != (self.buffer_size,):
            raise ValueError(
                f"buffer_size is {self.buffer_size} but the ring has {self.ring_n_.shape[0]} "
                "slots: call fit to start over with the new size"
            )
        return super().partial_fit(X, y)

    def set_state(self, state: dict[str, np.ndarray]) -> MORNMF:
        """Restore :meth:`get_state` output; also ``ValueError``, with nothing restored, when the
        ring of ``state`` is not ``buffer_size`` slots long (the ring position runs modulo
        ``buffer_size``: the slots past it were never evicted and kept their statistics)."""
        if "ring_n_" in state and np.shape(state["ring_n_"]) != (self.buffer_size,):
            raise ValueError(
                f"state has a ring of shape {np.shape(state['ring_n_'])}, but buffer_size is "
                f"{self.buffer_size}"
            )
        return super().set_state(state)

    def _state_names(self) -> list[str]:
        return [
            *[name for name in super()._state_names() if name != "sq_terms_"],
            "ring_A_",
            "ring_B_",
            "ring_sq_",
            "ring_sq_terms_",
            "ring_n_",
            "ring_pos_",
        ]

    def _optional_state(self) -> dict[str, Callable[[], np.ndarray]]:
        return {"ring_sq_terms_": lambda: np.zeros((self.buffer_size, int(self.n_features_in_)))}

    def _sq_terms(self) -> np.ndarray:
        return self.ring_sq_terms_.sum(axis=0)

    def _accumulate_sq_terms(self, X: np.ndarray | sp.csr_matrix) -> None:
        """Into the slot :meth:`_accumulate` just wrote (the one before ``ring_pos_``)."""
        slot = self.ring_sq_terms_[(self.ring_pos_ - 1) % self.buffer_size]
        slot[:] = 0.0
        self._add_term_sq(slot, X)

    def _resize_sq(self, keep: np.ndarray, n_features: int) -> None:
        """Per slot: each slot's ``ring_sq_`` loses its evicted terms' mass (it kept it, and
        ``sq_``, their sum, is in stopping rule (9))."""
        slots = self.ring_sq_terms_
        evicted = slots[:, _evicted(keep, slots.shape[1])].sum(axis=1)
        self.ring_sq_ = np.maximum(self.ring_sq_ - evicted, 0.0)
        self.ring_sq_terms_ = self._resize_rows(slots, keep, n_features, axis=1)
        self.sq_ = float(self.ring_sq_.sum())

    def _forget(self, idx: np.ndarray) -> None:
        super()._forget(idx)
        self.ring_B_[:, :, idx] = 0.0
        self.ring_A_[:, :, idx] = 0.0
        if self.beta_loss != _IS:
            self.ring_A_[:, idx, :] = 0.0

    def _row_stats(self) -> list[str]:
        extra = ["ring_B_", "ring_A_"] if self.beta_loss == _IS else ["ring_B_"]
        return [*super()._row_stats(), *extra]

    def _initialise(self, X: np.ndarray | sp.csr_matrix) -> None:
        super()._initialise(X)
        slots = self.buffer_size
        self.ring_A_ = np.zeros((slots, *self.A_.shape))
        self.ring_B_ = np.zeros((slots, *self.B_.shape))
        self.ring_sq_ = np.zeros(slots)
        self.ring_sq_terms_ = np.zeros((slots, self.B_.shape[0]))
        del self.sq_terms_  # per slot instead
        self.ring_n_ = np.zeros(slots, dtype=np.int64)
        self.ring_pos_ = 0

    def _accumulate(self, A: np.ndarray, B: np.ndarray, sq: float, n: int) -> None:
        """Replace the oldest slot by this step; constant work per step.

        ``A_`` (``r x r``) and the scalars are re-summed over the ring. ``B_`` (``n_features x
        r``, the large one) is updated by the difference of the new and the evicted slot, and
        re-summed exactly once per turn of the ring, so rounding cannot accumulate. The new sums
        are checked finite (:func:`_check_statistics`) before anything changes.
        """
        pos = self.ring_pos_
        ring_A, ring_sq = self.ring_A_.copy(), self.ring_sq_.copy()
        ring_A[pos], ring_sq[pos] = A, sq
        B_sum = self.B_ + B
        B_sum -= self.ring_B_[pos]
        A_sum, sq_sum = ring_A.sum(axis=0), float(ring_sq.sum())
        _check_statistics(A_sum, B_sum, sq_sum)  # before anything changes
        self.ring_A_, self.ring_sq_ = ring_A, ring_sq
        self.A_, self.B_, self.sq_ = A_sum, B_sum, sq_sum
        self.ring_B_[pos] = B
        self.ring_n_[pos] = n
        self.ring_pos_ = (pos + 1) % self.buffer_size
        if self.ring_pos_ == 0:
            self.B_ = self.ring_B_.sum(axis=0)
        self.n_samples_seen_ += n

    def _stat_count(self) -> int:
        return int(self.ring_n_.sum())
