"""Scripts written without spaces between words (Chinese, Japanese, Korean, Thai, ...) become
overlapping bigrams of grapheme units (``unsegmented="bigrams"``, the default): a Japanese clause
was one token, so two tweets about the same earthquake shared no term and a long clause left its
document empty. ``unsegmented="words"`` keeps the tokenizer as it was."""

from __future__ import annotations

import itertools
import re
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sparsewatch.consumers.detector_core import build_models
from sparsewatch.models import text_features
from sparsewatch.models.text_features import StreamingTfidf, tokenize
from sparsewatch.models.window_detector import DEFAULT_FEATURES, Detector

from sparsewatch.config import UNSEGMENTED_MODES, load_config
from sparsewatch.errors import SparsewatchError

JAPANESE = "東京で大きな地震が発生しました。津波警報が出ています"
CHINESE = "北京今天发生了重大交通事故，多人受伤"
THAI = "ข่าวด่วน แผ่นดินไหวที่กรุงเทพ"
MARKS = ("Mn", "Mc", "Me")


def test_japanese_clauses_become_overlapping_bigrams() -> None:
    assert tokenize([JAPANESE]) == [[
        "東京", "京で", "で大", "大き", "きな", "な地", "地震", "震が", "が発", "発生", "生し",
        "しま", "まし", "した", "津波", "波警", "警報", "報が", "が出", "出て", "てい", "いま",
        "ます",
    ]]  # fmt: skip


def test_chinese_clauses_become_overlapping_bigrams() -> None:
    assert tokenize([CHINESE]) == [[
        "北京", "京今", "今天", "天发", "发生", "生了", "了重", "重大", "大交", "交通", "通事",
        "事故", "多人", "人受", "受伤",
    ]]  # fmt: skip


def test_thai_bigrams_are_of_grapheme_units_so_no_term_starts_with_a_mark() -> None:
    """ข่ is a consonant and its tone mark, ดิ a consonant and its vowel sign: one unit each."""
    tokens = tokenize([THAI])[0]
    assert tokens == [
        "ข่า", "าว", "วด่", "ด่ว", "วน",
        "แผ่", "ผ่น", "นดิ", "ดิน", "นไ", "ไห", "หว", "วที่", "ที่ก", "กรุ", "รุง", "งเ", "เท", "ทพ",
    ]  # fmt: skip
    assert not [t for t in tokens if unicodedata.category(t[0]) in MARKS]


def test_thai_sara_am_stays_with_its_consonant() -> None:
    """SARA AM is a letter to ``\\w`` but a vowel sign of the consonant before it."""
    assert tokenize(["ทำงาน"]) == [["ทำง", "งา", "าน"]]


def test_korean_words_with_different_particles_share_their_stem() -> None:
    tokens = tokenize(["지진이 발생했다", "지진을 조사"])
    assert tokens == [["지진", "진이", "발생", "생했", "했다"], ["지진", "진을", "조사"]]


def test_a_run_of_one_character_is_a_unigram() -> None:
    """Exempt from the two-character minimum (a lone kanji between punctuation was dropped)."""
    assert tokenize(["雨。「雪」", "⚠️雨"]) == [["雨", "雪"], ["雨"]]
    assert tokenize(["a。「b」"]) == [[]]  # a Latin letter alone is still no token


def test_two_reports_of_one_story_share_terms() -> None:
    first = "東京で大きな地震が発生しました"
    second = "今朝の地震で東京の電車が止まった"
    shared = set.intersection(*map(set, tokenize([first, second])))
    assert {"東京", "地震"} <= shared
    assert not set.intersection(*map(set, tokenize([first, second], unsegmented="words")))


def test_a_long_chinese_sentence_is_not_dropped() -> None:
    """60 characters, above ``max_token_chars`` (40): one token before, dropped, and the
    document had no term at all."""
    sentence = (
        "今天上午北京市中心发生了一起严重的交通事故造成多人受伤"
        "目前警方正在调查原因据目击者称一辆大型货车闯红灯后撞上了正在进站的"
    )
    assert len(sentence) == 60
    tokens = tokenize([sentence])[0]
    assert tokens == [sentence[i : i + 2] for i in range(59)]
    assert tokenize([sentence], unsegmented="words") == [[]]
    P = StreamingTfidf().fit([sentence]).transform([sentence])
    assert P.nnz == len(set(tokens)) == 58 and np.isclose(P.sum(), 1.0)  # 正在 twice


def test_a_hashtag_word_matches_the_text_and_a_kept_tag_stays_whole() -> None:
    text = "#地震 東京で地震 #東日本大震災"
    assert tokenize([text]) == [
        ["地震", "東京", "京で", "で地", "地震", "東日", "日本", "本大", "大震", "震災"]
    ]
    assert tokenize([text], hashtags="keep") == [
        ["#地震", "東京", "京で", "で地", "地震", "#東日本大震災"]
    ]
    assert tokenize(["#地震です"], hashtags="both") == [["#地震です", "地震", "震で", "です"]]
    assert tokenize(["#雨"]) == [["雨"]]  # one character: a unigram, as in a text


def test_a_kept_tag_body_is_limited_as_before_and_the_word_by_its_terms() -> None:
    body = "地震" * 25  # 50 characters
    assert tokenize([f"#{body}"], hashtags="keep") == [[]]
    assert tokenize([f"#{body}"], hashtags="word") == [[body[i : i + 2] for i in range(49)]]


def test_a_mention_stays_whole_up_to_a_change_of_script() -> None:
    """Handles are ASCII on Twitter: the Japanese glued to one is text (it was part of the
    mention, and the text lost)."""
    assert tokenize(["@山田太郎 さん", "@yamada地震です"]) == [
        ["@山田太郎", "さん"],
        ["@yamada", "地震", "震で", "です"],
    ]
    assert tokenize(["@yamada地震です"], mentions="drop") == [["地震", "震で", "です"]]


def test_a_word_mixing_scripts_is_cut_where_the_script_changes() -> None:
    assert tokenize(["iPhone発売", "東京2020年", "ข่าวdrive東京"]) == [
        ["iphone", "発売"],
        ["東京", "年"],
        ["ข่า", "าว", "drive", "東京"],
    ]


def test_half_and_full_width_forms_read_as_the_ordinary_characters() -> None:
    assert tokenize(["ＮＨＫニュース ｶﾞｲﾄﾞ ＃速報"]) == [
        ["nhk", "ニュ", "ュー", "ース", "ガイ", "イド", "速報"]
    ]
    # all text is NFKC-normalised now (styled and width forms are plain letters in both modes)
    assert tokenize(["ＮＨＫ"], unsegmented="words") == [["nhk"]]


def test_word_bigrams_pair_no_character_bigram() -> None:
    tokens = tokenize(["breaking news 東京 quake hits"], bigrams=True)
    assert tokens == [["breaking", "news", "東京", "quake", "hits", "breaking news", "quake hits"]]


def test_the_words_mode_is_the_tokenizer_as_it_was() -> None:
    texts = [JAPANESE, CHINESE, THAI]
    assert tokenize(texts, unsegmented="words") == [
        ["東京で大きな地震が発生しました", "津波警報が出ています"],
        ["北京今天发生了重大交通事故", "多人受伤"],
        ["ข่าวด่วน", "แผ่นดินไหวที่กรุงเทพ"],
    ]
    tfidf = StreamingTfidf(unsegmented="words").fit(texts)
    assert tfidf.terms_.tolist()[:2] == ["東京で大きな地震が発生しました", "津波警報が出ています"]


def test_other_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="unsegmented must be one of"):
        tokenize(["text"], unsegmented="chars")
    with pytest.raises(ValueError, match="unsegmented must be one of"):
        StreamingTfidf(unsegmented="chars").partial_fit(["text"])


# ---------------------------------------------------------------------------- properties
_SCRIPT_CHARS = "東京地震が発生のニュースー지진이ข่าวด่ทำງານកម្ពុជាမြန်မာ々ｶﾞＮＨＫ"
_OTHER_CHARS = "ab'_1#@. \u0301\u200d😂"


# the blocks of the scripts written without spaces that _SCRIPT_CHARS draws from
_BLOCKS = re.compile("[\u0e00-\u0eff\u1000-\u11ff\u1780-\u17ff\u3040-\u9fff\uac00-\ud7af]")


def _body(term: str) -> str:
    """What ``max_token_chars`` bounds: a tag's body, a URL's domain, the term itself."""
    return term[4:] if term.startswith("url:") else term[1:] if term[:1] in "#@" else term


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(_SCRIPT_CHARS + _OTHER_CHARS), max_size=60),
    cap=st.integers(1, 8),
    hashtags=st.sampled_from(["word", "keep", "both"]),
    bigrams=st.booleans(),
)
def test_every_term_is_within_max_token_chars_and_of_at_most_two_units(
    text: str, cap: int, hashtags: str, bigrams: bool
) -> None:
    terms = tokenize([text], max_token_chars=cap, hashtags=hashtags, bigrams=bigrams)[0]
    for part in itertools.chain.from_iterable(t.split(" ") for t in terms):
        assert len(_body(part)) <= cap
        # a letter of those scripts and its marks: one unit; a mark of their blocks (a
        # half-width voiced mark folds to U+3099) or a SARA AM after a digit or a Latin letter
        # belongs to that word, which is read as any other
        units = [
            c for c in part if unicodedata.category(c) not in MARKS and c not in "\u0e33\u0eb3"
        ]
        if part[:1] not in "#@" and any(_BLOCKS.match(c) for c in units):
            assert len(units) <= 2, part


_LATIN = st.text(
    alphabet=st.one_of(
        st.characters(max_codepoint=0x0DFF, exclude_categories=("Cs",)),
        st.sampled_from(["😂", "⚠", "\ufe0f", "\u200d", "’", "–", "€"]),
    ),
    max_size=40,
)
_PIECES = st.sampled_from(["#tag", "@user", "https://bbc.com/x", "the", "don't", " ", "\x00"])


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(
        st.lists(st.one_of(_LATIN, _PIECES), max_size=6).map("".join), min_size=1, max_size=4
    ),
    options=st.fixed_dictionaries(
        {"hashtags": st.sampled_from(["word", "keep", "both"]), "bigrams": st.booleans()}
    ),
)
def test_text_without_those_scripts_is_unchanged_by_the_option(
    texts: list[str], options: dict
) -> None:
    """Whether or not a Japanese text shares the call (a block with one is scanned for runs)."""
    words = tokenize(texts, unsegmented="words", **options)
    assert tokenize(texts, **options) == words
    assert tokenize([JAPANESE, *texts], **options)[1:] == words


# ---------------------------------------------------------------------------- the detector
_STORIES = {
    "quake": [
        "東京で大きな地震",
        "震度五強を観測",
        "津波の心配なし",
        "気象庁が発表",
        "余震に注意",
        "電車が運転見合わせ",
    ],
    "baseball": [
        "大谷選手が本塁打",
        "ドジャースが勝利",
        "今季五十号に到達",
        "ファンが歓声",
        "試合は延長戦に",
        "監督が称賛",
    ],
    "election": [
        "衆議院選挙の投票",
        "与党が過半数割れ",
        "首相が記者会見",
        "野党が議席増",
        "投票率は過去最低",
        "開票速報が続く",
    ],
}
_INCREASING = list(itertools.combinations(range(6), 3))  # 20 orders of three phrases


def _reports(story: str, orders: list[tuple[int, ...]]) -> list[str]:
    """Tweets of one story: three of its phrases run together, no two alike."""
    return ["".join(_STORIES[story][i] for i in order) + "。" for order in orders]


def test_japanese_reports_of_a_known_story_score_below_a_new_story() -> None:
    """The product's default detector: warm-up on two stories, then new wordings of one of them
    and reports of a third. As one token per clause, every report was unseen (all scored
    alike, as unexplained); as bigrams the known story's reports are explained."""
    warmup = [
        d
        for pair in zip(
            _reports("quake", _INCREASING), _reports("baseball", _INCREASING), strict=True
        )
        for d in pair
    ]
    known = _reports("quake", [o[::-1] for o in _INCREASING[:10]])
    new = _reports("election", _INCREASING[:10])
    assert not set(known) & set(warmup)
    detector = Detector(warmup_docs=len(warmup))
    detector.process_window(warmup)
    scores = detector.process_window(known + new).scores
    assert scores[:10].max() < scores[10:].min()


def test_a_vocabulary_of_the_words_mode_restores_and_goes_on_learning() -> None:
    """A checkpoint taken before (its vocabulary holds whole clauses) restores under the new
    default: the old terms stay until evicted, the new bigrams join."""
    old = Detector(StreamingTfidf(**{**DEFAULT_FEATURES, "unsegmented": "words"}), warmup_docs=20)
    old.process_window(_reports("quake", _INCREASING))
    state = old.get_state()
    restored = Detector(warmup_docs=20).set_state(state)
    assert restored.features.terms_.tolist() == old.features.terms_.tolist()
    result = restored.process_window(_reports("quake", _INCREASING[:5]))
    assert np.isfinite(result.scores).all()
    terms = set(restored.features.terms_.tolist())
    assert "地震" in terms and set(old.features.terms_.tolist()) <= terms


# ---------------------------------------------------------------------------- configuration
def test_the_option_reaches_the_detector_features_from_the_configuration() -> None:
    assert UNSEGMENTED_MODES == text_features.UNSEGMENTED_MODES
    default = load_config(env={})
    assert default.detector.unsegmented == "bigrams"
    assert build_models(default.detector).detector.features.unsegmented == "bigrams"
    words = load_config(env={"SPARSEWATCH_DETECTOR_UNSEGMENTED": "words"})
    assert build_models(words.detector).detector.features.unsegmented == "words"
    with pytest.raises(SparsewatchError, match="SPARSEWATCH_DETECTOR_UNSEGMENTED"):
        load_config(env={"SPARSEWATCH_DETECTOR_UNSEGMENTED": "chars"})
