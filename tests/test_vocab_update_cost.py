"""The vocabulary update appends when nothing is evicted and moves only the rows after the first
evicted one otherwise: the vocabulary, terms and per-row arrays must stay consistent."""

from __future__ import annotations

import numpy as np
import pytest
from sparsewatch.models.text_features import StreamingTfidf, remap_rows


def _check(tfidf: StreamingTfidf) -> None:
    terms = tfidf.terms_.tolist()
    assert tfidf.vocabulary_ == {t: i for i, t in enumerate(terms)}
    assert tfidf.df_.shape == tfidf.last_seen_.shape == (len(terms),)
    if terms:  # as wide as the longest term, no wider
        assert tfidf.terms_.itemsize == 4 * max(map(len, terms))


@pytest.mark.parametrize("cap", [None, 40, 200])
def test_vocabulary_maps_exactly_the_terms_through_a_stream(cap: int | None) -> None:
    rng = np.random.default_rng(1)
    tfidf = StreamingTfidf(max_features=cap, df_half_life=300)
    labels = np.zeros((0, 1), dtype=object)  # a model row per term, remapped as a model would
    for w in range(120):
        n_words = 50 + 10 * (w % 7)
        docs = [
            " ".join(f"t{i}{'y' * (i % 13)}" for i in rng.integers(0, n_words * 3, 5))
            for _ in range(int(rng.integers(0, 12)))
        ]
        before = tfidf.terms_.copy() if hasattr(tfidf, "terms_") else np.zeros(0, dtype=str)
        tfidf.partial_fit(docs)
        _check(tfidf)
        m_old = before.size
        assert np.array_equal(
            np.sort(np.r_[tfidf.kept_rows_, tfidf.evicted_rows_]), np.arange(m_old)
        )
        assert tfidf.n_features_ == tfidf.kept_rows_.size + tfidf.n_new_
        np.testing.assert_array_equal(
            tfidf.terms_[: tfidf.kept_rows_.size], before[tfidf.kept_rows_]
        )
        labels = remap_rows(labels, tfidf.kept_rows_, tfidf.n_new_)
        new = slice(len(labels) - tfidf.n_new_, None)
        labels[new, 0] = tfidf.terms_[new]
        assert labels[:, 0].tolist() == tfidf.terms_.tolist()
        if cap is not None:
            assert tfidf.n_features_ <= cap
            assert not set(tfidf.candidates_) & set(tfidf.vocabulary_)


def test_below_the_cap_new_terms_are_appended_in_order_of_appearance() -> None:
    tfidf = StreamingTfidf(max_features=100).fit(["aa bb", "cc"])
    tfidf.partial_fit(["dd aa", "ee"])
    assert tfidf.terms_.tolist() == ["aa", "bb", "cc", "dd", "ee"]
    assert tfidf.evicted_rows_.size == 0 and tfidf.kept_rows_.tolist() == [0, 1, 2]
    _check(tfidf)


def test_evicting_the_longest_term_narrows_the_terms() -> None:
    tfidf = StreamingTfidf(max_features=2, df_half_life=None).fit(["aa " + "z" * 30])
    tfidf.partial_fit(["aa bb", "aa bb"])
    assert tfidf.terms_.tolist() == ["aa", "bb"]
    _check(tfidf)
