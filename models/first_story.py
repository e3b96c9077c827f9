"""Nearest-neighbour first-story detection: the classic peer of dictionary-based novelty scores.

A document's novelty is ``1 - max_j cos(d, d_j)`` over earlier documents ``d_j`` (Allan et al.
1998, "On-line new event detection and tracking"; Petrovic, Osborne and Lavrenko 2010, "Streaming
first story detection with application to Twitter"). Two estimators, both with the streaming API
``score_samples(X)`` (score against the memory, no update) and ``partial_fit(X)`` (add to memory):

* :class:`ExactFirstStory` compares with every stored document by chunked sparse products;
* :class:`LSHFirstStory` follows Petrovic et al.: random-hyperplane signatures in ``n_tables``
  hash tables, buckets bounded to their ``bucket_size`` most recent documents, and a fallback
  comparison with the ``n_recent`` most recent documents; the exact cosine is computed only with
  the candidates found. Everything is vectorised over the documents of a batch.

Rows of ``X`` are documents (any non-negative or real weighting, e.g. TF-IDF, dense or sparse);
rows are L2-normalised internally. The vocabulary may grow between calls (more columns): stored
vectors are zero-padded, so columns must keep their meaning (an append-only vocabulary); a
narrower ``X`` than the memory raises ``ValueError``. ``n_features_in_`` is the memory's width.

Scores lie in ``[0, 1]``: the largest cosine counts from 0 (an empty memory, or only negative
cosines) and is clipped at 1 (an exact duplicate's rounds to ``1 + 4e-16``). A row without any
non-zero entry (a document without terms) has cosine 0 with everything and so scores 1 here;
the offline evaluation (:class:`sparsewatch.replay.eval_methods.FirstStoryMethod`) scores such a
document 0, as the product's detector and the l1 methods do ("nothing to explain").

``score_samples`` learns nothing: a row's score depends on the memory only, whatever the order or
batching of the rows. ``partial_fit`` and ``score_stream`` depend on the order by design (a
document is novel against the ones before it), as first-story detection is defined.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.preprocessing import normalize
from sklearn.utils import Tags
from sparsewatch.models.novelty import _check_documents


def _rows_l2(X: sp.spmatrix | np.ndarray) -> sp.csr_matrix:
    """Rows of ``X`` as unit-l2 CSR rows (zero rows stay zero). Duplicate stored entries of a
    sparse ``X`` are summed first, on a copy: the norm counted ``a`` and ``b`` as ``a^2 + b^2``
    instead of ``(a + b)^2``, so cosines exceeded 1 and novelty went negative."""
    X = sp.csr_matrix(X, dtype=np.float64)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return normalize(X, norm="l2", copy=True) if X.shape[0] else X


def _checked(
    model: _FirstStoryBase, X: sp.spmatrix | np.ndarray, fitting: bool = False
) -> sp.spmatrix | np.ndarray:
    """``X`` checked (:func:`~sparsewatch.models.novelty._check_documents`, real values): for
    ``fitting``, with documents and terms; else, once a memory exists, at least as wide as it
    (an empty window stores nothing; before any memory, every document is novel)."""
    if fitting:
        return _check_documents(X, model, non_negative=False)
    n_features_in = model.n_features_in_ if hasattr(model, "memory_") else 0
    return _check_documents(X, model, n_features_in=n_features_in, non_negative=False)


class _FirstStoryBase(BaseEstimator):
    """What the two nearest-neighbour memories share: tags, the memory's width, storing rows in
    it, aligning queries with it and the novelty score.

    Subclasses implement ``max_similarity(X)``, the (exact or approximate) largest cosine of each
    row of ``X`` with the memory."""

    memory_: sp.csr_matrix

    def __sklearn_tags__(self) -> Tags:
        """Dense or sparse real input (any weighting)."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    @property
    def n_features_in_(self) -> int:
        """Width of the memory: the most terms of any stored batch."""
        return int(self.memory_.shape[1])

    def score_samples(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        """Novelty ``1 - max cosine`` against the memory (higher is more novel; approximate
        where :meth:`max_similarity` is)."""
        return 1.0 - self.max_similarity(X)

    def _store(self, Xn: sp.csr_matrix) -> tuple[sp.csr_matrix, int]:
        """Append unit-l2 rows to the memory (the narrower of the two zero-padded to the other's
        width); return the rows as stored and the memory index of the first."""
        if not hasattr(self, "memory_"):
            self.memory_ = Xn
            return Xn, 0
        M, Xn = _align(self.memory_, Xn)
        self.memory_ = sp.vstack([M, Xn], format="csr")
        return Xn, M.shape[0]

    def _query(self, X: sp.spmatrix | np.ndarray) -> tuple[sp.csr_matrix, sp.csr_matrix | None]:
        """The rows of ``X`` checked and unit-l2, and the memory at their common width
        (``None`` while it holds no document: every similarity is then 0)."""
        Q = _rows_l2(_checked(self, X))
        if not hasattr(self, "memory_") or self.memory_.shape[0] == 0:
            return Q, None
        M, Q = _align(self.memory_, Q)
        return Q, M


def _pad_cols(M: sp.csr_matrix, n_cols: int) -> sp.csr_matrix:
    if M.shape[1] >= n_cols:
        return M
    return sp.csr_matrix((M.data, M.indices, M.indptr), shape=(M.shape[0], n_cols))


def _align(A: sp.csr_matrix, B: sp.csr_matrix) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    n = max(A.shape[1], B.shape[1])
    return _pad_cols(A, n), _pad_cols(B, n)


class ExactFirstStory(_FirstStoryBase):
    """Exact nearest-neighbour novelty: ``1 - max cosine`` with every stored document.

    Parameters
    ----------
    chunk_size : stored documents compared per sparse product (bounds the dense similarity block
        to ``n_queries x chunk_size``).

    Attributes
    ----------
    memory_ : CSR (n, m) the stored documents, unit l2 rows; n_features_in_ : its width ``m``.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.first_story import ExactFirstStory
    >>> model = ExactFirstStory().fit(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    >>> model.score_samples(np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 2.0]])).round(3)
    array([0.293, 1.   ])
    >>> model.score_stream(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 3.0]]))  # the second repeats
    array([1., 0.])
    >>> model.memory_.shape
    (4, 3)
    """

    def __init__(self, chunk_size: int = 4096) -> None:
        self.chunk_size = chunk_size

    def partial_fit(self, X: sp.spmatrix | np.ndarray, y: None = None) -> ExactFirstStory:
        """Append the rows of ``X`` to the memory."""
        self._store(_rows_l2(_checked(self, X)))
        return self

    def fit(self, X: sp.spmatrix | np.ndarray, y: None = None) -> ExactFirstStory:
        """Forget the memory, then store ``X``."""
        X = _checked(self, X, fitting=True)
        if hasattr(self, "memory_"):
            del self.memory_
        return self.partial_fit(X)

    def max_similarity(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        """Largest cosine similarity of each row of ``X`` with the memory (0 when empty)."""
        Q, M = self._query(X)
        best = np.zeros(Q.shape[0])
        if M is None:
            return best
        QT = Q.T.tocsr()
        for start in range(0, M.shape[0], self.chunk_size):
            S = (M[start : start + self.chunk_size] @ QT).toarray()
            np.maximum(best, S.max(axis=0), out=best)
        return np.minimum(best, 1.0, out=best)

    def score_stream(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        """Score each row against the memory AND the earlier rows of ``X``, then store ``X``.

        The rows are compared with the earlier ones ``chunk_size`` rows at a time (a dense
        ``chunk_size x n`` block at most, ``n`` the rows of ``X``): the whole batch's ``n x n``
        block peaked at 612 MB for 5,990 documents, against 5 MB for :meth:`score_samples`.
        Each entry is the same product as in the whole block, so the scores are the same."""
        Q = _rows_l2(_checked(self, X))
        best = self.max_similarity(Q)
        n = Q.shape[0]
        for start in range(0, n, self.chunk_size):
            stop = min(start + self.chunk_size, n)
            S = (Q[start:stop] @ Q[:stop].T).toarray()  # rows start..stop-1, columns 0..stop-1
            S[:, start:][np.triu_indices(stop - start)] = 0.0  # the row itself and later rows
            np.maximum(best[start:stop], S.max(axis=1), out=best[start:stop])
        self.partial_fit(Q)
        return 1.0 - np.minimum(best, 1.0, out=best)


class LSHFirstStory(_FirstStoryBase):
    """Approximate nearest-neighbour novelty with random-hyperplane LSH (Petrovic et al. 2010).

    Parameters
    ----------
    n_bits : signature bits per table (hyperplanes); documents colliding in a table share all bits.
    n_tables : independent hash tables; candidates are the union of the query's buckets.
    bucket_size : a bucket keeps only its most recent ``bucket_size`` documents.
    n_recent : the query is also compared with the most recent ``n_recent`` stored documents.
    random_state : seed of the hyperplanes (drawn feature by feature as the vocabulary grows).

    Attributes
    ----------
    memory_ : CSR (n, m) the stored documents, unit l2 rows; n_features_in_ : its width ``m``;
    planes_ : (m', n_tables * n_bits) hyperplanes (``m' >= m``: scoring a wider batch draws
    more); table_keys_, table_docs_ : per table, the bucket key and document of every entry.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.first_story import LSHFirstStory
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((200, 30)) * (rng.random((200, 30)) < 0.2)
    >>> model = LSHFirstStory(n_bits=8, n_tables=4, n_recent=10).fit(X)
    >>> new = np.eye(1, 31, 30)  # a document on a term new to the vocabulary
    >>> scores = model.score_samples(np.vstack([np.hstack([X[:5], np.zeros((5, 1))]), new]))
    >>> np.abs(scores).round(3)  # stored documents are found in their buckets
    array([0., 0., 0., 0., 0., 1.])
    """

    def __init__(
        self,
        n_bits: int = 13,
        n_tables: int = 16,
        bucket_size: int = 32,
        n_recent: int = 1000,
        random_state: int = 0,
    ) -> None:
        self.n_bits = n_bits
        self.n_tables = n_tables
        self.bucket_size = bucket_size
        self.n_recent = n_recent
        self.random_state = random_state

    def _planes(self, n_features: int) -> np.ndarray:
        """Hyperplanes for ``n_features`` columns, growing deterministically with the vocabulary."""
        if not hasattr(self, "planes_"):
            self.planes_ = np.zeros((0, self.n_bits * self.n_tables))
            self.rng_ = np.random.default_rng(self.random_state)
        extra = n_features - self.planes_.shape[0]
        if extra > 0:
            new = self.rng_.standard_normal((extra, self.planes_.shape[1]))
            self.planes_ = np.vstack([self.planes_, new])
        return self.planes_

    def _keys(self, Q: sp.csr_matrix) -> np.ndarray:
        """Integer bucket key of each row in each table, shape ``(n_rows, n_tables)``.

        Only the first ``Q.shape[1]`` hyperplane rows are used: ``planes_`` may have grown wider
        (a wider batch scored, or a re-fit on fewer columns), and zero-padded columns would add
        nothing to the products, so a row's keys do not depend on how wide ``planes_`` is.
        """
        H = np.asarray(Q @ self._planes(Q.shape[1])[: Q.shape[1]]) > 0
        H = H.reshape(Q.shape[0], self.n_tables, self.n_bits)
        weights = 1 << np.arange(self.n_bits, dtype=np.int64)
        return (H * weights).sum(axis=2)

    def _candidates(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(query row, stored doc) pairs sharing a bucket in some table."""
        q_all, d_all = [], []
        for t in range(self.n_tables):
            tk, td = self.table_keys_[t], self.table_docs_[t]
            lo = np.searchsorted(tk, keys[:, t], side="left")
            hi = np.searchsorted(tk, keys[:, t], side="right")
            counts = hi - lo
            q = np.repeat(np.arange(keys.shape[0]), counts)
            pos = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
            q_all.append(q)
            d_all.append(td[np.repeat(lo, counts) + pos])
        return np.concatenate(q_all), np.concatenate(d_all)

    def max_similarity(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        """Approximate largest cosine of each row of ``X`` with the stored documents."""
        Q, M = self._query(X)
        best = np.zeros(Q.shape[0])
        if M is None:
            return best
        q, d = self._candidates(self._keys(Q))
        if q.size:
            pair = np.unique(q.astype(np.int64) * M.shape[0] + d)
            q, d = pair // M.shape[0], pair % M.shape[0]
            sims = np.asarray(Q[q].multiply(M[d]).sum(axis=1)).ravel()
            np.maximum.at(best, q, sims)
        recent = M[max(0, M.shape[0] - self.n_recent) :]
        if recent.shape[0]:
            np.maximum(best, (Q @ recent.T).toarray().max(axis=1), out=best)
        return np.minimum(best, 1.0, out=best)

    def partial_fit(self, X: sp.spmatrix | np.ndarray, y: None = None) -> LSHFirstStory:
        """Store the rows of ``X`` and insert them into every table's buckets."""
        Xn = _rows_l2(_checked(self, X))
        if not hasattr(self, "memory_"):
            self.table_keys_ = [np.zeros(0, np.int64) for _ in range(self.n_tables)]
            self.table_docs_ = [np.zeros(0, np.int64) for _ in range(self.n_tables)]
        Xn, first = self._store(Xn)
        keys = self._keys(Xn)
        ids = np.arange(first, first + Xn.shape[0], dtype=np.int64)
        for t in range(self.n_tables):
            k = np.concatenate([self.table_keys_[t], keys[:, t]])
            docs = np.concatenate([self.table_docs_[t], ids])
            order = np.lexsort((-docs, k))  # by key, newest first within a key
            k, docs = k[order], docs[order]
            starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
            rank = np.arange(k.size) - np.repeat(starts, np.diff(np.r_[starts, k.size]))
            keep = rank < self.bucket_size
            self.table_keys_[t], self.table_docs_[t] = k[keep], docs[keep]
        return self

    def fit(self, X: sp.spmatrix | np.ndarray, y: None = None) -> LSHFirstStory:
        """Forget everything learned, hyperplanes included, then store ``X``. The hyperplanes are
        drawn again from ``random_state``: the same ones for the same parameters (they depend only
        on ``random_state`` and the number of columns, whatever the order of growth), new ones
        after ``set_params`` changed ``random_state``, ``n_bits`` or ``n_tables`` (kept, they
        were the old seed's, or of the old width, which failed to reshape into the tables)."""
        X = _checked(self, X, fitting=True)
        for name in ("memory_", "table_keys_", "table_docs_", "planes_", "rng_"):
            if hasattr(self, name):
                delattr(self, name)
        return self.partial_fit(X)
