"""Tokenizer options: a list of stop words is used, and modes outside their choices are errors
instead of silent fallbacks."""

from __future__ import annotations

import pytest
from sparsewatch.models.text_features import StreamingTfidf, tokenize

TEXTS = ["Quake hits the Coast http://bbc.com/x #Breaking @reporter"]


def test_a_list_of_stop_words_is_removed() -> None:
    """Any value other than "english" was ignored: no stop word was removed at all."""
    tokens = StreamingTfidf(stop_words=["Quake", "coast"]).tokenize(TEXTS)[0]
    assert "quake" not in tokens and "coast" not in tokens
    assert {"hits", "the", "breaking"} <= set(tokens)


def test_english_and_none() -> None:
    english = StreamingTfidf(stop_words="english").tokenize(TEXTS)[0]
    kept = StreamingTfidf(stop_words=None).tokenize(TEXTS)[0]
    assert "the" not in english and "the" in kept
    assert set(english) == set(kept) - {"the"}


@pytest.mark.parametrize("stop_words", ["french", ["ok", 3]])
def test_other_stop_words_are_refused(stop_words: object) -> None:
    with pytest.raises(ValueError, match="stop_words must be"):
        StreamingTfidf(stop_words=stop_words).partial_fit(TEXTS)


@pytest.mark.parametrize(
    ("option", "value"), [("urls", "host"), ("hashtags", "words"), ("mentions", "strip")]
)
def test_modes_outside_their_choices_are_refused(option: str, value: str) -> None:
    """``urls="host"`` and ``mentions="strip"`` fell back to a default silently, and
    ``hashtags="words"`` failed only at the first hashtag (a KeyError)."""
    with pytest.raises(ValueError, match=f"{option} must be one of"):
        tokenize(TEXTS, **{option: value})
    with pytest.raises(ValueError, match=f"{option} must be one of"):
        tokenize(["no tags here"], **{option: value})
    with pytest.raises(ValueError, match=f"{option} must be one of"):
        StreamingTfidf(**{option: value}).partial_fit(TEXTS)
