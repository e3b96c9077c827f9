"""Batched non-negative l1 sparse coding by ADMM (Kasiviswanathan et al., NIPS 2012, Algorithm 5).

For every document column ``p`` of ``P`` (``m x n``) and a dictionary ``A >= 0`` (``m x k``) solve

    min_{x >= 0} ||p - A x||_1 + lambda ||x||_1                                   (paper Eq. (3))

and return the optimal value (the novelty score) and its reconstruction part ``||p - A x||_1``.

Exact problem reduction (this is where the speed is)
-----------------------------------------------------
Let ``S`` be the support of ``p``. Off ``S`` the residual is ``(A x)_i >= 0``, so those rows add the
*linear* term ``sum_j x_j (||a_j||_1 - m_j)`` with ``m_j = sum_{i in S} A_ij``. The problem is
exactly ``min_{x>=0} ||p_S - A_S x||_1 + c^T x`` with ``c_j = lambda + ||a_j||_1 - m_j``.
Lowering ``x_j`` by ``delta`` changes the fit by at most ``m_j delta`` and saves ``c_j delta``, so
``x_j = 0`` at an optimum whenever ``2 m_j <= ||a_j||_1 + lambda`` (the screening rule of
DESIGN.md, applied atom by atom; when no atom passes, ``x = 0`` and the score is ``||p||_1``
with no iteration at all). Rows of ``S`` where every surviving atom is zero are constants.
What is left per document is a block of a few rows by a few atoms. All blocks of a window are
stacked into one block-diagonal sparse matrix and Algorithm 5 runs on all of them at once:

    e     <- soft(q - B x + theta / phi, 1 / phi)
    x     <- max(x - kappa (B^T (B x + e - q - theta / phi) + c / phi), 0)
    theta <- theta + gamma phi (q - B x - e)

with ``kappa = 1 / Psi_max(B_d)`` per block (an upper bound from the Collatz-Wielandt formula on
``B_d^T B_d >= 0``; never larger than the paper's ``1 / Psi_max(A)`` step condition requires) and
``phi`` scaled per block by ``phi_scale`` (see :func:`l1_sparse_code`).

Weighted l1 loss (``over_weight = w`` in ``(0, 1]``): ``||p - A x||_1`` becomes
``sum_i max(r_i, 0) + w max(-r_i, 0)`` with ``r = p - A x`` (over-representation charged ``w``).
Everything above carries over with ``c_j = lambda + w (||a_j||_1 - m_j)``, the screening rule
``(1 + w) m_j > w ||a_j||_1 + lambda``, the ``e``-update ``e = z - clip(z, -w/phi, 1/phi)`` (the
prox of the loss) and dual points in ``[-w, 1]``; ``w = 1`` is Algorithm 5 exactly.

Stopping: a document stops when the duality gap of the LP certifies a relative accuracy ``tol``
(the dual point is ``theta`` clipped to ``[-1, 1]`` and scaled into ``{B^T theta <= c}``);
converged blocks leave the system. The documents still iterating after ``polish_after``
iterations are solved exactly by one LP (the polish); without the polish a document also stops
when its primal and dual residuals are below ``tol_residual`` (stalled, not certified).

The residuals of that stall stop follow from the updates above (``e`` first, then a linearised
``x``-step). With ``theta~ = theta + phi (q - B x_old - e) = phi clip(z, -w/phi, 1/phi)``,
``theta~`` is a subgradient of the loss at ``e`` exactly (the ``e``-update is its prox), and the
projected ``x``-step is optimality of ``min_{x>=0} c^T x - theta~^T B x + phi/(2 kappa)
||x - x_old||^2``, i.e. ``c - B^T theta~ + (phi / kappa) (x - x_old)`` is a normal vector of
``{x >= 0}`` at ``x``. So ``(x, e, theta~)`` satisfies the KKT conditions of the LP up to the
primal residual ``q - B x - e`` and the dual residual ``(phi / kappa) (x - x_old)``. The ADMM
dual residual ``phi B^T (e - e_old)`` belongs to the other order (``x`` then ``e``, exact
``x``-step): it leaves out the ``x``-movement and stalled documents stopped while ``x`` still
drifted, flagged converged up to 30 % above the optimum.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import highspy
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sparsewatch.models._validation import is_sparse

__all__ = [
    "L1CodingResult",
    "l1_objective",
    "l1_sparse_code",
    "l1_sparse_code_dense",
    "weighted_l1_loss",
]


@dataclass(frozen=True)
class L1CodingResult:
    """Output of :func:`l1_sparse_code` for ``n`` documents and ``k`` atoms.

    Attributes
    ----------
    codes : scipy.sparse.csr_matrix, shape (n, k), the non-negative codes ``x`` (one row a doc).
    objective : ndarray (n,), ``||p - A x||_1 + lambda ||x||_1`` (the novelty score).
    reconstruction_error : ndarray (n,), ``||p - A x||_1``.
    gap : ndarray (n,), certified duality gap (upper bound on ``objective - optimum``); ``inf``
        for a document no convergence check reached (``max_iter = 0`` without the polish).
    converged : ndarray (n,) of bool: gap certified within ``tol``, solved by the polish, or
        (without the polish) stalled residuals (uncertified: their ``gap`` can exceed ``tol``
        times the objective). False: ADMM stopped at its iteration cap (``max_iter``, without
        the polish) or the polish failed; :func:`l1_sparse_code` then warns
        (``ConvergenceWarning``).
    n_iter : int, ADMM iterations run (0 when every document was screened); with the polish at
        most ``polish_after`` (``n_polished`` documents were left at that point).
    n_screened : int, documents settled by the screening rule (``x = 0`` exactly).
    screening_margin : ndarray (n,), ``max(0, min_j (||a_j||_1 + lambda - 2 m_j))``: how far a
        screened document is from using any atom (the reduced cost certifying ``x = 0``); 0 for
        documents that use an atom or have no terms. A free tie-break among scores of exactly 1.
        With ``over_weight = w``: ``max(0, min_j (w ||a_j||_1 + lambda - (1 + w) m_j))``.
    n_polished : int, documents finished by the exact LP polish (see ``polish_after``).
    """

    codes: sp.csr_matrix
    objective: np.ndarray
    reconstruction_error: np.ndarray
    gap: np.ndarray
    converged: np.ndarray
    n_iter: int
    n_screened: int
    screening_margin: np.ndarray | None = None
    n_polished: int = 0


def weighted_l1_loss(r: np.ndarray, over_weight: float = 1.0) -> np.ndarray:
    """Elementwise loss of a residual ``r = p - A x``: ``max(r, 0) + w max(-r, 0)``.

    ``w = 1`` is ``|r|`` (Eq. (3)). ``w < 1`` charges mass that the atoms put where the document
    has less (over-representation, e.g. an atom's words absent from a short document) less than
    document mass left unexplained, so broad atoms stay usable for short documents.
    """
    return np.where(r >= 0, r, -over_weight * r)


def l1_objective(
    P: sp.spmatrix | np.ndarray,
    A: np.ndarray | sp.spmatrix,
    X: sp.spmatrix | np.ndarray,
    lam: float,
    over_weight: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``(objective, reconstruction_error)`` per column for codes ``X`` (``n x k``)."""
    Xs = sp.csr_matrix(X, dtype=np.float64)
    R = np.asarray(P.toarray() if is_sparse(P) else P, dtype=np.float64)
    AX = A @ Xs.T
    R = R - np.asarray(AX.toarray() if sp.issparse(AX) else AX, dtype=np.float64)
    rec = weighted_l1_loss(R, over_weight).sum(axis=0)
    return rec + lam * np.asarray(abs(Xs).sum(axis=1)).ravel(), rec


def _ragged_arange(counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(c) for c in counts])`` without a Python loop."""
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


# Entries of an m x block slab of a sparse dictionary made dense at once (~2M): products with a
# dense slab run as sparse-times-dense kernels, several times faster than sparse-times-sparse.
_SLAB_ENTRIES = 1 << 21


def _column_slabs(A: sp.csc_matrix) -> Iterator[tuple[int, np.ndarray]]:
    """``(j0, A[:, j0:j0 + s] as a dense array)`` over the columns of a sparse ``A``."""
    step = max(1, _SLAB_ENTRIES // max(A.shape[0], 1))
    for j0 in range(0, A.shape[1], step):
        yield j0, A[:, j0 : j0 + step].toarray()


def _support_mass(Pb: sp.csc_matrix, A: np.ndarray | sp.csc_matrix) -> np.ndarray:
    """``Pb^T A`` (``n x k``, float64): each atom's mass on each document's terms.

    A sparse ``A`` is multiplied as it is: the product's work is ``sum_i |atoms of term i|`` over
    the documents' terms, far below the ``m x k`` a dense slab of atoms at a time costs to form
    (recorded windows at the 1,500-atom cap: 0.03-0.17 s against 0.04-0.36 s, equal results)."""
    if not sp.issparse(A):
        return np.asarray(Pb.T @ A, dtype=np.float64)
    return (Pb.T.tocsr() @ A).toarray().astype(np.float64, copy=False)


def _entries(A: np.ndarray | sp.csc_matrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``A[rows[i], cols[i]]`` for every ``i`` (sparse ``A``: by dense slabs of columns)."""
    if not sp.issparse(A):
        return A[rows, cols]
    out = np.zeros(rows.size, dtype=A.dtype)
    for j0, slab in _column_slabs(A):
        sel = np.flatnonzero((cols >= j0) & (cols < j0 + slab.shape[1]))
        out[sel] = slab[rows[sel], cols[sel] - j0]
    return out


def _block_entries(
    Pc: sp.csc_matrix, A: np.ndarray | sp.csc_matrix, active: sp.csr_matrix, doc_of_nnz: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-zero entries ``A[term, atom]`` of every document's block: ``(ent_row, ent_var,
    ent_val)`` with ``ent_row`` the position of the term among ``Pc``'s stored entries and
    ``ent_var`` the position of the (document, atom) pair among ``active``'s, ordered by
    ``ent_row`` then ``ent_var``.

    A document's candidates are found the cheaper of two ways. Pairs: every (term, active atom)
    pair, looked up in ``A`` (``nnz_d * n_act_d`` of them: a few dozen terms by a few dozen atoms
    for a news story). Rows: the atoms stored in each of its terms' rows of a sparse ``A``, kept
    when active (``sum_i |row_i|``): a 100 kB document has thousands of terms and nearly every
    atom active, millions of pairs but a few hundred thousand stored entries (20 of them in a
    Reuters window took 12 s and 1.2 GB more by pairs alone).
    """
    n_act = np.diff(active.indptr)
    nnz_of_doc = np.diff(Pc.indptr)
    by_rows = np.zeros(n_act.size, dtype=bool)
    if sp.issparse(A):
        Ar = sp.csr_matrix(A)
        Ar.sort_indices()
        row_len = np.diff(Ar.indptr)[Pc.indices]
        row_work = np.bincount(doc_of_nnz, weights=row_len, minlength=n_act.size)
        # a looked-up pair costs about a stored entry's search (measured within 2x either way)
        by_rows = row_work < nnz_of_doc * n_act
    on_rows = by_rows[doc_of_nnz]
    # pairs, for the other documents
    reps = np.where(on_rows, 0, n_act[doc_of_nnz])
    pair_row = np.repeat(np.arange(Pc.nnz), reps)
    pair_var = np.repeat(active.indptr[doc_of_nnz], reps) + _ragged_arange(reps)
    pair_val = (
        _entries(A, Pc.indices[pair_row], active.indices[pair_var])
        if pair_row.size  # (a sparse A is made dense a slab at a time to look pairs up)
        else np.zeros(0, dtype=A.dtype)
    )
    keep = pair_val != 0
    parts = [(pair_row[keep], pair_var[keep], pair_val[keep])]
    if by_rows.any():
        nz = np.flatnonzero(on_rows)
        cnt = row_len[nz]
        cand_row = np.repeat(nz, cnt)
        pos = np.repeat(Ar.indptr[Pc.indices[nz]], cnt) + _ragged_arange(cnt)
        k = active.shape[1]
        key = doc_of_nnz[cand_row].astype(np.int64) * k + Ar.indices[pos]
        pair_keys = np.repeat(np.arange(n_act.size, dtype=np.int64), n_act) * k + active.indices
        at = np.minimum(np.searchsorted(pair_keys, key), max(pair_keys.size - 1, 0))
        hit = (pair_keys[at] == key) & (Ar.data[pos] != 0)
        parts.append((cand_row[hit], at[hit], Ar.data[pos][hit]))
    ent_row, ent_var, ent_val = (np.concatenate(x) for x in zip(*parts, strict=True))
    if len(parts) > 1:
        order = np.lexsort((ent_var, ent_row))
        ent_row, ent_var, ent_val = ent_row[order], ent_var[order], ent_val[order]
    return ent_row, ent_var, ent_val


def l1_sparse_code(
    P: sp.spmatrix | np.ndarray,
    A: np.ndarray | sp.spmatrix,
    lam: float = 0.1,
    *,
    phi: float = 5.0,
    gamma: float = 1.89,
    phi_scale: bool = True,
    max_iter: int = 30000,
    tol: float = 1e-4,
    tol_residual: float = 1e-7,
    check_every: int = 10,
    x0: sp.spmatrix | np.ndarray | None = None,
    dtype: type | None = None,
    over_weight: float = 1.0,
    polish_after: int | None = 300,
) -> L1CodingResult:
    """Solve ``min_{x>=0} ||p - A x||_1 + lam ||x||_1`` for every column ``p`` of ``P``.

    Parameters
    ----------
    P : (m, n) sparse or dense, documents as columns (any sign; TF-IDF columns are ``>= 0``),
        finite; duplicate sparse entries are summed (scipy's meaning).
    A : (m, k) finite dictionary with ``A >= 0`` (required by the exact row reduction), dense or
        sparse.
    lam : the l1 penalty ``lambda`` of Eq. (3), finite and ``>= 0``.
    phi, gamma : Algorithm 5's penalty and dual step (paper defaults 5 and 1.89).
    phi_scale : Algorithm 5 assumes unit-scale entries; a block of ``s`` rows of a unit-l1
        document has entries of size ``1/s``. When true, block ``d`` uses
        ``phi * s_d / ||q_d||_1`` (the penalty the paper's ``phi`` corresponds to once the block is
        rescaled to unit entries); the optimum is unchanged, only the speed.
    max_iter : iteration cap; tol : relative duality-gap tolerance;
    tol_residual : primal/dual residual tolerance of the stall stop, used only without the
        polish: ``tol_residual ||q_d||_1`` for a document of unit l1 mass, scaled with the
        document as each residual scales (the optimum is positively homogeneous in ``p``).
    check_every : iterations between convergence checks (and removal of converged blocks); the
        interval doubles (up to 20x) while a check finds nothing new.
    x0 : optional (n, k) warm start (``ValueError`` for another shape).
    dtype : float32 or float64 for the iterations (default: ``A``'s float type).
    over_weight : weight ``w`` in ``(0, 1]`` of over-representation in the loss (see
        :func:`weighted_l1_loss`); ``1`` is Eq. (3) exactly.
    polish_after : after this many iterations the documents still iterating are finished
        exactly: their reduced blocks (a few rows and atoms each) are stacked into one small LP
        solved by HiGHS (:func:`_polish`), the "polish" step of first-order solvers. Without
        it a few degenerate blocks need 10^4 iterations to certify the gap. ``None``: ADMM only.

    Warns
    -----
    ConvergenceWarning
        when documents are left unconverged (``converged`` false: the iteration cap reached
        without the polish, or the polish failed), with their number; callers that only see
        scores (``score_samples``) learn it this way.
    """
    w = float(over_weight)
    _check_penalties(w, over_weight, lam)
    A, dt = _dictionary(A, dtype)
    Pc = _documents(P, dt)
    m, n = Pc.shape
    k = A.shape[1]
    _check_shapes(A, x0, m, n, k)
    pnorm = _document_loss(Pc, w)
    if n == 0 or k == 0 or Pc.nnz == 0:
        return _uncoded(n, k, dt, pnorm, np.zeros(n))
    colnorm, margin, active = _screen(Pc, A, lam, w, pnorm)
    n_act = np.diff(active.indptr)
    if n_act.sum() == 0:
        return _uncoded(n, k, dt, pnorm, margin)

    blocks = _reduced_blocks(Pc, A, active, colnorm, pnorm, lam, w)
    solve_docs = np.flatnonzero(n_act > 0)
    converged = np.ones(n, dtype=bool)
    converged[solve_docs] = False
    gap = np.zeros(n)
    gap[solve_docs] = np.inf  # no bound until a convergence check (or the polish) gives one
    x = _warm_start(x0, blocks, dt)
    steps = _step_sizes(blocks, phi, phi_scale, dt)
    stop = max_iter if polish_after is None else min(max_iter, polish_after)
    options = _AdmmOptions(gamma, w, tol, tol_residual, check_every, stop, polish_after is None)
    it, working, xw = _admm(blocks, steps, options, x, gap, converged)
    n_polished = 0
    if working.rsel.size and polish_after is not None:
        n_polished = _polish_unconverged(blocks, working, xw, w, x, gap, converged)

    objective, rec = _exact_objective(blocks, x, lam, w)
    codes = sp.csr_matrix((x, blocks.var_atom, active.indptr), shape=(n, k), dtype=dt)
    codes.eliminate_zeros()
    _warn_unconverged(converged, stop)
    return L1CodingResult(
        codes, objective, rec, gap, converged, it, int(n - solve_docs.size), margin, n_polished
    )


def _check_penalties(w: float, over_weight: float, lam: float) -> None:
    """``ValueError`` unless ``0 < w <= 1`` (``w``: ``over_weight`` as a float) and ``lam`` is
    finite and ``>= 0``."""
    if not 0.0 < w <= 1.0:
        raise ValueError(f"over_weight must be in (0, 1], got {over_weight}")
    if not 0.0 <= lam < np.inf:  # NaN fails too
        raise ValueError(f"lam must be finite and >= 0, got {lam}")


def _dictionary(
    A: np.ndarray | sp.spmatrix, dtype: type | None
) -> tuple[np.ndarray | sp.csc_matrix, np.dtype]:
    """``(A, dt)``: the dictionary in the float type of the iterations ``dt`` (``dtype``, else
    ``A``'s float type, else float64), as a dense array or CSC; ``ValueError`` unless it is
    finite and non-negative."""
    A = A if sp.issparse(A) else np.asarray(A)
    dt = (
        np.dtype(dtype)
        if dtype is not None
        else (A.dtype if A.dtype in (np.float32, np.float64) else np.dtype(np.float64))
    )
    A = sp.csc_matrix(A, dtype=dt) if sp.issparse(A) else A.astype(dt, copy=False)
    values = A if isinstance(A, np.ndarray) else A.data
    # min and max propagate NaN (which fails ``>= 0``): two reductions, no temporaries
    if values.size and not (values.min() >= 0 and np.isfinite(values.max())):
        raise ValueError("the dictionary must be finite and non-negative")
    return A, dt


def _documents(P: sp.spmatrix | np.ndarray, dt: np.dtype) -> sp.csc_matrix:
    """The documents as a CSC copy of type ``dt`` in canonical form without explicit zeros;
    ``ValueError`` for a NaN or infinite entry."""
    Pc = sp.csc_matrix(P, dtype=dt, copy=True)  # the clean-up below works in place
    if not np.isfinite(Pc.data).all():
        raise ValueError("P contains NaN or infinite values")
    if not Pc.has_canonical_format:  # duplicate entries of a term: one row, their sum
        Pc.sum_duplicates()
    Pc.eliminate_zeros()
    Pc.sort_indices()
    return Pc


def _check_shapes(
    A: np.ndarray | sp.csc_matrix, x0: sp.spmatrix | np.ndarray | None, m: int, n: int, k: int
) -> None:
    """``ValueError`` unless ``A`` has the ``m`` rows of the documents and ``x0`` (if given) is
    a finite ``(n, k)``."""
    if A.shape[0] != m:
        raise ValueError(f"P has {m} rows but A has {A.shape[0]}")
    if x0 is not None and np.shape(x0) != (n, k):
        raise ValueError(f"x0 must have shape (n, k) = {(n, k)}, got {np.shape(x0)}")
    if x0 is not None and not np.isfinite(sp.csr_matrix(x0).data).all():
        raise ValueError("x0 contains NaN or infinite values")  # they reached the codes


def _document_loss(Pc: sp.csc_matrix, w: float) -> np.ndarray:
    """The loss of each document at ``x = 0`` (its weighted l1 mass), float64."""
    n = Pc.shape[1]
    # float64 even without entries (a weighted bincount of nothing is int64)
    return np.bincount(
        np.repeat(np.arange(n), np.diff(Pc.indptr)),
        weights=weighted_l1_loss(Pc.data.astype(np.float64), w),
        minlength=n,
    ).astype(np.float64, copy=False)


def _uncoded(n: int, k: int, dt: np.dtype, pnorm: np.ndarray, margin: np.ndarray) -> L1CodingResult:
    """The result when no document uses an atom: ``x = 0``, each score the document's loss."""
    return L1CodingResult(
        sp.csr_matrix((n, k), dtype=dt),
        pnorm.copy(),
        pnorm.copy(),
        np.zeros(n),
        np.ones(n, dtype=bool),
        0,
        n,
        margin,
    )


def _screen(
    Pc: sp.csc_matrix, A: np.ndarray | sp.csc_matrix, lam: float, w: float, pnorm: np.ndarray
) -> tuple[np.ndarray, np.ndarray, sp.csr_matrix]:
    """The screening rule: atom ``j`` may be used for document ``d`` only if
    ``(1 + w) m_dj > w ||a_j||_1 + lam``. Returns ``(colnorm, margin, active)``: the atoms' l1
    norms (float64), each document's screening margin (see :class:`L1CodingResult`) and the
    ``(n, k)`` pattern of the (document, atom) pairs that pass, indices sorted."""
    m, n = Pc.shape
    colnorm = np.asarray(A.sum(axis=0, dtype=np.float64)).ravel()
    Pb = sp.csc_matrix((np.ones(Pc.nnz, dtype=Pc.dtype), Pc.indices, Pc.indptr), shape=(m, n))
    mass = _support_mass(Pb, A)  # (n, k)
    reduced_cost = w * colnorm + lam - (1.0 + w) * mass
    margin = np.where(pnorm > 0, np.maximum(reduced_cost.min(axis=1), 0.0), 0.0)
    active = sp.csr_matrix(reduced_cost < 0)
    active.sort_indices()
    return colnorm, margin, active


@dataclass(frozen=True)
class _Blocks:
    """The reduced problems of a window stacked into one block-diagonal system: row ``i`` is a
    term of document ``doc_of_row[i]`` that a surviving atom uses, variable ``j`` the pair of
    document ``doc_of_var[j]`` and atom ``var_atom[j]`` (in ``active``'s order)."""

    B: sp.csr_matrix  # (n_rows, n_vars), the iterations' float type
    q: np.ndarray  # (n_rows,) the documents' entries on their rows
    c: np.ndarray  # (n_vars,) linear cost ``lam + w (||a_j||_1 - m_j)``
    off_mass: np.ndarray  # (n_vars,) ``||a_j||_1 - m_j`` (float64, >= 0)
    const: np.ndarray  # (n,) loss of each document's rows outside its block (float64)
    pnorm: np.ndarray  # (n,) loss of each whole document at x = 0 (float64)
    doc_of_row: np.ndarray
    doc_of_var: np.ndarray
    var_atom: np.ndarray


def _reduced_blocks(
    Pc: sp.csc_matrix,
    A: np.ndarray | sp.csc_matrix,
    active: sp.csr_matrix,
    colnorm: np.ndarray,
    pnorm: np.ndarray,
    lam: float,
    w: float,
) -> _Blocks:
    """The block-diagonal system: entries (row = nnz position of ``Pc``, var = active pair)."""
    n = Pc.shape[1]
    doc_of_nnz = np.repeat(np.arange(n), np.diff(Pc.indptr))
    var_atom = active.indices
    ent_row, ent_var, ent_val = _block_entries(Pc, A, active, doc_of_nnz)
    rows_used, ent_row = np.unique(ent_row, return_inverse=True)
    n_rows, n_vars = rows_used.size, var_atom.size
    doc_of_row = doc_of_nnz[rows_used]
    doc_of_var = np.repeat(np.arange(n), np.diff(active.indptr))
    q = Pc.data[rows_used]
    const = pnorm - np.bincount(doc_of_row, weights=weighted_l1_loss(q, w), minlength=n)
    # c_j = lam + w (||a_j||_1 - m_j) >= lam: m_j summed in float64 from the block's own entries
    # (the float32 product of the screening can exceed ||a_j||_1 by ~1e-8 when an atom lies
    # entirely on the document's terms), and clamped at 0 against the remaining rounding: with
    # lam = 0 a c_j of -1e-8 once left the dual point unscaled and certified a gap of 0 at an
    # objective 10 % above the optimum.
    off_mass = np.maximum(
        colnorm[var_atom] - np.bincount(ent_var, weights=ent_val, minlength=var_atom.size), 0.0
    )
    c = (lam + w * off_mass).astype(Pc.dtype)
    B = sp.csr_matrix((ent_val, (ent_row, ent_var)), shape=(n_rows, n_vars), dtype=Pc.dtype)
    return _Blocks(B, q, c, off_mass, const, pnorm, doc_of_row, doc_of_var, var_atom)


def _warm_start(x0: sp.spmatrix | np.ndarray | None, blocks: _Blocks, dt: np.dtype) -> np.ndarray:
    """The starting values of the variables: ``x0``'s entries, clipped at 0, or zeros."""
    if x0 is None:
        return np.zeros(blocks.var_atom.size, dtype=dt)
    X0 = sp.csr_matrix(x0)
    return np.maximum(np.asarray(X0[blocks.doc_of_var, blocks.var_atom], dtype=dt).ravel(), 0)


@dataclass(frozen=True)
class _Steps:
    """Per-block step sizes of Algorithm 5 and the scales of the stall stop."""

    Bt: sp.csr_matrix  # ``B^T``
    kappa_var: np.ndarray  # (n_vars,) ``1 / Psi_max(B_d)`` of each variable's block
    phi_row: np.ndarray  # (n_rows,) ``phi_d`` of each row's block
    phi_var: np.ndarray  # (n_vars,) ``phi_d`` of each variable's block
    qnorm: np.ndarray  # (n,) ``||q_d||_1``
    dual_scale: np.ndarray  # (n,) the unit of the stall stop's dual residual


def _step_sizes(blocks: _Blocks, phi: float, phi_scale: bool, dt: np.dtype) -> _Steps:
    """``kappa = 1 / Psi_max(B_d)`` per block (Collatz-Wielandt upper bound) and ``phi_d``
    (scaled by the block's size and mass with ``phi_scale``)."""
    n = blocks.pnorm.size
    Bt = blocks.B.T.tocsr()
    psi = _psi_max_bound(blocks.B, Bt, blocks.doc_of_var, n)
    rows_per_doc = np.bincount(blocks.doc_of_row, minlength=n)
    qnorm = np.bincount(blocks.doc_of_row, weights=np.abs(blocks.q), minlength=n)
    phi_doc = phi * rows_per_doc / np.maximum(qnorm, 1e-300) if phi_scale else np.full(n, phi)
    # (a float32 document of mass 1e-38 took phi_d past float32's range: inf, then NaN iterates)
    phi_doc = np.minimum(phi_doc, np.sqrt(np.finfo(dt).max))
    # the stall stop's bound on the dual residual ``(phi_d / kappa_d) ||x_d - x_d_old||``, in its
    # units (those of ``phi_d B_d^T q_d``, as ``x ~ q / B`` and ``1 / kappa ~ B^2``): those of
    # q without phi_scale, none with it (phi_d then divides by ||q_d||_1), so the
    # bound is ``||q_d||_1`` relative to the document's mass, as it is at unit mass. Against
    # ``||q_d||_1`` itself documents of mass 1e8 stopped at objectives 3 % above the optimum.
    dual_scale = qnorm / np.maximum(blocks.pnorm, 1e-300) if phi_scale else qnorm
    return _Steps(
        Bt,
        (1.0 / psi[blocks.doc_of_var]).astype(dt),
        phi_doc[blocks.doc_of_row].astype(dt),
        phi_doc[blocks.doc_of_var].astype(dt),
        qnorm,
        dual_scale,
    )


def _psi_max_bound(
    B: sp.csr_matrix, Bt: sp.csr_matrix, doc_of_var: np.ndarray, n: int
) -> np.ndarray:
    """An upper bound on the largest eigenvalue of each block's ``B_d^T B_d >= 0`` (``n,``): the
    Collatz-Wielandt ratio after 15 power iterations from the ones vector.

    The ratio bounds the eigenvalue only where the iterate is positive: an atom some 1e10 times
    weaker than its block's strongest underflows to 0 (0/0 made the step size NaN), so such a
    block takes the Gershgorin bound, the largest row sum of ``B_d^T B_d``, instead."""
    v = np.ones(B.shape[1], dtype=np.float64)
    for _ in range(15):
        v = Bt @ (B @ v)
        v /= np.sqrt(np.bincount(doc_of_var, weights=v * v, minlength=n))[doc_of_var]
    psi = np.zeros(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.maximum.at(psi, doc_of_var, (Bt @ (B @ v)) / v)
    weak = ~np.isfinite(psi)
    weak[doc_of_var[v <= 0]] = True
    if weak.any():
        row_sums = Bt @ (B @ np.ones(B.shape[1]))
        gershgorin = np.zeros(n)
        np.maximum.at(gershgorin, doc_of_var, row_sums)
        psi[weak] = gershgorin[weak]
    return psi


@dataclass(frozen=True)
class _AdmmOptions:
    """The parameters of the iterations (see :func:`l1_sparse_code`)."""

    gamma: float
    w: float
    tol: float
    tol_residual: float
    check_every: int
    stop: int  # the iteration cap: ``max_iter``, or ``polish_after`` when lower
    stall_stop: bool  # stalled residuals stop a block (ADMM only, no polish)


@dataclass(frozen=True)
class _WorkingSet:
    """The blocks still iterating: the global ids of their rows and variables (``rsel``,
    ``vsel``), their part of the system and of the step sizes."""

    rsel: np.ndarray
    vsel: np.ndarray
    B: sp.csr_matrix | np.ndarray  # dense once few blocks are left
    Bt: sp.csr_matrix | np.ndarray
    q: np.ndarray
    c: np.ndarray
    kappa: np.ndarray
    phi_var: np.ndarray
    inv_phi: np.ndarray  # ``1 / phi`` per row
    gamma_phi: np.ndarray  # ``gamma phi`` per row
    cost_step: np.ndarray  # ``kappa c / phi`` per variable
    doc_of_row: np.ndarray
    doc_of_var: np.ndarray


def _working_set(
    blocks: _Blocks,
    steps: _Steps,
    gamma: float,
    B: sp.csr_matrix | np.ndarray,
    Bt: sp.csr_matrix | np.ndarray,
    rsel: np.ndarray | None = None,
    vsel: np.ndarray | None = None,
) -> _WorkingSet:
    """The working set of rows ``rsel`` and variables ``vsel`` (``None``: all of them, the arrays
    as they are); ``B`` is their part of the system, ``Bt`` its transpose."""
    rows = slice(None) if rsel is None else rsel
    cols = slice(None) if vsel is None else vsel
    qw, cw, kw = blocks.q[rows], blocks.c[cols], steps.kappa_var[cols]
    pr, pv = steps.phi_row[rows], steps.phi_var[cols]
    dr, dv = blocks.doc_of_row[rows], blocks.doc_of_var[cols]
    return _WorkingSet(
        np.arange(qw.size) if rsel is None else rsel,
        np.arange(cw.size) if vsel is None else vsel,
        B,
        Bt,
        qw,
        cw,
        kw,
        pv,
        1 / pr,
        gamma * pr,
        kw * cw / pv,
        dr,
        dv,
    )


def _blocks_left(
    blocks: _Blocks, steps: _Steps, gamma: float, rsel: np.ndarray, vsel: np.ndarray
) -> _WorkingSet:
    """The working set of rows ``rsel`` and variables ``vsel``, dense once few blocks are left
    (cheaper per iteration)."""
    Bw = blocks.B[rsel][:, vsel]
    if rsel.size * vsel.size <= 1 << 16:
        Bw = Bw.toarray()
        return _working_set(blocks, steps, gamma, Bw, np.ascontiguousarray(Bw.T), rsel, vsel)
    return _working_set(blocks, steps, gamma, Bw, Bw.T.tocsr(), rsel, vsel)


@dataclass
class _Iterates:
    """The iterates of the working set: codes ``x``, dual ``theta``, ``e`` and ``B x``."""

    x: np.ndarray
    theta: np.ndarray
    e: np.ndarray
    Bx: np.ndarray


def _admm(
    blocks: _Blocks,
    steps: _Steps,
    options: _AdmmOptions,
    x: np.ndarray,
    gap: np.ndarray,
    converged: np.ndarray,
) -> tuple[int, _WorkingSet, np.ndarray]:
    """Algorithm 5 on every block from ``x`` until each is converged (removed at the check that
    finds it) or ``options.stop`` iterations. Writes the codes of every checked block into ``x``,
    their certified gaps into ``gap`` and marks ``converged``; returns the iterations run, the
    blocks still iterating and their codes."""
    working = _working_set(blocks, steps, options.gamma, blocks.B, steps.Bt)  # every block
    xw = x.copy()
    n_rows, dt = blocks.q.size, x.dtype
    state = _Iterates(xw, np.zeros(n_rows, dtype=dt), np.zeros(n_rows, dtype=dt), working.B @ xw)
    it = 0
    next_check, step = options.check_every, options.check_every
    while it < options.stop and working.rsel.size:
        it, x_old, res = _iterate(working, state, options.w, it, next_check, options.stop)
        done = _check(blocks, steps, options, working, state, x_old, res, x, gap)
        # checks cost more than iterations once few blocks are left: back off while none converge
        step = options.check_every if done.size else min(2 * step, 20 * options.check_every)
        next_check = it + step
        if done.size == 0:
            continue
        converged[done] = True
        rkeep, vkeep = ~converged[working.doc_of_row], ~converged[working.doc_of_var]
        working = _blocks_left(
            blocks, steps, options.gamma, working.rsel[rkeep], working.vsel[vkeep]
        )
        state = _Iterates(state.x[vkeep], state.theta[rkeep], state.e[rkeep], state.Bx[rkeep])
    return it, working, state.x


def _iterate(
    working: _WorkingSet, state: _Iterates, w: float, it: int, until: int, stop: int
) -> tuple[int, np.ndarray, np.ndarray]:
    """Iterations of Algorithm 5 on the working set after iteration ``it``, up to iteration
    ``until`` (the next convergence check) or ``stop``, whichever comes first (at least one):
    the iteration reached, ``x`` before the last iteration and the last primal residual
    ``q - B x - e``."""
    qw, Bw, Bwt, kw = working.q, working.B, working.Bt, working.kappa
    ipr, gpr, ckp = working.inv_phi, working.gamma_phi, working.cost_step
    xw, theta, e, Bx = state.x, state.theta, state.e, state.Bx
    while True:
        it += 1
        tp = theta * ipr
        z = qw - Bx
        z += tp
        cz = np.clip(z, -w * ipr, ipr)
        e = z - cz  # prox of the loss: soft(z, 1/phi) for w = 1; and B x + e - q - theta/phi = -cz
        x_old = xw  # (a new array each iteration: no copy)
        xw = xw + kw * (Bwt @ cz)
        xw -= ckp
        np.maximum(xw, 0, out=xw)
        Bx = Bw @ xw
        res = qw - Bx
        res -= e
        theta += gpr * res
        if not (it < until and it < stop):
            break
    state.x, state.e, state.Bx = xw, e, Bx  # (theta in place)
    return it, x_old, res


def _check(
    blocks: _Blocks,
    steps: _Steps,
    options: _AdmmOptions,
    working: _WorkingSet,
    state: _Iterates,
    x_old: np.ndarray,
    res: np.ndarray,
    x: np.ndarray,
    gap: np.ndarray,
) -> np.ndarray:
    """The convergence check of every block of the working set: its duality gap certifies the
    relative accuracy ``tol`` (or, with ``stall_stop``, its residuals have stalled: primal
    ``q - B x - e`` and dual ``(phi / kappa) (x - x_old)``, ``x_old`` the codes before the last
    iteration; see the module's docstring). Writes the blocks' codes into ``x`` and their gaps
    into ``gap``; returns the documents converged."""
    w, n = options.w, gap.size
    f_blk, g_blk = _objective_and_gap(working, state, w, n)
    docs_here = np.unique(working.doc_of_row)
    # relative to the document's own size (an absolute floor of 1e-12 certified documents
    # of mass below it at the first check, up to 8x above their optimum)
    scale = np.maximum(blocks.const + f_blk, 1e-12 * blocks.pnorm)
    ok = g_blk <= options.tol * scale
    if options.stall_stop:
        # ADMM only: a block whose residuals have stalled (float32 rounding, or steps too
        # small to move) stops too, uncertified. With the polish it is left to the exact LP
        # instead: stalled blocks were seen with relative gaps of 0.2 and objectives 4 %
        # above the optimum. The dual residual is the x-step's (``phi B^T (e - e_old)``, the
        # residual of the other update order, stopped a 4 x 6 block at 9 % above the optimum
        # while x drifted on, and 23 of 1,473 fuzzed documents more than 1 % above it).
        r_pri = np.sqrt(
            np.bincount(working.doc_of_row, weights=res.astype(np.float64) ** 2, minlength=n)
        )
        dx = (working.phi_var / working.kappa).astype(np.float64) * (state.x - x_old)
        r_dual = np.sqrt(np.bincount(working.doc_of_var, weights=dx**2, minlength=n))
        tol_residual = options.tol_residual
        ok |= (r_pri <= tol_residual * steps.qnorm) & (r_dual <= tol_residual * steps.dual_scale)
    x[working.vsel] = state.x
    gap[docs_here] = g_blk[docs_here]
    return docs_here[ok[docs_here]]


def _objective_and_gap(
    working: _WorkingSet, state: _Iterates, w: float, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per block (``n,``): the reduced objective of the iterates and its duality gap against the
    dual point ``theta`` clipped to ``[-w, 1]`` and scaled into ``{B^T theta <= c}``."""
    dr, dv, cw, qw = working.doc_of_row, working.doc_of_var, working.c, working.q
    fit = weighted_l1_loss(qw - state.Bx, w)
    f_blk = np.bincount(dr, weights=fit, minlength=n) + np.bincount(
        dv, weights=cw * state.x, minlength=n
    )
    th = np.clip(state.theta, -w, 1).astype(np.float64)
    s_var = working.Bt @ th
    # dual feasibility B^T theta <= c: scale theta by alpha = min(1, min_j c_j / s_j) over
    # s_j > 0; an atom with c_j = 0 (lam = 0) and s_j > 0 forces alpha = 0 (theta = 0 is
    # feasible since c >= 0), so the bound stays valid and no 0 / 0 arises
    ratio = np.divide(s_var, cw, out=np.where(s_var > 0, np.inf, 0.0), where=cw > 0)
    over = np.zeros(n)
    np.maximum.at(over, dv, ratio)
    alpha = np.where(over > 1, 1 / np.maximum(over, 1e-300), 1.0)
    dual_blk = alpha * np.bincount(dr, weights=qw * th, minlength=n)
    return f_blk, np.maximum(f_blk - dual_blk, 0)


def _polish_unconverged(
    blocks: _Blocks,
    working: _WorkingSet,
    xw: np.ndarray,
    w: float,
    x: np.ndarray,
    gap: np.ndarray,
    converged: np.ndarray,
) -> int:
    """Solve the blocks still iterating (their ADMM codes ``xw``) exactly (:func:`_polish`):
    their codes into ``x``, and a gap of 0 and converged for each block solved; returns how
    many were."""
    rsel, vsel = working.rsel, working.vsel
    x_lp, solved = _polish(
        blocks.B[rsel][:, vsel],
        blocks.q[rsel],
        blocks.c[vsel],
        w,
        blocks.doc_of_row[rsel],
        blocks.doc_of_var[vsel],
    )
    x[vsel] = np.where(solved, x_lp, xw)  # a group HiGHS failed on keeps the ADMM iterates
    left = np.unique(blocks.doc_of_var[vsel[solved]])
    converged[left] = True
    gap[left] = 0.0
    return int(left.size)


def _exact_objective(
    blocks: _Blocks, x: np.ndarray, lam: float, w: float
) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``(objective, reconstruction_error)`` of every document for the codes ``x``."""
    n = blocks.pnorm.size
    fit = weighted_l1_loss((blocks.q - blocks.B @ x).astype(np.float64), w)
    lx = np.bincount(blocks.doc_of_var, weights=x, minlength=n)
    rec = blocks.const + np.bincount(blocks.doc_of_row, weights=fit, minlength=n)
    rec += np.bincount(blocks.doc_of_var, weights=w * blocks.off_mass * x, minlength=n)
    return rec + lam * lx, rec


def _warn_unconverged(converged: np.ndarray, stop: int) -> None:
    """``ConvergenceWarning`` when documents are left unconverged (see :func:`l1_sparse_code`)."""
    left = int(converged.size - np.count_nonzero(converged))
    if left:
        warnings.warn(
            f"l1_sparse_code: {left} of {converged.size} documents did not converge within "
            f"{stop} ADMM iterations (no exact LP polish, or the polish failed): their "
            "objectives are upper bounds, within `gap` of the optimum (`converged` is false)",
            ConvergenceWarning,
            stacklevel=3,
        )


# Variables of one polishing LP: documents are independent blocks, solved in groups this big.
# HiGHS holds ~750 bytes per variable (300,000 at once took 214 MB), and its simplex is faster on
# several small LPs than on one large one: on recorded detector windows (700 documents, 1,500
# atoms, 33,000 variables) the polish took 0.114 s a window in groups of 4,096 against 0.143 s
# in groups of 32,768 (without presolve; 1,024: 0.153 s).
_POLISH_VARS = 1 << 12
# HiGHS options of the polishing LP: its presolve finds nothing to remove in stacked blocks of a
# few rows each and costs time (the whole coding of those windows, groups of 4,096: 0.168 s
# without it against 0.204 s with it, identical optima).
_POLISH_OPTIONS: dict[str, str | bool] = {"presolve": "off", "output_flag": False}


def _polish(
    B: sp.spmatrix,
    q: np.ndarray,
    c: np.ndarray,
    w: float,
    row_doc: np.ndarray,
    var_doc: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact codes of stacked reduced blocks: ``min_{x>=0} sum loss(q - B x) + c^T x``, solved by
    HiGHS as the LP

        min (c + w B^T 1)^T x + (1 + w) 1^T u   s.t.   B x + u >= q,   x, u >= 0

    (at an optimum ``u = max(q - B x, 0)``, and ``(1 + w) u - w (q - B x)`` is the loss of each
    row up to the constant ``-w 1^T q``): one slack per row instead of the two of
    ``q - B x = u - v``. ``B`` is block diagonal (rows and variables of a document, ``row_doc`` /
    ``var_doc``), so groups of whole documents of about :data:`_POLISH_VARS` variables are solved
    one LP at a time, through ``highspy`` directly: ``scipy.optimize.linprog`` around the same
    solver spent a third of the polish in Python (its result loops over every column; recorded
    windows at the 1,500-atom cap: 0.071 s against 0.114 s a window, identical optima).
    Returns the codes and which variables are solved: those of a group HiGHS rejects or reports
    no optimum for are not (their codes are 0), and the other groups keep their exact codes
    (one failed group discarded the codes of every group).

    Each document's rows are solved at unit scale (``q_d`` divided by ``||q_d||_1``, its codes
    multiplied back: the LP is positively homogeneous in ``q``, ``x`` and ``u``): HiGHS's
    tolerances are absolute (about ``1e-7``), and a document of entries that small came back
    with all-zero codes, certified exact, at an objective far above the optimum. Each atom's
    column is likewise solved at unit largest entry (``x_j`` scaled by it): HiGHS drops matrix
    entries below ``1e-9``, and an atom of such entries was left out of the optimum."""
    B = sp.csr_matrix(B, dtype=np.float64)
    x = np.zeros(B.shape[1], dtype=np.float64)
    solved = np.zeros(B.shape[1], dtype=bool)
    if not x.size:
        return x, solved
    doc_scale = np.bincount(
        row_doc, weights=np.abs(q), minlength=int(max(row_doc.max(), var_doc.max())) + 1
    )
    q = np.asarray(q, dtype=np.float64) / np.where(doc_scale > 0, doc_scale, 1.0)[row_doc]
    docs, per_doc = np.unique(var_doc, return_counts=True)
    group_of_doc = np.cumsum(per_doc) // _POLISH_VARS
    at = np.minimum(np.searchsorted(docs, row_doc), docs.size - 1)
    row_group = np.where(docs[at] == row_doc, group_of_doc[at], -1)  # -1: a document without vars
    var_group = group_of_doc[np.searchsorted(docs, var_doc)]
    # the core solver: the Python ``Highs`` wrapper installs a log callback whose first use
    # prints HiGHS's banner on the process's stdout (a query's JSON output then starts with it)
    highs = highspy._core._Highs()
    for name, value in _POLISH_OPTIONS.items():
        highs.setOptionValue(name, value)
    for g in np.unique(group_of_doc):
        rows, cols = np.flatnonzero(row_group == g), np.flatnonzero(var_group == g)
        r, n_vars = rows.size, cols.size
        Bg = B[rows][:, cols]
        cost = np.asarray(c[cols], dtype=np.float64) + w * np.asarray(Bg.sum(axis=0)).ravel()
        col_max = np.asarray(abs(Bg).max(axis=0).todense()).ravel()
        col_scale = np.where(col_max > 0, col_max, 1.0)
        lp = _lp(
            np.r_[cost / col_scale, np.full(r, 1.0 + w)],
            sp.hstack([Bg @ sp.diags(1.0 / col_scale), sp.identity(r, format="csr")], format="csc"),
            np.asarray(q[rows], dtype=np.float64),
        )
        if highs.passModel(lp) == highspy.HighsStatus.kError:
            continue  # (HiGHS rejects entries above 1e15, for one)
        highs.run()
        if highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            continue
        x[cols] = np.maximum(np.asarray(highs.getSolution().col_value[:n_vars]), 0) / col_scale
        solved[cols] = True
    return x * doc_scale[var_doc], solved


def _lp(cost: np.ndarray, A: sp.csc_matrix, lower: np.ndarray) -> highspy.HighsLp:
    """``min cost^T z  s.t.  A z >= lower,  z >= 0`` as a HiGHS model."""
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(A.shape[1])
    lp.col_upper_ = np.full(A.shape[1], np.inf)
    lp.row_lower_ = lower
    lp.row_upper_ = np.full(A.shape[0], np.inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = A.shape[1], A.shape[0]
    lp.a_matrix_.start_ = A.indptr
    lp.a_matrix_.index_ = A.indices
    lp.a_matrix_.value_ = A.data
    return lp


def l1_sparse_code_dense(
    P: sp.spmatrix | np.ndarray,
    A: np.ndarray,
    lam: float = 0.1,
    *,
    phi: float = 5.0,
    gamma: float = 1.89,
    max_iter: int = 500,
    tol: float = 1e-4,
    dtype: npt.DTypeLike = np.float64,
) -> np.ndarray:
    """Naive dense Algorithm 5 on full ``m x n`` matrices (the speed baseline of the benchmarks).

    ``kappa = 1 / Psi_max(A)`` as in the paper, no screening, no reduction; stops when the primal
    and dual residuals (Frobenius) fall below ``tol``. Returns the codes as a dense ``(k, n)``.
    """
    Pd = np.asarray(P.toarray() if is_sparse(P) else P, dtype=dtype)
    A = np.asarray(A, dtype=dtype)
    kappa = 1.0 / np.linalg.norm(A, 2) ** 2
    X = np.zeros((A.shape[1], Pd.shape[1]), dtype=dtype)
    theta = np.zeros_like(Pd)
    E = np.zeros_like(Pd)
    AX = A @ X
    for _ in range(max_iter):
        Z = Pd - AX + theta / phi
        E_old = E
        E = np.sign(Z) * np.maximum(np.abs(Z) - 1 / phi, 0)
        X = np.maximum(X - kappa * (A.T @ (AX + E - Pd - theta / phi) + lam / phi), 0)
        AX = A @ X
        R = Pd - AX - E
        theta += gamma * phi * R
        if np.linalg.norm(R) < tol and phi * np.linalg.norm(A.T @ (E - E_old)) < tol:
            break
    return X
