"""Review 55 of the text features: a tokenizer block bounded by characters, Arabic and Hebrew
read the same whatever their encoding, parameters checked by name, candidates gathering their
document frequency under ``min_df_new``."""

from __future__ import annotations

import tracemalloc
import unicodedata

import numpy as np
import pytest
from sparsewatch.models import text_features
from sparsewatch.models.text_features import StreamingTfidf, tokenize

_WORDS = ["quake", "city", "alpha", "beta", "gamma", "delta", "café", "naïve", "markets", "shares"]


def _long_stories(n: int) -> list[str]:
    """``n`` stories of about 9,500 characters (1,500 words) each."""
    return [
        " ".join(_WORDS[(i * 7 + j) % len(_WORDS)] for j in range(1500)) + f" story{i}"
        for i in range(n)
    ]


def test_a_block_of_long_stories_is_bounded_by_characters(monkeypatch) -> None:
    """A block of texts was bounded by their number alone (4,096), so its tokens' strings and
    match tuples (about 150 bytes a token) grew with the texts' length: 60 stories of 9.5 kB,
    one block, peaked at 14 MB above the window's token numbers. A block now also ends at
    ``TOKEN_BLOCK_CHARS``: the peak above those numbers (kept per block, then concatenated)
    stays within 40 bytes a character of that budget, and the tokens are the same."""
    stories = _long_stories(60)
    budget = 50_000
    monkeypatch.setattr(text_features, "TOKEN_BLOCK_CHARS", budget, raising=False)
    tracemalloc.start()
    try:
        tokens = StreamingTfidf()._numbered_tokens(stories)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak - 2 * tokens.ids.nbytes < 40 * budget
    monkeypatch.setattr(text_features, "TOKEN_BLOCK_CHARS", 10**12)
    whole = StreamingTfidf()._numbered_tokens(stories)
    assert tokens.terms == whole.terms and len(whole.terms) == 70
    assert np.array_equal(tokens.ids, whole.ids) and np.array_equal(tokens.lens, whole.lens)


def test_blocks_end_at_the_text_count_or_the_character_budget(monkeypatch) -> None:
    """Blocks hold at most TOKEN_BLOCK texts and TOKEN_BLOCK_CHARS characters, at least one
    text (a longer one is a block alone); no texts: one empty block."""
    monkeypatch.setattr(text_features, "TOKEN_BLOCK", 3)
    monkeypatch.setattr(text_features, "TOKEN_BLOCK_CHARS", 10, raising=False)
    blocks = text_features._blocks
    assert blocks([]) == [(0, 0)]
    assert blocks(["ab"] * 7) == [(0, 3), (3, 6), (6, 7)]
    assert blocks(["a" * 20, "b", "c" * 9, "d" * 10, "e" * 11, ""]) == [
        (0, 1),
        (1, 3),
        (3, 4),
        (4, 5),
        (5, 6),
    ]


def test_features_do_not_depend_on_the_character_budget(monkeypatch) -> None:
    """Blocks of a few characters give the same vocabulary, frequencies and columns as one
    block, with pairs, hashtags, URLs and the unsegmented scripts."""
    texts = [
        "Quake hits the city. #quake https://bbc.co.uk/x",
        "東京で地震が発生 @bob 速報",
        "",
        "markets fall; shares of café owners drop",
        "ภาษาไทย city quake",
    ] * 20
    runs = []
    for budget in (10**12, 30, 1):
        monkeypatch.setattr(text_features, "TOKEN_BLOCK_CHARS", budget, raising=False)
        f = StreamingTfidf(max_features=12, bigrams=True, hashtags="both", past_idf=True)
        f.partial_fit(texts[:40])
        P, oov = f.partial_fit_transform(texts[40:], return_oov=True)
        runs.append((f.terms_.tolist(), f.df_, P.toarray(), oov))
    for terms, df, P, oov in runs[1:]:
        assert terms == runs[0][0]
        assert np.array_equal(df, runs[0][1]) and np.array_equal(P, runs[0][2])
        assert np.array_equal(oov, runs[0][3])


@pytest.mark.parametrize(
    ("text", "token"),
    [
        # decomposed: the hamza or madda (U+0653-U+0655) was removed before NFKC composed it
        (unicodedata.normalize("NFD", "أحمد"), "أحمد"),
        (unicodedata.normalize("NFD", "مسؤول"), "مسؤول"),
        (unicodedata.normalize("NFD", "إسرائيل"), "إسرائيل"),
        (unicodedata.normalize("NFD", "القرآن"), "القرآن"),
        (unicodedata.normalize("NFD", "رئيس"), "رئيس"),
        # presentation forms: NFKC gives a letter and its niqqud or haraka, which stayed
        ("\ufb2aלום", "שלום"),  # shin with shin dot
        ("\ufb31ית", "בית"),  # bet with dagesh
        ("كتب\ufe77", "كتب"),  # fatha medial form: tatweel and fatha
        ("\ufe83حمد", "أحمد"),  # alef with hamza above, isolated form
        # as before: vowel marks and the tatweel are dropped, precomposed letters kept
        ("رَئِيسُ", "رئيس"),
        ("خـبـر", "خبر"),
        ("\u0627\u0640\u0654حمد", "أحمد"),  # a tatweel between a letter and its hamza
        ("שָׁלוֹם", "שלום"),
        ("أحمد", "أحمد"),
    ],
)
def test_arabic_and_hebrew_words_are_one_token_whatever_their_encoding(
    text: str, token: str
) -> None:
    """Precomposed, decomposed and presentation forms of a word give one token."""
    assert tokenize([text]) == [[token]]


def test_every_arabic_and_hebrew_character_reads_as_its_normal_forms() -> None:
    """Each assigned character of the Arabic and Hebrew blocks and their presentation forms,
    inside a word, gives the tokens of its NFD, NFKC and NFKD forms (the decomposed hamza and
    madda, and niqqud or harakat out of presentation forms, did not)."""
    codes = [
        *range(0x0591, 0x05F5),
        *range(0x0600, 0x0700),
        *range(0xFB1D, 0xFE00),
        *range(0xFE70, 0xFF00),
    ]
    words = ["ب" + chr(c) + "ت" for c in codes if unicodedata.category(chr(c)) != "Cn"]
    expected = tokenize(words)
    for form in ("NFD", "NFKC", "NFKD"):
        got = tokenize([unicodedata.normalize(form, w) for w in words])
        assert got == expected, form


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("max_features", 0),
        ("max_features", -1),
        ("max_features", 2.5),
        ("max_features", True),
        ("max_terms_per_doc", -1),
        ("max_terms_per_doc", 0),  # no term of any document was kept: all columns empty
        ("min_df_new", 0),
        ("min_df_new", -2),
    ],
)
def test_out_of_range_parameters_raise_a_named_value_error(param: str, value: object) -> None:
    """They failed deep inside with an unrelated error (``zero-size array``, ``IndexError``),
    or not at all (``max_terms_per_doc=0`` made every document empty)."""
    texts = ["alpha beta gamma", "beta gamma delta"]
    with pytest.raises(ValueError, match=f"^{param} must be an integer >= 1"):
        StreamingTfidf(**{param: value}).fit(texts).transform(["alpha beta"])
    fitted = StreamingTfidf().fit(texts)
    fitted.set_params(**{param: value})
    with pytest.raises(ValueError, match=f"^{param} must be"):  # restored state, then scored
        fitted.transform(["alpha beta"])


def test_parameters_in_range_are_accepted() -> None:
    f = StreamingTfidf(max_features=np.int64(1), max_terms_per_doc=1, min_df_new=np.int64(2))
    P = f.fit(["alpha beta", "alpha gamma", "alpha"]).transform(["alpha alpha"])
    assert f.terms_.tolist() == ["alpha"] and P.nnz == 1
    g = StreamingTfidf(max_features=None, max_terms_per_doc=None).fit(["alpha beta"])
    assert g.terms_.tolist() == ["alpha", "beta"]


def test_a_candidate_gathers_its_df_below_min_df_new() -> None:
    """With ``min_df_new=2`` a term refused at the cap (a candidate) but seen in one document a
    window never gained: only terms in two documents of a window were counted. A candidate now
    counts each window's documents and enters once its df beats the rarest kept term's; a term
    not yet a candidate in one document is still not counted."""
    f = StreamingTfidf(max_features=2, df_half_life=None, min_df_new=2)
    f.partial_fit(["alpha gamma"] * 4 + ["beta"] * 2)
    assert f.terms_.tolist() == ["alpha", "gamma"] and list(f.candidates_) == ["beta"]
    f.partial_fit(["beta", "unrelated text"])
    assert f.terms_.tolist() == ["alpha", "gamma"] and f.candidate_df_[f.candidates_["beta"]] == 3
    assert "unrelated" not in f.candidates_ and "unrelated" not in f.vocabulary_
    f.partial_fit(["beta", "unrelated text"])  # 4 against 4: the staler, gamma, goes
    assert f.terms_.tolist() == ["alpha", "beta"] and f.df_.tolist() == [4.0, 4.0]
    assert f.candidate_df_[f.candidates_["gamma"]] == 4.0


def test_a_possessive_is_its_own_term() -> None:
    """The module docstring's choice (unchanged, so every benchmark keeps its features): an
    apostrophe inside a word is part of it."""
    assert tokenize(["The company's shares; the company"]) == [["company's", "shares", "company"]]
