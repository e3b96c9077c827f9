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

from typing import TypeAlias

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sparsewatch.models._validation import is_sparse
from sparsewatch.models.projections import project_l1_ball_nonneg, project_l1_ball_nonneg_csc
from sparsewatch.models.text_features import remap_rows

__all__ = ["OIADMM", "l1_dictionary_update", "psi_max"]

# Atoms up to which Psi_max comes from a dense eigen-decomposition.
_DENSE_EIG_MAX = 200


def psi_max(X: sp.spmatrix | np.ndarray) -> float:
    """Largest eigenvalue of ``X X^T`` (``X`` is ``k x n``).

    Dense ``eigvalsh`` up to :data:`_DENSE_EIG_MAX` atoms; beyond, Lanczos (ARPACK) on the sparse
    Gram matrix from a fixed positive start (deterministic; the Gram matrix is non-negative for
    non-negative codes, so the Perron vector is not orthogonal to it): a full eigen-decomposition
    of a 1,500-atom Gram matrix cost half a second per window, a fifth of the window.
    """
    G = X @ X.T
    if not G.shape[0]:
        return 0.0
    if sp.issparse(G) and G.shape[0] > _DENSE_EIG_MAX:
        G = sp.csr_matrix(G, dtype=np.float64)
        if G.nnz == 0:
            return 0.0
        try:
            top = spla.eigsh(G, k=1, which="LA", v0=np.ones(G.shape[0]), tol=0.0)[0]
            return float(top[0])
        except spla.ArpackNoConvergence:
            pass
    G = G.toarray() if sp.issparse(G) else np.asarray(G)
    return float(np.linalg.eigvalsh(G.astype(np.float64))[-1])


# Entries of an m x block slab of R X^T formed at once in the dictionary update (~2M).
_SLAB_ENTRIES = 1 << 21
# Stored fraction of the dual from which a step works on dense arrays (the dual's support is the
# union of every window's, so it fills up as the stream goes on). Measured on recorded steps of
# the Reuters warm-up (8,500 terms, 200 atoms): the sparse step is 3x faster on an empty dual,
# level with the dense one at 4-5%, 1.3-1.6x slower from 13% on (and was 0.25 until the dense
# step's products became sparse: the detector's Reuters warm-up 14 s -> 9.5 s, AUC unchanged).
_DENSE_DUAL_FRACTION = 0.05

Dual: TypeAlias = sp.csc_matrix | np.ndarray
# A dense array, or CSC (short atoms: a grown dictionary of 1,500 atoms over 4,000 terms is 5-10%
# non-zero, and every dense m x k copy in a step costs tens of megabytes).
Dictionary: TypeAlias = np.ndarray | sp.csc_matrix


class _Window:
    """A window ``P`` (``m x n``) with its codes ``X`` (``k x n``) in the layouts of the dense step,
    converted once: the batch update (:func:`l1_dictionary_update`) takes all its steps on one
    window, and each step converted both again (a sixth of a step on the detector's warm-up
    windows). ``product`` is ``(A X)^T`` of the dictionary ``A`` the last step returned (the
    next step's ``A_t X``; only a dense ``A``), kept by the batch update only: one more ``n x m``
    array between its steps, none more at a step's peak."""

    def __init__(
        self,
        P: sp.spmatrix | np.ndarray,
        X: sp.spmatrix | np.ndarray,
        dt: np.dtype,
        keep_product: bool = False,
    ) -> None:
        self.Xr = sp.csr_matrix(X, dtype=dt)  # k x n: rows of atoms, for R X^T a slab at a time
        self.XT = self.Xr.T.tocsr()  # n x k: rows of documents, for (A X)^T
        # P^T's entries, no duplicates (each is added once to Z^T); from CSR, not through COO,
        # whose canonical form sorted the entries again (a tenth of a step on warm-up windows)
        PT = sp.csr_matrix(P.T, dtype=dt, copy=True)
        PT.sum_duplicates()
        self.p_rows = np.repeat(np.arange(PT.shape[0]), np.diff(PT.indptr))
        self.p_cols, self.p_data = PT.indices, PT.data
        self.product: tuple[np.ndarray, np.ndarray] | None = None
        self.keep_product = keep_product

    def product_of(self, A: Dictionary) -> np.ndarray | None:
        """The kept ``(A X)^T`` if it is of this very ``A`` (the last step's result), else
        ``None``."""
        if self.product is not None and self.product[0] is A:
            return self.product[1]
        return None


def _oiadmm_step(
    P: sp.spmatrix,
    X: sp.spmatrix,
    A: Dictionary,
    Delta: Dual,
    beta: float,
    tau: float,
    over_weight: float = 1.0,
    window: _Window | None = None,
) -> tuple[Dictionary, Dual, float]:
    """One step of Algorithm 2; returns ``(A_{t+1}, Delta_{t+1}, ||P - A_{t+1} X - E_{t+1}||_F)``,
    ``A_{t+1}`` in ``A``'s layout (dense, or CSC). ``window``: ``P`` and ``X`` as converted for
    earlier steps on the same window (:class:`_Window`).

    Using ``P - A_{t+1} X - E = R - Delta/beta - (A_{t+1} - A_t) X`` with ``R = Z - E_{t+1}``, the
    dual update is ``Delta_{t+1} = beta (R - (A_{t+1} - A_t) X)``. A sparse dual (the first
    windows) gives a sparse step, a dual at least :data:`_DENSE_DUAL_FRACTION` full a dense one
    (and a dense dual, which stays dense).
    """
    m, n = P.shape
    if isinstance(Delta, np.ndarray) or Delta.nnz >= _DENSE_DUAL_FRACTION * m * n:
        window = window if window is not None else _Window(P, X, A.dtype)
        return _oiadmm_step_dense(window, A, Delta, beta, tau, over_weight)
    return _oiadmm_step_sparse(P, X, A, Delta, beta, tau, over_weight)


def _oiadmm_step_sparse(
    P: sp.spmatrix,
    X: sp.spmatrix,
    A: Dictionary,
    Delta: sp.spmatrix,
    beta: float,
    tau: float,
    over_weight: float,
) -> tuple[Dictionary, sp.csc_matrix, float]:
    """:func:`_oiadmm_step` on sparse matrices.

    Every matrix lives on the union of the supports of ``P``, ``A_t X_t``, ``A_{t+1} X_t`` and
    ``Delta_t`` (elsewhere ``Z = 0`` so nothing moves); ``A`` is updated on its stored entries
    plus those of ``R X^T``.
    """
    dt = A.dtype
    Xc = sp.csr_matrix(X, dtype=dt)
    As = sp.csc_matrix(A)
    Z = sp.csc_matrix(P, dtype=dt) - (As @ Xc) + Delta * dt.type(1.0 / beta)
    R = sp.csc_matrix(Z)
    np.clip(R.data, -over_weight / beta, 1.0 / beta, out=R.data)  # R = Z - E_{t+1}
    # A_{t+1} = Pi_A(A_t + tau R X^T), a block of atoms at a time: R X^T is nearly dense (m x k)
    # and the projection acts column by column, so slabs of m x ``step`` bound the temporaries.
    slabs, changes = [], []
    step = max(1, _SLAB_ENTRIES // max(A.shape[0], 1))
    for j0 in range(0, A.shape[1], step):
        G = R @ Xc[j0 : j0 + step].T
        G.data *= dt.type(tau)
        old = As[:, j0 : j0 + step]
        new = project_l1_ball_nonneg_csc(old + G)
        new.eliminate_zeros()
        slabs.append(new)
        changes.append(new - old)
    A_new = sp.hstack(slabs, format="csc", dtype=dt) if slabs else sp.csc_matrix(A.shape, dtype=dt)
    dAX = sp.hstack(changes, format="csr") @ Xc if changes else sp.csr_matrix(R.shape, dtype=dt)
    resid = R - Delta * dt.type(1.0 / beta) - dAX
    Delta_new = sp.csc_matrix((R - dAX) * dt.type(beta), dtype=dt)
    Delta_new.eliminate_zeros()
    A_out = A_new if sp.issparse(A) else A_new.toarray()
    return A_out, Delta_new, float(sp.linalg.norm(resid))


def _oiadmm_step_dense(
    window: _Window,
    A: Dictionary,
    Delta: Dual,
    beta: float,
    tau: float,
    over_weight: float,
) -> tuple[Dictionary, np.ndarray, float]:
    """:func:`_oiadmm_step` on dense ``n x m`` arrays (the transposes of ``Z``, ``R``, ``Delta``).

    Documents are rows, so every product is a sparse matrix (``X`` or ``X^T``) times a
    C-contiguous dense one, except ``A X`` for a CSC ``A``: the sparse product ``X^T A^T`` where
    :func:`_sparse_products` finds it cheaper (short atoms, large vocabularies). Five ``n x m``
    arrays at most, plus, for a dense ``A``, two ``k x m`` ones (a CSC ``A`` stays sparse: dense
    only a slab of atoms at a time). Returns the dual as the ``m x n`` Fortran-ordered view of its
    ``n x m`` transpose.
    """
    D_T = Delta.T if isinstance(Delta, np.ndarray) else Delta.T.toarray()
    if isinstance(A, np.ndarray):
        A_new, R_T, dAX_T = _dense_dictionary_update(window, A, D_T, beta, tau, over_weight)
    else:
        A_new, R_T, dAX_T = _csc_dictionary_update(window, A, D_T, beta, tau, over_weight)
    R_T -= dAX_T
    R_T *= A.dtype.type(beta)  # Delta_{t+1}^T
    np.subtract(R_T, D_T, out=dAX_T)  # beta (P - A_{t+1} X - E_{t+1})^T
    return A_new, R_T.T, float(np.linalg.norm(dAX_T)) / beta


def _dense_dictionary_update(
    window: _Window,
    A: np.ndarray,
    D_T: np.ndarray,
    beta: float,
    tau: float,
    over_weight: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``A_{t+1}``, ``R^T`` and ``((A_{t+1} - A_t) X)^T`` of :func:`_oiadmm_step_dense` for a dense
    ``A``. A window that keeps its product keeps ``(A_{t+1} X)^T``, the next step's ``A_t X``,
    and the difference takes the place of ``(A_t X)^T``."""
    k = A.shape[1]
    step = max(1, _SLAB_ENTRIES // max(A.shape[0], 1))
    AX_T = window.product_of(A)
    if AX_T is None:
        AX_T = window.XT @ np.ascontiguousarray(A.T)  # (A_t X)^T
    R_T = _transposed_residual(window, AX_T, D_T, beta, over_weight, A.dtype)
    # A_{t+1}^T = Pi_A(A_t + tau R X^T)^T, one slab of atoms (rows) at a time.
    A_new_T = np.empty((k, A.shape[0]), dtype=A.dtype)
    for j0 in range(0, k, step):
        A_new_T[j0 : j0 + step] = _stepped_atom_rows(
            window.Xr[j0 : j0 + step], R_T, tau, A[:, j0 : j0 + step].T
        )
    AX_next = window.XT @ A_new_T  # (A_{t+1} X)^T
    A_new = np.ascontiguousarray(A_new_T.T)
    if not window.keep_product:
        AX_next -= AX_T  # ((A_{t+1} - A_t) X)^T
        return A_new, R_T, AX_next
    window.product = (A_new, AX_next)
    return A_new, R_T, np.subtract(AX_next, AX_T, out=AX_T)


def _csc_dictionary_update(
    window: _Window,
    A: sp.csc_matrix,
    D_T: np.ndarray,
    beta: float,
    tau: float,
    over_weight: float,
) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
    """``A_{t+1}``, ``R^T`` and ``((A_{t+1} - A_t) X)^T`` of :func:`_oiadmm_step_dense` for a CSC
    ``A``: ``(A X)^T`` as the sparse product ``X^T A^T`` where :func:`_sparse_products` finds it
    cheaper, else a dense slab of atoms at a time (sparse-times-dense products)."""
    dt, k = A.dtype, A.shape[1]
    step = max(1, _SLAB_ENTRIES // max(A.shape[0], 1))
    Xr, XT = window.Xr, window.XT
    starts = range(0, k, step)
    slabs = []  # A_{t+1}^T, a CSR slab of atoms (rows) at a time
    if _sparse_products(Xr, A):
        AX_T = (XT @ A.T.tocsr()).toarray()  # (A_t X)^T
        R_T = _transposed_residual(window, AX_T, D_T, beta, over_weight, dt)
        for j0 in starts:
            new = _stepped_atom_rows(Xr[j0 : j0 + step], R_T, tau, A[:, j0 : j0 + step].T.toarray())
            slabs.append(_csr_from_dense(new))
        A_new_T = _csr_rows(slabs, A.shape[0], dt)
        dAX_T = (XT @ A_new_T).toarray()  # (A_{t+1} X)^T
    else:
        XT_slabs = [Xr[j0 : j0 + step].T.tocsr() for j0 in starts]
        AX_T = np.zeros((XT.shape[0], A.shape[0]), dtype=dt)
        for XT_slab, j0 in zip(XT_slabs, starts, strict=True):
            AX_T += XT_slab @ A[:, j0 : j0 + step].T.toarray()
        R_T = _transposed_residual(window, AX_T, D_T, beta, over_weight, dt)
        dAX_T = np.zeros_like(AX_T)
        for XT_slab, j0 in zip(XT_slabs, starts, strict=True):
            new = _stepped_atom_rows(Xr[j0 : j0 + step], R_T, tau, A[:, j0 : j0 + step].T.toarray())
            dAX_T += XT_slab @ new
            slabs.append(_csr_from_dense(new))
        A_new_T = _csr_rows(slabs, A.shape[0], dt)
    dAX_T -= AX_T  # ((A_{t+1} - A_t) X)^T
    return A_new_T.T.tocsc(), R_T, dAX_T


def _transposed_residual(
    window: _Window,
    AX_T: np.ndarray,
    D_T: np.ndarray,
    beta: float,
    over_weight: float,
    dt: np.dtype,
) -> np.ndarray:
    """``R^T = (Z - E_{t+1})^T``, a new array, from ``(A_t X)^T`` and the dual ``Delta_t^T``."""
    R_T = D_T * dt.type(1.0 / beta)
    R_T -= AX_T
    R_T[window.p_rows, window.p_cols] += window.p_data  # Z^T
    np.clip(R_T, -over_weight / beta, 1.0 / beta, out=R_T)  # R^T = (Z - E_{t+1})^T
    return R_T


def _stepped_atom_rows(
    X_slab: sp.csr_matrix, R_T: np.ndarray, tau: float, A_T: np.ndarray
) -> np.ndarray:
    """``Pi_A(A_t + tau R X^T)^T`` for a slab of atoms: ``X_slab`` their rows of ``X``, ``A_T``
    their rows of ``A_t^T`` (dense)."""
    G_T = X_slab @ R_T
    G_T *= A_T.dtype.type(tau)
    G_T += A_T
    return project_l1_ball_nonneg(G_T, axis=1, method="pivot")


def _csr_rows(slabs: list[sp.csr_matrix], m: int, dt: np.dtype) -> sp.csr_matrix:
    """The CSR slabs stacked (``0 x m`` without any: a dictionary without atoms)."""
    return sp.vstack(slabs, format="csr", dtype=dt) if slabs else sp.csr_matrix((0, m), dtype=dt)


# Cost of one multiply-add of a sparse-times-sparse product relative to one of a sparse-times-dense
# product, on recorded OIADMM steps (1,500 atoms, 1,000 documents): 12-16 ns against 0.7-1.6 ns,
# and at a work ratio of 12 (4,300 terms) the sparse products made the step 15% slower; 20 keeps
# the slabs there and takes the sparse products at 20,000 terms (work ratio 42).
_SPARSE_PRODUCT_COST = 20.0


def _sparse_products(X: sp.csr_matrix, A: sp.csc_matrix) -> bool:
    """Whether ``X^T A^T`` (``n x m``) is cheaper as a sparse product than a dense slab at a time.

    The sparse product does ``sum_j uses_j nnz(a_j)`` multiply-adds (``uses_j`` documents code
    atom ``j``), the slabs ``nnz(X) m``: with short atoms the first stays flat as the vocabulary
    grows while the second grows with it (on a recorded step of the Reuters stream, 20,000 terms,
    the sparse products made the step 1.9x faster).
    """
    uses = np.diff(X.indptr).astype(np.float64)
    work = float(uses @ np.diff(A.indptr))
    return _SPARSE_PRODUCT_COST * work < float(X.nnz) * A.shape[0]


def _csr_from_dense(D: np.ndarray) -> sp.csr_matrix:
    """``sp.csr_matrix(D)`` for a C-ordered 2-d array, without its COO detour (3x faster)."""
    mask = D != 0
    idx = np.flatnonzero(mask)
    indptr = np.r_[0, np.cumsum(np.count_nonzero(mask, axis=1))]
    cols = (idx % D.shape[1]).astype(np.int32)
    return sp.csr_matrix((D.ravel()[idx], cols, indptr), shape=D.shape)


def _resize_columns(D: Dual, n: int) -> Dual:
    """Zero-pad or truncate the columns of the dual to ``n`` (windows differ in size)."""
    if isinstance(D, np.ndarray):
        if D.shape[1] >= n:
            return D[:, :n]
        D_T = np.zeros((n, D.shape[0]), dtype=D.dtype)
        D_T[: D.shape[1]] = D.T
        return D_T.T
    if D.shape[1] >= n:
        return sp.csc_matrix(D[:, :n])
    indptr = np.r_[D.indptr, np.full(n - D.shape[1], D.indptr[-1])]
    return sp.csc_matrix((D.data, D.indices, indptr), shape=(D.shape[0], n))


def _remap_dual_rows(D: Dual, kept_rows: np.ndarray, n_new: int) -> Dual:
    if isinstance(D, np.ndarray):  # kept as the transpose of a C-ordered n x m array
        kept_rows = np.asarray(kept_rows)
        D_T = np.zeros((D.shape[1], kept_rows.size + n_new), dtype=D.dtype)
        if np.array_equal(kept_rows, np.arange(kept_rows.size)):  # no term evicted: a block copy
            D_T[:, : kept_rows.size] = D.T[:, : kept_rows.size]
        else:  # into place (indexing made a temporary and copied it: 3x slower)
            np.take(D.T, kept_rows, axis=1, out=D_T[:, : kept_rows.size])
        return D_T.T
    kept = sp.csc_matrix(sp.csr_matrix(D)[kept_rows])
    return sp.csc_matrix(
        (kept.data, kept.indices, kept.indptr), shape=(kept.shape[0] + n_new, kept.shape[1])
    )


class OIADMM(BaseEstimator):
    """Online l1 dictionary update (Algorithm 2) with a dual carried across windows.

    Parameters
    ----------
    beta : augmented-Lagrangian penalty (paper default 5).
    tau : step size; ``None`` uses ``1 / (2 Psi_max(X_t))`` at every step.
    dtype : float type of ``A`` and ``Delta``.
    over_weight : weight of over-representation in the loss (the weighted l1 loss of
        :func:`~sparsewatch.models.l1_coding.weighted_l1_loss`; ``E``'s prox becomes
        ``Z - clip(Z, -w/beta, 1/beta)``); 1 = Algorithm 2 exactly.
    sparse : keep ``A`` as a CSC matrix (for dictionaries of short atoms, as grown by the
        novelty detector: the same steps, a fraction of the memory) instead of a dense array.

    Attributes
    ----------
    components_ : (m, k) dictionary ``A`` (dense, or CSC with ``sparse``); dual_ : (m, n_last)
    dual ``Delta``, sparse CSC
    while it is sparse, then a dense array (the transpose of a C-ordered one; see
    :func:`_oiadmm_step`); n_steps_ : steps taken; violation_ :
    ``||P_t - A_{t+1} X_t - E_{t+1}||_F`` of the last 1,000 steps.

    A building block, not a scikit-learn estimator of ``X``: it has no ``fit(X)`` (it starts
    from a given dictionary, :meth:`initialize`), and a step takes the window in the paper's
    layout (documents as the columns of ``P``, ``m x n``) with the codes of those documents under
    the current dictionary (``k x n``, e.g. from
    :func:`~sparsewatch.models.l1_coding.l1_sparse_code`). It follows the conventions that need
    no ``fit`` (parameters only in ``__init__``, ``clone``, ``get_params``/``set_params``).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.oiadmm import OIADMM
    >>> rng = np.random.default_rng(0)
    >>> model = OIADMM().initialize(rng.random((6, 3)))  # 6 terms, 3 atoms
    >>> model.components_.sum(axis=0).round(3)  # projected: non-negative, l1 norm at most 1
    array([1., 1., 1.], dtype=float32)
    >>> P = rng.random((6, 4))
    >>> P /= P.sum(axis=0)  # a window of 4 unit-l1 documents (columns)
    >>> codes = rng.random((3, 4))  # their codes (atoms x documents)
    >>> model = model.partial_fit(P, codes)
    >>> model.components_.shape, model.dual_.shape, model.n_steps_
    ((6, 3), (6, 4), 1)
    >>> bool((model.components_ >= 0).all() and (model.components_.sum(axis=0) <= 1).all())
    True
    """

    def __init__(
        self,
        beta: float = 5.0,
        tau: float | None = None,
        dtype: type = np.float32,
        over_weight: float = 1.0,
        sparse: bool = False,
    ) -> None:
        self.beta = beta
        self.tau = tau
        self.dtype = dtype
        self.over_weight = over_weight
        self.sparse = sparse

    def _layout(self, A: np.ndarray | sp.spmatrix) -> Dictionary:
        """``A`` in this model's layout and dtype (CSC without stored zeros, or dense)."""
        if not self.sparse:
            return np.asarray(A.toarray() if is_sparse(A) else A, dtype=self.dtype)
        C = sp.csc_matrix(A, dtype=self.dtype)
        C.eliminate_zeros()
        return C

    def _projected(self, atoms: np.ndarray | sp.spmatrix) -> Dictionary:
        if self.sparse and sp.issparse(atoms):  # stays sparse (no m x k dense temporaries)
            return self._layout(project_l1_ball_nonneg_csc(sp.csc_matrix(atoms, dtype=self.dtype)))
        dense = atoms.toarray() if is_sparse(atoms) else np.asarray(atoms)
        return self._layout(project_l1_ball_nonneg(dense.astype(self.dtype)).astype(self.dtype))

    def initialize(self, A: np.ndarray | sp.spmatrix) -> OIADMM:
        """Start from dictionary ``A`` (projected onto the constraint set) and a zero dual."""
        self.components_ = self._projected(A)
        self.dual_ = sp.csc_matrix((self.components_.shape[0], 0), dtype=self.dtype)
        self.n_steps_ = 0
        self.violation_: list[float] = []
        return self

    def remap_rows(self, kept_rows: np.ndarray, n_new: int) -> OIADMM:
        """Vocabulary update: keep ``kept_rows``, append ``n_new`` zero rows (``A``, ``Delta``)."""
        A = self.components_
        if is_sparse(A):
            zeros = sp.csc_matrix((n_new, A.shape[1]), dtype=A.dtype)
            self.components_ = sp.vstack([A.tocsr()[kept_rows], zeros], format="csc")
        else:
            self.components_ = remap_rows(A, kept_rows, n_new)
        self.dual_ = _remap_dual_rows(self.dual_, kept_rows, n_new)
        return self

    def add_atoms(self, atoms: np.ndarray) -> OIADMM:
        """Append columns (projected) to the dictionary; the dual does not depend on ``k``."""
        new = self._projected(atoms)
        stack = sp.hstack if self.sparse else np.hstack
        self.components_ = self._layout(stack([self.components_, new]))
        return self

    def replace_atoms(self, idx: np.ndarray, atoms: np.ndarray) -> OIADMM:
        """Overwrite columns ``idx`` with ``atoms`` (projected); ``k`` and the dual unchanged."""
        idx = np.asarray(idx, dtype=np.int64)
        new = self._projected(atoms)
        if self.sparse:  # column j of the result is column order[j] of [A, new]
            k = self.components_.shape[1]
            order = np.arange(k)
            order[idx] = k + np.arange(idx.size)
            self.components_ = sp.hstack([self.components_, new], format="csc")[:, order]
        else:
            self.components_[:, idx] = new
        return self

    def keep_atoms(self, idx: np.ndarray) -> OIADMM:
        """Keep only columns ``idx`` (in that order) of the dictionary; the dual does not depend
        on ``k``."""
        idx = np.asarray(idx, dtype=np.int64)
        self.components_ = self._layout(self.components_[:, idx])
        return self

    def partial_fit(self, P: sp.spmatrix | np.ndarray, X: sp.spmatrix | np.ndarray) -> OIADMM:
        """One OIADMM step on the window ``P`` (``m x n``) with its codes ``X`` (``k x n``);
        ``NotFittedError`` before :meth:`initialize`, ``ValueError`` before anything changes for
        mismatched shapes or NaN or infinite entries."""
        if not hasattr(self, "components_"):
            raise NotFittedError(
                f"This {type(self).__name__} instance has no dictionary yet: call 'initialize' "
                "with one before 'partial_fit'."
            )
        m, n = P.shape
        if m < self.components_.shape[0]:
            raise ValueError(
                f"P has {m} rows (terms) but the dictionary has {self.components_.shape[0]}: "
                "a window is over the dictionary's terms (after a vocabulary change that drops "
                "terms, apply it to the model with remap_rows first)"
            )
        if X.shape != (self.components_.shape[1], n):
            raise ValueError(
                f"X must be (atoms, documents) = {(self.components_.shape[1], n)}, got {X.shape}"
            )
        for name, M in (("P", P), ("X", X)):
            if not np.isfinite(M.data if sp.issparse(M) else np.asarray(M)).all():
                raise ValueError(
                    f"{name} has NaN or infinite entries (they would make the dictionary NaN for "
                    "good)"
                )
        if self.components_.shape[0] < m:  # vocabulary grew without an explicit remap
            self.remap_rows(np.arange(self.components_.shape[0]), m - self.components_.shape[0])
        if n == 0:  # an empty window: no step, and the dual stays as the last window left it
            return self
        D = _resize_columns(self.dual_, n)
        if self.tau is not None:
            tau = self.tau
        else:
            # X_t = 0 (no document used an atom): tau_t = 1 / (2 Psi_max(X_t)) is undefined, but
            # the A-update tau_t (Z - E) X_t^T is zero for any tau_t, so tau = 0 takes the same
            # step; the dual update Delta_{t+1} = Delta_t + beta (P_t - E_{t+1}) still applies
            psi = psi_max(X)
            tau = 1.0 / (2.0 * psi) if psi > 0 else 0.0
        self.components_, self.dual_, viol = _oiadmm_step(
            P, X, self.components_, D, self.beta, tau, self.over_weight
        )
        self.violation_.append(viol)
        del self.violation_[:-1000]  # a diagnostic: keep the last 1,000 steps (flat memory)
        self.n_steps_ += 1
        return self

    def get_state(self) -> dict[str, np.ndarray]:
        """``A`` as CSC arrays (``components_data``, ``_indices``, ``_indptr``, ``_shape``: grown
        dictionaries of short atoms are mostly zeros); ``Delta`` alike while sparse, else as the
        dense ``dual_transposed`` (``n x m``); ``violation`` the diagnostic ``violation_``
        (float64, at most 1,000 entries: a restored model had lost it). ``NotFittedError``
        before :meth:`initialize`."""
        if not hasattr(self, "components_"):
            raise NotFittedError(
                f"This {type(self).__name__} instance has no dictionary yet: call 'initialize' "
                "first."
            )
        C = sp.csc_matrix(self.components_)
        # Row indices < m fit int32.
        state = {
            "components_data": C.data,
            "components_indices": C.indices.astype(np.int32),
            "components_indptr": C.indptr.astype(np.int64),
            "components_shape": np.asarray(self.components_.shape, dtype=np.int64),
            "n_steps": np.asarray(self.n_steps_, dtype=np.int64),
            "violation": np.asarray(self.violation_, dtype=np.float64).reshape(-1),
        }
        D = self.dual_
        if isinstance(D, np.ndarray):
            state["dual_transposed"] = np.ascontiguousarray(D.T)
        else:
            state.update(
                dual_data=D.data,
                dual_indices=D.indices.astype(np.int32),
                dual_indptr=D.indptr.astype(np.int64),
                dual_shape=np.asarray(D.shape, dtype=np.int64),
            )
        return state

    def set_state(self, state: dict[str, np.ndarray]) -> OIADMM:
        """Restore :meth:`get_state` output (checkpoints written before ``violation`` restore an
        empty ``violation_``)."""
        if "components" in state:  # checkpoints written before the sparse layout
            self.components_ = self._layout(np.array(state["components"], dtype=self.dtype))
        else:
            self.components_ = self._layout(_csc_from_state(state, "components", self.dtype))
        if "dual_transposed" in state:
            self.dual_ = np.array(state["dual_transposed"], dtype=self.dtype).T
        else:
            self.dual_ = _csc_from_state(state, "dual", self.dtype)
        self.n_steps_ = int(state["n_steps"])
        violation = np.asarray(state.get("violation", ()), dtype=np.float64).reshape(-1)
        self.violation_ = [float(v) for v in violation[-1000:]]
        return self


def _csc_from_state(state: dict[str, np.ndarray], name: str, dtype: type) -> sp.csc_matrix:
    return sp.csc_matrix(
        (
            np.array(state[f"{name}_data"], dtype=dtype),
            state[f"{name}_indices"],
            state[f"{name}_indptr"],
        ),
        shape=tuple(int(v) for v in state[f"{name}_shape"]),
    )


def l1_dictionary_update(
    P: sp.spmatrix | np.ndarray,
    X: sp.spmatrix | np.ndarray,
    A: Dictionary,
    *,
    beta: float = 5.0,
    n_iter: int = 50,
    over_weight: float = 1.0,
) -> Dictionary:
    """Batch l1 dictionary update (Algorithm 6): ``min_{A in A} ||P - A X||_1`` by ``n_iter``
    linearised ADMM steps on the fixed batch (``tau = 1 / (2 Psi_max(X))``), from ``A``
    (dense or CSC, returned in the same layout; ``over_weight < 1``: the weighted l1 loss, as in
    :class:`OIADMM`)."""
    psi = psi_max(X)
    A = A if sp.issparse(A) else np.asarray(A)
    if psi <= 0:
        return A
    tau = 1.0 / (2.0 * psi)
    D = sp.csc_matrix(P.shape, dtype=A.dtype)
    window = _Window(P, X, A.dtype, keep_product=True)
    for _ in range(n_iter):
        A, D, _ = _oiadmm_step(P, X, A, D, beta, tau, over_weight, window)
    return A
