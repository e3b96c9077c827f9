"""Novel documents of one story: groups of documents whose TF-IDF vectors are alike.

A breaking story arrives as many documents at once (a retweet storm, a wire story picked up by
every outlet), and every one of them is novel against a dictionary that has not seen it: the
top-``q`` cut of a window then flags a story many times over. :func:`similar_groups` joins
documents whose cosine similarity reaches a threshold and returns the connected components
(single link, as first-story detection threads documents, Petrovic et al. 2010), so that an
alert can stand for a story instead of for each of its copies.

Exact copies (identical normalised vectors) are one document to the search, and the cosine
similarities of the others are computed a block of documents at a time against the documents
from the block on (``block x n`` entries at most). The pairs reaching the threshold are merged
into the components after each block, and only the components are kept between blocks (a star:
each document joined to its component's node), so memory grows as ``n + block * n``: keeping
every similar pair until the end made a storm of 8,000 near-identical novel documents hold its
32 million pairs (2.5 GB).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

__all__ = ["similar_groups"]

# Cosines within this of the threshold count as reaching it (exact copies: 1 - 1e-16).
_TOLERANCE = 1e-9


def similar_groups(
    X: sp.spmatrix | np.ndarray, min_similarity: float, block: int = 512
) -> np.ndarray:
    """Group label per column of ``X`` (documents as columns, non-negative term weights):
    the connected components of the graph joining two documents whose cosine similarity is at
    least ``min_similarity`` (in ``(0, 1]``). Labels are ``0 .. n_groups - 1`` in the order of
    each group's first column; a document without terms is a group of its own. Memory:
    ``O(nnz(X) + block * n)``."""
    if not 0 < min_similarity <= 1:
        raise ValueError(f"min_similarity must be in (0, 1], got {min_similarity}")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    F = sp.csc_matrix(X, dtype=np.float64)
    n = F.shape[1]
    norms = np.sqrt(np.asarray(F.multiply(F).sum(axis=0)).ravel())
    F = sp.csc_matrix(F @ sp.diags(np.divide(1.0, norms, out=np.zeros(n), where=norms > 0)))
    copy_of = _first_copies(F, norms > 0)
    distinct = np.flatnonzero(copy_of == np.arange(n))
    labels = _components(F[:, distinct], min_similarity - _TOLERANCE, block)
    labels = labels[np.searchsorted(distinct, copy_of)]
    # relabel in order of first appearance (connected_components' order is the same, but its
    # documentation does not promise it)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]


def _first_copies(F: sp.csc_matrix, has_terms: np.ndarray) -> np.ndarray:
    """Per column of ``F``, the first column stored exactly as it is (itself if none before
    it is), among the columns with terms (a column without terms stays its own). Columns are
    grouped by a hash of their entries, and each is checked entry by entry against its group's
    first: a hash collision only leaves a copy uncollapsed. A copy's cosine with its first is
    its squared norm, 1 within rounding, so it reaches any threshold: the copies are one group
    whatever the threshold, and have the same cosines as their first with every other column."""
    n = F.shape[1]
    nnz = np.diff(F.indptr)
    column = np.repeat(np.arange(n), nnz)
    position = F.indices.astype(np.float64)
    keys = (
        np.bincount(column, weights=F.data * (position + 1.0), minlength=n),
        np.bincount(column, weights=F.data, minlength=n),
        np.bincount(column, weights=position, minlength=n),
        nnz,
    )
    order = np.lexsort(keys)  # stable: each group's first in column order
    starts = np.ones(n, dtype=bool)
    starts[1:] = np.any([np.diff(key[order]) != 0 for key in keys], axis=0)
    first = np.empty(n, dtype=np.int64)
    first[order] = order[np.flatnonzero(starts)][np.cumsum(starts) - 1]
    # entry by entry against the group's first (same nnz: the hash includes it)
    entry = np.arange(F.nnz) - F.indptr[column] + F.indptr[first[column]]
    differ = (F.indices != F.indices[entry]) | (F.data != F.data[entry])
    alone = ~has_terms
    alone[column[differ]] = True
    return np.where(alone, np.arange(n), first)


def _components(F: sp.csc_matrix, threshold: float, block: int) -> np.ndarray:
    """Connected-component labels of the columns of ``F`` (unit or zero columns) joined when
    their dot product is at least ``threshold``: the products of each block of columns with the
    columns from the block on, merged into the components before the next block."""
    n = F.shape[1]
    FT = sp.csr_matrix(F.T)
    labels = np.arange(n)
    for start in range(0, n, block):
        # (n - start) x block: the documents from the block on (rows, in order) by the block's
        S = sp.csr_matrix(FT[start:] @ F[:, start : start + block])
        S.data[S.data < threshold] = 0  # dropped (scipy's products store no zeros of their own)
        S.eliminate_zeros()
        rows = np.repeat(np.arange(start, n), np.diff(S.indptr))
        cols = S.indices + start
        del S
        joining = labels[rows] != labels[cols]
        if joining.any():
            labels = _merged(labels, rows[joining], cols[joining])
    return labels


def _merged(labels: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Component labels after joining ``rows[i]`` (ascending) and ``cols[i]`` to the components
    ``labels``: the components of the new edges plus a star, each label's node ``n + label``
    joined to its members (the adjacency built in CSR order directly: no sort of the edges)."""
    n = labels.size
    n_labels = int(labels.max()) + 1
    counts = np.concatenate([np.bincount(rows, minlength=n), np.bincount(labels)])
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = np.concatenate([cols, np.argsort(labels, kind="stable")])
    graph = sp.csr_matrix(
        (np.ones(indices.size), indices, indptr), shape=(n + n_labels, n + n_labels)
    )
    return connected_components(graph, directed=False)[1][:n]
