"""Admission of new terms at the vocabulary cap: refused terms are candidates whose document
frequency is gathered (decayed as ``df_``) in a bounded space-saving counter, so a steadily
recurring new term enters once it beats the rarest kept term, with or without decay."""

from __future__ import annotations

import io

import numpy as np
from sparsewatch.models.text_features import CANDIDATES_PER_FEATURE, StreamingTfidf


def _stream(n_windows: int, start: int = 0) -> list[list[str]]:
    """Windows of 100 documents: ten old terms recurring once every ten windows, and ``zebra``
    once a window from window 100 on (ten times their rate); the rest have no token."""
    old = [f"old{i:02d}" for i in range(10)]
    windows = []
    for w in range(start, start + n_windows):
        doc = " ".join([old[w % 10]] + (["zebra"] if w >= 100 else []))
        windows.append(["x"] * 99 + [doc])
    return windows


def test_a_steady_new_term_enters_against_terms_that_gathered_their_df_earlier() -> None:
    """A new term's one-window count was compared with the kept terms' accumulated df and then
    forgotten: ``zebra``, ten times as frequent as every kept term, never entered."""
    tfidf = StreamingTfidf(max_features=10, df_half_life=20000)
    for docs in _stream(300):
        tfidf.partial_fit(docs)
    assert "zebra" in tfidf.vocabulary_
    # what it gathered as a candidate counts: its df is far above one window's count
    assert tfidf.df_[tfidf.vocabulary_["zebra"]] > 100


def test_without_decay_the_vocabulary_does_not_freeze() -> None:
    """With ``df_half_life=None`` no new term entered once every kept term had df >= 2."""
    tfidf = StreamingTfidf(max_features=4, df_half_life=None)
    tfidf.partial_fit(["aa bb cc dd", "aa bb cc dd"])
    for _ in range(5):
        tfidf.partial_fit(["zebra story"])
    assert {"zebra", "story"} <= set(tfidf.vocabulary_)
    assert tfidf.n_features_ == 4
    # the evicted terms are candidates now, with the df they had
    assert {"cc", "dd"} <= set(tfidf.candidates_)


def test_ties_among_new_terms_go_to_the_earlier_documents() -> None:
    tfidf = StreamingTfidf(max_features=3, df_half_life=None)
    tfidf.partial_fit(["early1 early2", "mid1", "late1 late2"])
    assert tfidf.terms_.tolist() == ["early1", "early2", "mid1"]
    assert set(tfidf.candidates_) == {"late1", "late2"}


def test_one_off_terms_never_enter_through_the_counters_over_count() -> None:
    """A term new to a full counter inherits the smallest count as an over-count bound; only
    the count it gathered itself is compared with the kept terms."""
    tfidf = StreamingTfidf(max_features=2, df_half_life=None)
    tfidf.partial_fit(["aa bb"] * 3)
    for w in range(200):
        tfidf.partial_fit([f"junk{w}a junk{w}b junk{w}c"])
    assert tfidf.terms_.tolist() == ["aa", "bb"]
    assert tfidf.candidate_err_.max() > 3  # the bounds grew past the kept df, to no effect


def test_the_counter_stays_bounded_on_a_long_stream() -> None:
    cap = 50
    tfidf = StreamingTfidf(max_features=cap, df_half_life=500)
    rng = np.random.default_rng(0)
    for _ in range(300):
        words = rng.integers(0, 100_000, size=(20, 6))
        tfidf.partial_fit([" ".join(f"w{i}x" for i in row) for row in words])
    room = CANDIDATES_PER_FEATURE * cap
    assert len(tfidf.candidates_) <= room
    for arr in (tfidf.candidate_df_, tfidf.candidate_err_, tfidf.candidate_last_):
        assert arr.size <= room
    assert len(tfidf.candidate_terms_) <= room
    assert tfidf.n_features_ == cap
    assert not set(tfidf.candidates_) & set(tfidf.vocabulary_)
    for term, slot in tfidf.candidates_.items():
        assert tfidf.candidate_terms_[slot] == term and tfidf.candidate_last_[slot] >= 0


def _npz_round_trip(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    buf = io.BytesIO()
    np.savez(buf, **state)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_a_restored_state_goes_on_as_the_uninterrupted_run() -> None:
    windows = _stream(160, start=60)
    whole = StreamingTfidf(max_features=10, df_half_life=2000)
    first = StreamingTfidf(max_features=10, df_half_life=2000)
    for docs in windows[:50]:
        whole.partial_fit(docs)
        first.partial_fit(docs)
    assert len(first.candidates_) > 0  # the counter is in use mid-stream
    resumed = StreamingTfidf(max_features=10, df_half_life=2000)
    resumed.set_state(_npz_round_trip(first.get_state()))
    for docs in windows[50:]:
        a = whole.partial_fit_transform(docs)
        b = resumed.partial_fit_transform(docs)
        assert (a != b).nnz == 0
        np.testing.assert_array_equal(whole.kept_rows_, resumed.kept_rows_)
    assert "zebra" in resumed.vocabulary_
    for name, value in whole.get_state().items():
        np.testing.assert_array_equal(resumed.get_state()[name], value, err_msg=name)


def test_a_state_saved_without_candidates_restores_with_none() -> None:
    tfidf = StreamingTfidf(max_features=3).fit(["aa bb cc dd ee"])
    state = {k: v for k, v in tfidf.get_state().items() if not k.startswith("candidate")}
    restored = StreamingTfidf(max_features=3).set_state(state)
    assert restored.candidates_ == {} and restored.candidate_df_.size == 0
    assert restored.terms_.tolist() == tfidf.terms_.tolist()
    restored.partial_fit(["ff gg"])  # goes on, gathering candidates again
    assert restored.n_features_ == 3
