"""``ExactFirstStory.score_stream`` compares a batch's rows with the earlier ones ``chunk_size``
rows at a time.

It built the whole batch's dense ``n x n`` similarity block, unbounded by ``chunk_size``: 5,990
documents peaked at 612 MB against 5 MB for ``score_samples``. The scores must stay the ones the
whole block gave, bit for bit.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.first_story import ExactFirstStory, _rows_l2


def _whole_block_scores(model: ExactFirstStory, X: sp.spmatrix) -> np.ndarray:
    """The former ``score_stream`` (memory, then the earlier rows of the batch through one dense
    ``n x n`` block): the reference the chunked one must equal."""
    Q = _rows_l2(X)
    best = model.max_similarity(Q)
    S = (Q @ Q.T).toarray()
    S[np.triu_indices_from(S)] = 0.0
    if S.shape[0]:
        np.maximum(best, S.max(axis=1), out=best)
    return 1.0 - np.minimum(best, 1.0, out=best)


def _brute_force(history: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``1 - max(0, max cosine with every earlier row)``, row by row, clipped to ``[0, 1]``."""

    def unit(v: np.ndarray) -> np.ndarray:
        norm = np.linalg.norm(v)
        return v / norm if norm else v

    seen = [unit(r) for r in history]
    out = []
    for row in X:
        q = unit(row)
        out.append(1.0 - min(max([0.0, *(float(q @ s) for s in seen)]), 1.0))
        seen.append(q)
    return np.array(out)


def _batch(n: int, m: int, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    X = sp.random(n, m, density=0.15, random_state=seed, format="csr")
    keep = np.ones(n)
    keep[3] = 0.0  # a row without terms
    X = sp.csr_matrix(sp.diags(keep) @ X)
    X.eliminate_zeros()
    with_terms = np.flatnonzero(X.getnnz(axis=1))
    return sp.vstack([X, X[rng.choice(with_terms, 5)]], format="csr")  # exact repeats


@pytest.mark.parametrize("chunk_size", [1, 2, 7, 16, 4096])
def test_chunked_scores_equal_the_whole_block_and_brute_force(chunk_size: int) -> None:
    """Every chunk size gives the whole block's scores exactly (each similarity is the same
    sparse product entry), and the brute-force ones to rounding, with a memory to score against
    and a batch wider than it (new terms)."""
    memory = _batch(12, 20, 0)
    X = _batch(40, 25, 1)
    reference = _whole_block_scores(ExactFirstStory(chunk_size=chunk_size).fit(memory), X)
    model = ExactFirstStory(chunk_size=chunk_size).fit(memory)
    scores = model.score_stream(X)
    np.testing.assert_array_equal(scores, reference)
    history = np.hstack([memory.toarray(), np.zeros((memory.shape[0], 5))])
    np.testing.assert_allclose(scores, _brute_force(history, X.toarray()), atol=1e-12)
    assert model.memory_.shape == (memory.shape[0] + X.shape[0], 25)


def test_stream_scores_do_not_depend_on_chunk_size_without_a_memory() -> None:
    """A model without a memory (an empty ``fit`` batch is refused, so ``score_stream`` first):
    the first row is novel, the repeats are not."""
    X = _batch(30, 10, 2)
    scores = [ExactFirstStory(chunk_size=c).score_stream(X) for c in (1, 3, 1000)]
    for other in scores[1:]:
        np.testing.assert_array_equal(other, scores[0])
    assert scores[0][0] == 1.0
    np.testing.assert_allclose(scores[0][-5:], 0.0, atol=1e-12)


def test_stream_memory_is_bounded_by_chunk_size() -> None:
    """3,000 documents with ``chunk_size=100``: the whole ``n x n`` block alone is 72 MB; the
    chunked pass peaks below a quarter of it (``chunk_size x n`` blocks of 2.4 MB)."""
    n = 3000
    X = sp.random(n, 4000, density=0.003, random_state=0, format="csr")
    model = ExactFirstStory(chunk_size=100).fit(X[:10])
    block = n * n * 8
    tracemalloc.start()
    try:
        model.score_stream(X)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < block / 4, f"peak {peak / 1e6:.1f} MB, n x n block {block / 1e6:.0f} MB"
