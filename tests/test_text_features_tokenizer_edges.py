"""The streaming text features: tokenizer edge cases (combining marks, normal forms, URL
hosts, tags inside words, hashtag bodies) and the past-idf weight of terms left out of the
vocabulary (each test failed before its fix)."""

from __future__ import annotations

import re
import unicodedata

import numpy as np
from sparsewatch.models.text_features import _WORD, StreamingTfidf, tokenize


def test_words_keep_their_combining_marks() -> None:
    """Devanagari vowel signs and viramas and Arabic harakat are combining marks, not ``\\w``:
    words of those scripts were cut at every mark (``हिन्दी समाचार`` gave only ``सम``). (Arabic
    harakat are now removed, so a vowelled word is its bare word: still one word.)"""
    assert tokenize(["हिन्दी समाचार"]) == [["हिन्दी", "समाचार"]]
    assert tokenize(["مَرْحَبًا بالعالم"]) == [["مرحبا", "بالعالم"]]
    assert tokenize(["தமிழ் செய்திகள்"]) == [["தமிழ்", "செய்திகள்"]]


def test_zero_width_joiners_and_soft_hyphens_do_not_split_words() -> None:
    """The zero-width non-joiner is part of Persian words (``می‌خواهم``, "I want") and the joiner
    of Indic conjuncts; a soft hyphen is an invisible break hint. Each split the word in two."""
    assert tokenize(["می\u200cخواهم کتاب\u200cها"]) == [["می\u200cخواهم", "کتاب\u200cها"]]
    assert tokenize(["क्\u200dष"]) == [["क्\u200dष"]]
    assert tokenize(["news\u00adpaper head\u00adlines"]) == [["newspaper", "headlines"]]
    assert tokenize(["\u200c\u200d \u00ad"]) == [[]]


def test_a_word_is_one_token_in_either_normal_form() -> None:
    """Decomposed text (NFD: a base letter then its accent, as some systems write it) gave other
    tokens than the precomposed form, and split words at the accents (``nai``, ``ve``)."""
    text = "Naïve café résumé Ångström"
    nfd = unicodedata.normalize("NFD", text)
    assert nfd != text
    assert tokenize([nfd]) == tokenize([text]) == [["naïve", "café", "résumé", "ångström"]]


def test_turkish_dotted_capital_i_lowercases_to_the_plain_word() -> None:
    """``"İ".lower()`` is ``i`` plus a combining dot: ``İstanbul`` gave ``stanbul``."""
    assert tokenize(["İSTANBUL İzmir istanbul"]) == [["istanbul", "izmir", "istanbul"]]


def test_url_token_is_the_host_alone() -> None:
    """The sentence's punctuation, a query, a fragment, a port or a user ended up in the domain
    token, so one site gave several tokens (``url:bbc.com,``, ``url:bbc.com)``, ...)."""
    texts = [
        "(see https://bbc.com/news).",
        "at https://bbc.com, then",
        "www.bbc.com.",
        "https://bbc.com?ref=x",
        "https://bbc.com#top",
        "http://user:pw@www.bbc.com:8080/path",
        "https://BBC.com/",
    ]
    assert {t for doc in tokenize(texts) for t in doc if t.startswith("url:")} == {"url:bbc.com"}
    assert tokenize(["broken https://). link"]) == [["broken", "link"]]  # no empty host token


def test_url_host_is_cut_in_linear_time() -> None:
    """The host's end is found in one pass: a URL of 200,000 dots after its scheme is no
    quadratic scan (a trailing-punctuation pattern searched from every position would be)."""
    assert tokenize(["https://a" + "." * 200_000]) == [["url:a"]]


def test_at_and_hash_inside_a_word_start_no_mention_or_tag() -> None:
    """``bob@example.com`` is an e-mail address, not a mention of ``@example``."""
    assert tokenize(["mail bob@example.com"]) == [["mail", "bob", "example", "com"]]
    assert tokenize(["price10#sale"]) == [["price10", "sale"]]
    assert tokenize(["@anna and #Quake"]) == [["@anna", "quake"]]


def test_hashtag_word_follows_the_word_rules() -> None:
    """A hashtag's bare word is the word ``#quake`` stands for: ``#the`` added the stop word
    ``the`` and ``#a`` the one-character ``a``, which no word ever gives."""
    assert tokenize(["#The #a #quake quake"]) == [["quake", "quake"]]
    assert tokenize(["#The #quake"], hashtags="both") == [["#the", "#quake", "quake"]]
    assert tokenize(["#The"], hashtags="keep") == [["#the"]]
    assert tokenize(["#the"], stop_words=None) == [["the"]]


def test_word_pattern_lookbehind_changes_no_match_with_marks() -> None:
    """The lookbehinds of the word pattern only spare rescans: on random text with combining
    marks they change no match, and a long run of digits and marks stays fast."""
    without = re.compile(_WORD.split(")(?=", 1)[1].join(["(?=", ""]), re.UNICODE)
    assert without.pattern.startswith("(?=")
    rng = np.random.default_rng(0)
    alphabet = [*"ab1_ 9'-é", "\u0301", "\u093f", "क"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(1, 30))))
        assert re.findall(_WORD, text) == without.findall(text), text
    assert tokenize(["1\u0301" * 50_000 + " news"]) == [["news"]]


def test_past_idf_weighs_every_unseen_term_alike() -> None:
    """With ``past_idf``, a term new in the window gets the idf of an unseen term given the
    past; a term left out of the vocabulary (``min_df_new``, the cap) got the idf after the
    window's update, larger: in ``fresh rare`` (both unseen, once each) ``rare`` weighed 0.55."""
    f = StreamingTfidf(min_df_new=2, past_idf=True, sublinear_tf=False)
    f.partial_fit(["alpha beta", "alpha gamma"])
    P, oov = f.partial_fit_transform(["fresh rare", "fresh other"], return_oov=True)
    assert f.terms_.tolist() == ["alpha", "fresh"]  # "rare" is in one document only
    np.testing.assert_allclose(P[f.vocabulary_["fresh"], 0], 0.5)
    np.testing.assert_allclose(oov, [0.5, 0.0])
    # at the cap: "rare" is admitted by df but evicted at once; it weighs as "fresh" does
    g = StreamingTfidf(max_features=2, past_idf=True, sublinear_tf=False)
    g.partial_fit(["alpha beta", "alpha beta"])
    P, oov = g.partial_fit_transform(["alpha fresh", "fresh rare"], return_oov=True)
    assert g.terms_.tolist() == ["alpha", "fresh"]
    np.testing.assert_allclose(P[g.vocabulary_["fresh"], 1], 0.5)
    np.testing.assert_allclose(oov[1], 0.5)
