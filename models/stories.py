"""Novel documents of one story: groups of documents whose TF-IDF vectors are alike.

A breaking story arrives as many documents at once (a retweet storm, a wire story picked up by
every outlet), and every one of them is novel against a dictionary that has not seen it: the
top-``q`` cut of a window then flags a story many times over. :func:`similar_groups` joins
documents whose cosine similarity reaches a threshold and returns the connected components
(single link, as first-story detection threads documents, Petrovic et al. 2010), so that an
alert can stand for a story instead of for each of its copies.

The cosine similarities are computed a block of documents at a time against all of them
(``block x n`` entries), and only those reaching the threshold are kept, as a sparse graph.
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
    each group's first column; a document without terms is a group of its own."""
    if not 0 < min_similarity <= 1:
        raise ValueError(f"min_similarity must be in (0, 1], got {min_similarity}")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    F = sp.csc_matrix(X, dtype=np.float64)
    n = F.shape[1]
    norms = np.sqrt(np.asarray(F.multiply(F).sum(axis=0)).ravel())
    F = F @ sp.diags(np.divide(1.0, norms, out=np.zeros(n), where=norms > 0))
    FT = F.T.tocsr()
    edges = []
    for start in range(0, n, block):
        S = sp.coo_matrix(FT[start : start + block] @ F)
        keep = S.data >= min_similarity - _TOLERANCE
        edges.append((S.row[keep] + start, S.col[keep]))
    rows = np.concatenate([e[0] for e in edges]) if edges else np.zeros(0, np.int64)
    cols = np.concatenate([e[1] for e in edges]) if edges else np.zeros(0, np.int64)
    graph = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    # relabel in order of first appearance (connected_components' order is the same, but its
    # documentation does not promise it)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]
