"""Streaming text features: tokenizer, bounded growing vocabulary, streaming TF-IDF."""

from __future__ import annotations

import io
import re
import tracemalloc

import numpy as np
import pytest
from sparsewatch.models import text_features
from sparsewatch.models.text_features import _WORD, StreamingTfidf, remap_rows, tokenize


def test_tokenizer_tweet_entities_and_unicode() -> None:
    toks = tokenize(
        ["RT @JohnDoe: Quake hits Zürich!! https://www.bbc.co.uk/news/x #Earthquake 2024 the"]
    )
    assert toks == [["rt", "@johndoe", "quake", "hits", "zürich", "url:bbc.co.uk", "earthquake"]]
    assert tokenize(["#Quake @a_b"], hashtags="both", mentions="drop") == [["#quake", "quake"]]
    assert tokenize(["look http://t.co/x"], urls="drop") == [["look"]]
    assert tokenize(["東京 タワー école"]) == [["東京", "タワ", "ワー", "école"]]
    assert tokenize(["東京 タワー école"], unsegmented="words") == [["東京", "タワー", "école"]]
    assert tokenize(["big red fox"], bigrams=True) == [["big", "red", "fox", "big red", "red fox"]]
    assert tokenize(["", "a\x00b word"]) == [[], ["word"]]  # separator inside a text is neutral
    assert tokenize([]) == []


def test_columns_are_unit_l1_and_truncated() -> None:
    f = StreamingTfidf(max_terms_per_doc=3)
    texts = ["alpha beta gamma delta epsilon alpha", "beta gamma", "zeta"]
    f.partial_fit(texts)
    P = f.transform(texts)
    assert P.shape == (f.n_features_, 3) and P.format == "csc"
    np.testing.assert_allclose(np.asarray(P.sum(axis=0)).ravel(), 1.0)
    assert np.diff(P.indptr).max() <= 3 and P.min() >= 0
    # the most frequent term of the first document survives truncation
    assert P[f.vocabulary_["alpha"], 0] == P[:, 0].max()


def test_oov_mass_is_the_missing_part() -> None:
    f = StreamingTfidf().partial_fit(["apple banana", "banana cherry"])
    P, oov = f.transform(["apple durian", "cherry", "durian"], return_oov=True)
    np.testing.assert_allclose(np.asarray(P.sum(axis=0)).ravel() + oov, 1.0)
    assert oov[1] == 0 and oov[2] == 1 and 0 < oov[0] < 1
    assert f.n_features_ == 3  # transform learns nothing


def _stream(seed: int, n_docs: int, n_topics: int = 60) -> list[str]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}x" for i in range(20000)]
    topics = [rng.choice(len(words), 30, replace=False) for _ in range(n_topics)]
    docs = []
    for i in range(n_docs):
        t = topics[(i // 400 + rng.integers(0, 3)) % n_topics]
        idx = np.r_[rng.choice(t, 8), rng.integers(0, len(words), 3)]
        docs.append(" ".join(words[j] for j in idx))
    return docs


def test_growth_and_eviction_keep_rows_aligned_over_10000_docs() -> None:
    f = StreamingTfidf(max_features=3000, df_half_life=2000.0)
    docs = _stream(0, 10000)
    tag = np.zeros((0, 2))  # each row carries its term's id: it must follow its term
    for s in range(0, len(docs), 500):
        f.partial_fit(docs[s : s + 500])
        tag = remap_rows(tag, f.kept_rows_, f.n_new_)
        new = slice(tag.shape[0] - f.n_new_, tag.shape[0])
        tag[new, 0] = [int(t[1:-1]) for t in f.terms_[new]]
        tag[new, 1] = s
        assert f.n_features_ <= 3000
        assert tag.shape[0] == f.n_features_ == f.df_.size == f.last_seen_.size
        np.testing.assert_array_equal(tag[:, 0], [int(t[1:-1]) for t in f.terms_])
        assert len(f.vocabulary_) == f.n_features_
    assert f.n_docs_ == 10000
    assert f.n_features_ == 3000  # the cap was reached and held


def test_eviction_prefers_rare_and_stale_terms() -> None:
    f = StreamingTfidf(max_features=4, df_half_life=None)
    f.partial_fit(["common rare1", "common otherw", "common otherw"])
    f.partial_fit(["fresh1 fresh2 common"])
    assert "rare1" not in f.vocabulary_ and "common" in f.vocabulary_ and "otherw" in f.vocabulary_
    assert f.kept_rows_.tolist() == [0, 2]  # old rows 'common' and 'otherw' kept, in order
    assert f.evicted_rows_.tolist() == [1]  # 'rare1'
    assert f.n_new_ == 2


def test_state_round_trip_is_bit_identical() -> None:
    f = StreamingTfidf(max_features=500, max_terms_per_doc=5)
    docs = _stream(1, 2000)
    f.partial_fit(docs[:1500])
    buf = io.BytesIO()
    np.savez(buf, **f.get_state())
    buf.seek(0)
    state = dict(np.load(buf, allow_pickle=False))
    g = StreamingTfidf(max_features=500, max_terms_per_doc=5).set_state(state)
    a, b = f.transform(docs[1500:]), g.transform(docs[1500:])
    assert (a != b).nnz == 0 and a.shape == b.shape
    f.partial_fit(docs[1500:])
    g.partial_fit(docs[1500:])
    np.testing.assert_array_equal(f.terms_, g.terms_)
    np.testing.assert_array_equal(f.df_, g.df_)


@pytest.mark.parametrize("power", [0.0, 1.0])
def test_idf_power(power: float) -> None:
    f = StreamingTfidf(idf_power=power, sublinear_tf=False).partial_fit(["a1 b1", "a1 c1", "a1"])
    P = f.transform(["a1 b1"]).toarray().ravel()
    assert np.count_nonzero(P) == 2  # a1 and b1
    if power == 0.0:
        np.testing.assert_allclose(P[P > 0], 0.5)
    else:
        assert P[f.vocabulary_["b1"]] > P[f.vocabulary_["a1"]]


def test_past_idf_weights_a_window_by_the_documents_before_it() -> None:
    past = ["apple banana", "banana cherry", "banana apple"]
    window = ["banana durian", "apple cherry durian"]
    f = StreamingTfidf(past_idf=True, max_terms_per_doc=None).partial_fit(past)
    ref = StreamingTfidf().partial_fit(past)
    before = dict(zip(ref.terms_.tolist(), ref.idf(), strict=True))
    unseen = np.log(1.0 + ref.n_eff_) + 1.0  # idf of a term no earlier document had
    P = f.partial_fit_transform(window).toarray()
    row = f.vocabulary_
    # document 1: banana (past idf) and durian (new: the unseen idf), sublinear tf = 1 each
    expect = np.array([before["banana"], unseen]) / (before["banana"] + unseen)
    np.testing.assert_allclose(P[[row["banana"], row["durian"]], 0], expect)
    assert P[row["durian"], 1] > P[row["apple"], 1]  # the new term weighs most
    # the vocabulary and document frequencies learn the window exactly as without past_idf
    g = StreamingTfidf().partial_fit(past)
    g.partial_fit(window)
    np.testing.assert_array_equal(f.terms_, g.terms_)
    np.testing.assert_allclose(f.df_, g.df_)
    # transform (no learning) uses the current idf, as without the option
    np.testing.assert_allclose(f.transform(window).toarray(), g.transform(window).toarray())


def test_overlong_tokens_are_dropped_and_do_not_pad_the_vocabulary() -> None:
    """``terms_`` is a fixed-width unicode array: one 20,000-character "word" (a blob in a long
    text) used to pad all of a 5,000-term vocabulary (0.12 MB to 400 MB in every checkpoint)."""
    f = StreamingTfidf()
    f.partial_fit([f"term{i}x" for i in range(5000)])
    before = f.terms_.nbytes
    f.partial_fit(["z" * 20000 + " real words", "#" + "h" * 100, "https://" + "d" * 500])
    assert "z" * 20000 not in f.vocabulary_ and {"real", "words"} <= f.vocabulary_.keys()
    assert f.n_features_ == 5002
    longest = max(len(t) for t in f.terms_.tolist())
    assert f.terms_.itemsize == 4 * longest <= 4 * f.max_token_chars
    assert f.terms_.nbytes <= before + 2 * f.terms_.itemsize
    assert sum(v.nbytes for v in f.get_state().values()) < 1_000_000


def test_token_length_cap_applies_to_words_tags_mentions_and_domains() -> None:
    ok, long = "a" * 40, "b" * 41
    text = f"{ok} {long} #{ok} #{long} @{ok} @{long} http://{ok}/x https://www.{long}/y"
    assert tokenize([text]) == [[ok, ok, "@" + ok, f"url:{ok}"]]
    everything = [ok, long, ok, long, "@" + ok, "@" + long, f"url:{ok}", f"url:{long}"]
    assert tokenize([text], max_token_chars=None) == [everything]
    assert tokenize(["abc abcd #abcd @abcd"], max_token_chars=3) == [["abc"]]
    assert StreamingTfidf(max_token_chars=None).partial_fit([long]).n_features_ == 1
    assert StreamingTfidf().partial_fit([long]).n_features_ == 0


def test_vocabulary_width_shrinks_when_a_long_term_is_evicted() -> None:
    """The array's width follows the longest term kept, not the longest term ever seen."""
    f = StreamingTfidf(max_features=3, df_half_life=None, max_token_chars=None)
    f.partial_fit(["x" * 1000 + " aa bb"])
    assert f.terms_.itemsize == 4000
    f.partial_fit(["aa bb cc", "aa bb cc"])  # the long term is the rarest: evicted
    assert f.terms_.tolist() == ["aa", "bb", "cc"] and f.terms_.itemsize == 8


def test_words_start_only_where_a_run_of_word_characters_starts() -> None:
    """The word pattern's lookbehind (a word starts where a run of word characters starts) keeps
    a long run of digits from being rescanned from each of its positions (20,000 digits took 7 s)
    and changes no match: the same words as the pattern without it, on random text."""
    assert tokenize(["1" * 20000 + " news 2024 x1 a1b2"]) == [["news", "x1", "a1b2"]]
    without = re.compile(_WORD.removeprefix(r"(?<!\w)"), re.UNICODE)
    rng = np.random.default_rng(0)
    alphabet = list("ab1_ 9'-é")
    for _ in range(2000):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(1, 30))))
        assert re.findall(_WORD, text) == without.findall(text), text


def _window_texts(n: int) -> list[str]:
    from sparsewatch.replay.synthetic import generate_stream

    texts = [d["text"] for d in generate_stream(n_docs=n, seed=5)]
    texts[3:3] = ["", "Ünïcode CAFÉ #Quake @Ann http://x.com/a", "1234", "news\u00adpaper"]
    return texts


@pytest.mark.parametrize(
    "options",
    [{}, {"bigrams": True, "max_terms_per_doc": 4, "min_df_new": 2, "max_features": 300}],
)
def test_a_window_tokenized_in_blocks_gives_the_same_features(monkeypatch, options) -> None:
    """Windows are tokenized TOKEN_BLOCK texts at a time (their tokens as numbers, not strings):
    blocks of 5 texts give the very same vocabulary, frequencies and columns as one block."""
    texts = _window_texts(300)
    runs = []
    for block in (len(texts), 5):
        monkeypatch.setattr(text_features, "TOKEN_BLOCK", block)
        f = StreamingTfidf(**options).fit(texts[:100])
        P, oov = f.partial_fit_transform(texts[100:], return_oov=True)
        Q, unseen = f.transform([*texts[:50], "zzyzx qwerty words", "qwerty"], return_oov=True)
        runs.append((f.terms_.tolist(), f.df_, f.last_seen_, P, oov, Q, unseen))
    (terms, df, last, P, oov, Q, unseen), (terms5, df5, last5, P5, oov5, Q5, unseen5) = runs
    assert terms5 == terms and len(terms) > 0
    assert np.array_equal(df5, df) and np.array_equal(last5, last)
    assert np.array_equal(oov5, oov) and np.array_equal(unseen5, unseen)
    assert unseen[-1] == 1.0  # out-of-vocabulary terms were met
    for A, B in ((P, P5), (Q, Q5)):
        assert A.shape == B.shape and (A != B).nnz == 0


def test_a_window_of_tweets_is_weighted_without_a_string_per_token() -> None:
    """The window's tokens are held as 8-byte numbers: peak memory of learning and weighting
    20,000 tweets (11 tokens each) stays under 1.2 kB a tweet (2.1 kB with a list of token
    strings per tweet)."""
    texts = _window_texts(22000)
    f = StreamingTfidf().fit(texts[:2000])
    window = texts[2000:]
    tracemalloc.start()
    try:
        f.partial_fit_transform(window, return_oov=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / len(window) < 1200


def test_no_vocabulary_cap_keeps_every_term() -> None:
    """``max_features=None`` (scikit-learn's spelling of "no cap") raised TypeError."""
    texts = [f"story{i} common words" for i in range(50)]
    capped = StreamingTfidf(max_features=10).partial_fit(texts)
    uncapped = StreamingTfidf(max_features=None).partial_fit(texts)
    assert capped.n_features_ == 10 and uncapped.n_features_ == 52  # 50 stories + 2 shared
