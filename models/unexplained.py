"""Which terms a document's sparse code leaves unexplained: the reason it scored as novel.

The novelty score of Kasiviswanathan et al. (NIPS 2012) is the optimum of Eq. (3),
``min_{x >= 0} ||p - A x||_1 + lambda ||x||_1``. Its l1 loss (the paper's reason for preferring it
to the squared loss) lets the residual ``p - A x`` be sparse: a document that repeats known
stories and adds something new is coded by the known atoms, and the residual keeps the new part
whole instead of spreading it over the code. :func:`top_unexplained` names that part: per document
the terms of largest unexplained mass ``max(0, p_i - (A x)_i)``, which an analyst reads as "novel
because of these words".

Since ``A >= 0`` and ``x >= 0``, the residual is positive only on the document's own terms, so
only those entries of ``A x`` are needed; they are read from ``A`` times a block of codes at a time
(``block`` documents: an ``m x block`` array), never a dense copy of the documents.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["top_unexplained"]


def top_unexplained(
    P: sp.spmatrix | np.ndarray,
    A: sp.spmatrix | np.ndarray,
    codes: sp.spmatrix | np.ndarray,
    n_top: int,
    block: int = 128,
    min_share: float = 1e-3,
) -> tuple[np.ndarray, np.ndarray]:
    """Per document (column of ``P``) the ``n_top`` terms of largest unexplained mass.

    Parameters
    ----------
    P : (m, n) non-negative documents as columns (term weights, as coded).
    A : (m, k) non-negative dictionary the documents were coded against (dense or sparse).
    codes : (n, k) non-negative codes, one row a document (:attr:`L1CodingResult.codes`).
    n_top : how many terms per document.
    block : documents whose ``A x`` is formed at once (memory ``m * block`` floats).
    min_share : a term counts as unexplained only when its mass exceeds this share of the
        document's weight ``||p||_1``: the coding stops within a tolerance, and a term explained
        up to a few 1e-9 is explained.

    Returns
    -------
    rows : (n, n_top) int64 term indices by decreasing mass ``max(0, p_i - (A x)_i)`` (ties: the
        lower index), only terms of mass above ``min_share * ||p||_1``, ``-1`` padded.
    mass : (n, n_top) float64, the masses of ``rows`` (0 where padded).
    """
    P = sp.csc_matrix(P)
    C = sp.csr_matrix(codes)
    m, n = P.shape
    if A.shape[0] != m or C.shape != (n, A.shape[1]):
        raise ValueError(
            f"shapes do not match: P {P.shape}, A {A.shape}, codes {C.shape} (expected "
            f"({n}, {A.shape[1]}))"
        )
    if n_top < 0 or block < 1 or not min_share >= 0:
        raise ValueError(
            f"n_top and min_share must be >= 0 and block >= 1, got {n_top}, {min_share} and {block}"
        )
    floor = min_share * np.asarray(abs(P).sum(axis=0), dtype=np.float64).ravel()
    rows = np.full((n, n_top), -1, dtype=np.int64)
    mass = np.zeros((n, n_top), dtype=np.float64)
    if n_top == 0:
        return rows, mass
    for start in range(0, n, block):
        stop = min(n, start + block)
        Pb = P[:, start:stop]
        explained = A @ C[start:stop].T  # (m, b): dense when A is, else sparse
        if sp.issparse(explained):
            explained = explained.toarray()
        doc = np.repeat(np.arange(stop - start), np.diff(Pb.indptr))
        left = Pb.data.astype(np.float64) - np.asarray(explained, np.float64)[Pb.indices, doc]
        left[left <= floor[doc + start]] = 0.0
        _keep_largest(doc + start, Pb.indices, left, rows, mass)
    return rows, mass


def _keep_largest(
    doc: np.ndarray, term: np.ndarray, left: np.ndarray, rows: np.ndarray, mass: np.ndarray
) -> None:
    """Write into ``rows`` / ``mass`` the largest positive ``left`` of each ``doc`` (entries
    ``(doc, term, left)``), at most ``rows.shape[1]`` each, decreasing, ties by lower term."""
    pos = left > 0
    doc, term, left = doc[pos], term[pos], left[pos]
    order = np.lexsort((term, -left, doc))
    doc, term, left = doc[order], term[order], left[order]
    rank = np.arange(doc.size) - np.searchsorted(doc, doc)
    keep = rank < rows.shape[1]
    rows[doc[keep], rank[keep]] = term[keep]
    mass[doc[keep], rank[keep]] = left[keep]
