"""Nearest-neighbour first-story detection: exact against brute force, LSH recall."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sparsewatch.models.first_story import ExactFirstStory, LSHFirstStory


def _random_docs(rng: np.random.Generator, n: int, m: int, density: float = 0.05) -> sp.csr_matrix:
    X = sp.random(n, m, density=density, format="csr", random_state=rng, dtype=np.float64)
    X.data = rng.random(X.data.size) + 0.1
    return X


def _brute_force(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    def unit(M: np.ndarray) -> np.ndarray:
        n = np.linalg.norm(M, axis=1, keepdims=True)
        return np.divide(M, n, out=np.zeros_like(M), where=n > 0)

    return 1 - (unit(new) @ unit(old).T).max(axis=1)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 60), st.integers(1, 20), st.integers(1, 7))
def test_exact_scores_equal_brute_force_cosine(
    seed: int, n_old: int, n_new: int, chunk: int
) -> None:
    rng = np.random.default_rng(seed)
    old, new = _random_docs(rng, n_old, 40), _random_docs(rng, n_new, 40)
    model = ExactFirstStory(chunk_size=chunk)
    model.partial_fit(old[: n_old // 2]).partial_fit(old[n_old // 2 :])
    np.testing.assert_allclose(
        model.score_samples(new), _brute_force(old.toarray(), new.toarray()), atol=1e-12
    )


def test_exact_handles_growing_vocabulary_and_in_batch_stream_scores() -> None:
    rng = np.random.default_rng(0)
    old, new = _random_docs(rng, 30, 25), _random_docs(rng, 10, 40)
    model = ExactFirstStory().fit(old)
    old_padded = np.hstack([old.toarray(), np.zeros((30, 15))])
    expected = _brute_force(old_padded, new.toarray())
    np.testing.assert_allclose(model.score_samples(new), expected, atol=1e-12)
    stream = model.score_stream(new)
    for i in range(10):
        earlier = np.vstack([old_padded, new.toarray()[:i]])
        assert abs(stream[i] - _brute_force(earlier, new.toarray()[i : i + 1])[0]) < 1e-12
    assert model.memory_.shape == (40, 40)


def test_empty_memory_gives_maximal_novelty() -> None:
    X = _random_docs(np.random.default_rng(1), 5, 10, 0.5)
    np.testing.assert_array_equal(ExactFirstStory().score_samples(X), np.ones(5))
    np.testing.assert_array_equal(LSHFirstStory().score_samples(X), np.ones(5))


def test_lsh_finds_planted_near_duplicates_beyond_the_recent_window() -> None:
    rng = np.random.default_rng(7)
    old = _random_docs(rng, 3000, 2000, 0.005)
    targets = rng.choice(3000, size=100, replace=False)
    noise = _random_docs(rng, 100, 2000, 0.0005) * 0.1
    queries = old[targets] + noise
    model = LSHFirstStory(n_bits=12, n_tables=12, bucket_size=64, n_recent=50, random_state=0)
    for part in np.array_split(np.arange(3000), 6):
        model.partial_fit(old[part])
    approx = model.max_similarity(queries)
    exact = ExactFirstStory().fit(old).max_similarity(queries)
    assert np.all(approx <= exact + 1e-12)  # candidates are a subset of the memory
    assert np.all(exact > 0.9)
    recall = np.mean(np.abs(approx - exact) < 1e-9)
    assert recall >= 0.9


def test_lsh_buckets_are_bounded_and_keep_the_newest() -> None:
    rng = np.random.default_rng(3)
    model = LSHFirstStory(n_bits=2, n_tables=3, bucket_size=5, n_recent=0)
    for _ in range(4):
        model.partial_fit(_random_docs(rng, 50, 30, 0.2))
    all_keys = model._keys(model.memory_)
    for t, (keys, docs) in enumerate(zip(model.table_keys_, model.table_docs_, strict=True)):
        for key in np.unique(all_keys[:, t]):
            hashed_here = np.flatnonzero(all_keys[:, t] == key)
            assert sorted(docs[keys == key]) == sorted(hashed_here[-5:])  # the 5 newest
    assert model.memory_.shape[0] == 200


def test_lsh_with_every_document_recent_is_exact() -> None:
    rng = np.random.default_rng(11)
    old, new = _random_docs(rng, 80, 50), _random_docs(rng, 15, 50)
    lsh = LSHFirstStory(n_recent=1000).fit(old)
    np.testing.assert_allclose(
        lsh.score_samples(new), ExactFirstStory().fit(old).score_samples(new)
    )


def test_lsh_scoring_a_wider_batch_leaves_the_memory_width_usable() -> None:
    """Scoring a batch wider than the memory grows the hyperplanes only; calls at the memory's
    width (scores, updates) and a re-fit on fewer columns keep working, with the same keys: the
    zero-padded columns of a query change no signature."""
    rng = np.random.default_rng(5)
    old, wide = _random_docs(rng, 40, 10, 0.3), _random_docs(rng, 3, 12, 0.3)
    model = LSHFirstStory(n_bits=4, n_tables=2, n_recent=0).fit(old)
    keys = model._keys(old)
    reference = model.score_samples(old[:5])
    model.score_samples(wide)
    assert model.memory_.shape == (40, 10)
    np.testing.assert_array_equal(model._keys(old), keys)
    np.testing.assert_array_equal(model.score_samples(old[:5]), reference)
    model.partial_fit(old[:3])
    assert model.memory_.shape == (43, 10)
    refit = LSHFirstStory(n_bits=4, n_tables=2, n_recent=0).fit(_random_docs(rng, 20, 12, 0.3))
    refit.fit(old)
    assert refit.memory_.shape == (40, 10)
    np.testing.assert_array_equal(refit._keys(old), keys)  # hyperplanes: random_state only
