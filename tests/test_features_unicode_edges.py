"""Tokenizer on adversarial Unicode: a word is the same token whatever invisible character an
emoji or a stray mark leaves before it (each test failed before its fix)."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sparsewatch.models.text_features import _WORD, StreamingTfidf, tokenize


def test_emoji_variation_selector_does_not_start_a_word() -> None:
    """``⚠️`` is U+26A0 then the variation selector U+FE0F, a combining mark: ``⚠️BREAKING``
    gave the token ``\\ufe0fbreaking``, another term than ``breaking``."""
    assert tokenize(["⚠️BREAKING: quake"]) == [["breaking", "quake"]]
    assert tokenize(["I❤️NY ❤️love"]) == [["ny", "love"]]
    assert tokenize(["\u0301abc"]) == [["abc"]]  # a stray accent before a word


def test_zero_width_joiners_at_a_word_edge_are_not_part_of_it() -> None:
    """Joiners inside words stay (Persian, Indic conjuncts); at a word's edge (an emoji ZWJ
    sequence glued to it) they made ``\\u200dflood`` and ``flood\\u200d`` terms of their own."""
    assert tokenize(["\u200dflood flood\u200d🔥 flood\u200d\u200d"]) == [["flood"] * 3]
    assert tokenize(["می\u200cخواهم क्\u200dष"]) == [["می\u200cخواهم", "क्\u200dष"]]
    assert tokenize(["a\u200d b\u200c"]) == [[]]  # one letter and a joiner: no word


def test_tag_after_an_emoji_with_variation_selector() -> None:
    """A ``#`` or ``@`` right after ``⚠️`` started no tag or mention (the selector counted as
    the end of a word, as for ``bob@example.com``): ``#quake`` came out as the word."""
    assert tokenize(["⚠️#Quake ⚠️@user"], hashtags="keep") == [["#quake", "@user"]]
    assert tokenize(["mail bob@example.com café@home"]) == [
        ["mail", "bob", "example", "com", "café", "home"]
    ]


_PIECES = ["ab", "x", "1", " ", "'", "#", "@", "\u0301", "\ufe0f", "\u200d", "\u200c", "é"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*_PIECES, "⚠", "🔥", "क", "\u093f"]), max_size=25))
def test_no_token_starts_or_ends_with_an_invisible_character(pieces: list[str]) -> None:
    """No token starts with a combining mark or a joiner, none ends with a joiner, and the
    lookbehinds of the word pattern change no match (they only spare rescans)."""
    text = "".join(pieces)
    for tok in tokenize([text], stop_words=None, hashtags="both")[0]:
        body = tok.lstrip("#@")
        assert body, tok
        assert re.match(r"\w", body), (text, tok)
        assert not body.endswith(("\u200c", "\u200d")), (text, tok)
    without = re.compile(_WORD.split(")(?=", 1)[1].join(["(?=", ""]), re.UNICODE)
    assert re.findall(_WORD, text) == without.findall(text)


def test_long_runs_of_marks_and_joiners_stay_linear() -> None:
    """Runs of digits, marks and joiners without a letter are scanned once, not from every
    position (quadratic: 50,000 of them took seconds)."""
    for unit in ("1\u0301", "1\u0301\u0301", "\u0301", "\u200d1", "a\u200d\u200d"):
        assert tokenize([unit * 50_000 + " news"])[0][-1] == "news"


def test_streaming_tfidf_gives_one_row_to_a_word_after_an_emoji() -> None:
    """End to end: ``⚠️BREAKING`` and ``BREAKING`` are the same vocabulary term."""
    f = StreamingTfidf().fit(["⚠️BREAKING quake", "BREAKING news"])
    assert f.terms_.tolist() == ["breaking", "quake", "news"]
    P = f.transform(["⚠️Breaking"])
    np.testing.assert_allclose(P.toarray().ravel(), [1.0, 0.0, 0.0])


def test_variation_selectors_choose_a_glyph_not_a_term() -> None:
    """An ideographic variation selector (U+E0100, used in Japanese names) cut ``辻本`` into
    ``辻`` and ``本さ``; an in-plane one (U+FE00) made ``辻\\ufe00本``: neither matched the plain
    spelling."""
    plain = tokenize(["辻本さん"])
    assert plain == [["辻本", "本さ", "さん"]]
    assert tokenize(["辻\U000e0100本さん", "辻\ufe00本さん"]) == plain * 2
    assert tokenize(["caf\ufe0fé"]) == tokenize(["café"])


def test_a_mark_behind_a_soft_hyphen_composes_whatever_the_other_texts() -> None:
    """Soft hyphens were removed after NFC: ``cafe\\u00ad\\u0301`` stayed decomposed, another term
    than ``café``, unless a full-width character elsewhere in the block made it be normalised
    again: a document's tokens depended on its neighbours."""
    alone = tokenize(["cafe\u00ad\u0301 open"])
    beside = tokenize(["cafe\u00ad\u0301 open", "ＮＨＫ"])[:1]
    assert alone == beside == tokenize(["café open"])
