"""URLs end where RFC 3986's characters end, text is NFKC-normalised and case-folded, and word
bigrams pair no terms across a sentence's end or a URL, hashtag or mention."""

from __future__ import annotations

import pytest
from sparsewatch.models.text_features import StreamingTfidf, tokenize


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        # a full-width parenthesis is no URL character: the Japanese text after it is kept
        (
            "（https://nhk.or.jp/a）大阪でも揺れ",
            ["url:nhk.or.jp", "大阪", "阪で", "でも", "も揺", "揺れ"],
        ),
        # an ellipsis (a tweet's truncation) ends the URL
        ("https://t.co/abc…Breaking quake", ["url:t.co", "breaking", "quake"]),
        # a comma ends it (deliberately: a missing space, not a path's comma)
        ("see https://bbc.com/x,quake coast", ["url:bbc.com", "quake", "coast"]),
        # a URL glued after a word is a URL
        ("詳細はhttps://nhk.or.jp/news 地震", ["詳細", "細は", "url:nhk.or.jp", "地震"]),
        ("readhttp://bbc.com/x now", ["read", "url:bbc.com"]),
        # the sentence's punctuation after a URL, and parentheses in its path, as before
        ("(see https://bbc.com).", ["url:bbc.com"]),
        ("https://en.wikipedia.org/wiki/Foo_(bar)). x", ["url:en.wikipedia.org"]),
        ("a https://x.com/%E5%9C%B0?q=1&b=[2]#f b", ["url:x.com"]),
        ("'https://bbc.com/a' quake", ["url:bbc.com", "quake"]),
    ],
)
def test_urls_end_at_the_first_character_no_url_has(text: str, tokens: list[str]) -> None:
    assert tokenize([text]) == [tokens]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("𝐁𝐑𝐄𝐀𝐊𝐈𝐍𝐆 𝗕𝗥𝗘𝗔𝗞𝗜𝗡𝗚 Breaking ＢＲＥＡＫＩＮＧ", ["breaking"] * 4),
        ("ﬁnance finance", ["finance", "finance"]),
        ("Straße STRASSE strasse STRAẞE", ["strasse"] * 4),
        ("خـبـر خبر", ["خبر", "خبر"]),  # tatweel
        ("مُحَمَّد محمد", ["محمد", "محمد"]),  # harakat
        ("שָׁלוֹם שלום", ["שלום", "שלום"]),  # niqqud
        ("donʼt don’t don't", ["don't"] * 3),  # U+02BC, U+2019, ASCII
        ("Apple™ apple", ["apple", "apple"]),
        ("café CAFÉ cafe\u0301 cafe", ["café", "café", "café", "cafe"]),  # diacritics kept
        ("İSTANBUL istanbul", ["istanbul", "istanbul"]),
        ("ทำงาน", ["ทำง", "งา", "าน"]),  # Thai SARA AM stays one vowel after NFKC
    ],
)
def test_text_is_nfkc_case_folded(text: str, tokens: list[str]) -> None:
    assert tokenize([text], stop_words=None) == [tokens]


def test_stop_words_are_read_as_the_text_is() -> None:
    assert tokenize(["STRASSE ﬁne quake"], stop_words=["Straße", "fine"]) == [["quake"]]


def test_styled_and_plain_forms_share_one_vocabulary_row() -> None:
    tfidf = StreamingTfidf().fit(["𝐁𝐑𝐄𝐀𝐊𝐈𝐍𝐆 quake", "breaking quake"])
    assert tfidf.terms_.tolist() == ["breaking", "quake"]


def test_bigrams_pair_no_terms_across_sentences_urls_mentions_or_tags() -> None:
    text = "Bank of America. Rescue @bob https://x.com quake"
    assert tokenize([text], bigrams=True) == [
        ["bank", "america", "rescue", "@bob", "url:x.com", "quake", "bank america"]
    ]
    assert tokenize(["Rescue #quake victims! Wait… what? Magnitude 3.5 quake"], bigrams=True) == [
        ["rescue", "quake", "victims", "wait", "magnitude", "quake", "magnitude quake"]
    ]
    both = tokenize(["big #quake hits"], bigrams=True, hashtags="both")
    assert both == [["big", "#quake", "quake", "hits"]]
    assert tokenize(["東京で地震。大阪 news today"], bigrams=True)[0][-1] == "news today"


def test_bigrams_still_pair_across_removed_stop_words_and_decimals() -> None:
    assert tokenize(["bank of america, rates at 3.5 percent"], bigrams=True) == [
        ["bank", "america", "rates", "percent", "bank america", "america rates", "rates percent"]
    ]
