"""Streaming text features: tokenizer, bounded growing vocabulary, streaming TF-IDF.

The documents of Kasiviswanathan et al. (NIPS 2012, Sec. 5) are TF-IDF vectors ``p in R^m`` with
``||p||_1 = 1`` whose dimension ``m`` grows as new terms arrive (new rows are appended; the paper's
footnote zero-pads the dictionary and the dual variable). Here the vocabulary is also bounded, so
memory stays flat on an unbounded stream: when the cap is exceeded the terms with the smallest
*decayed* document frequency (rare and stale) are evicted, and :class:`StreamingTfidf` reports the
rows it kept (``kept_rows_``) and how many it appended (``n_new_``) so that model state can drop
and pad the same rows (:func:`remap_rows`).

Admission at the cap: a new term's count in one window is no match for the df a kept term
gathered over many, so a term refused (or evicted) is not forgotten but becomes a *candidate*: a
bounded counter (space-saving, Metwally et al. 2005; :data:`CANDIDATES_PER_FEATURE` times
``max_features`` slots) keeps its document frequency, decayed as ``df_``, and a candidate seen
again enters the vocabulary once that gathered frequency beats the rarest kept term's (ties: the
staler term goes; then the incumbent, or the term of the window's earlier document, stays). A term
new to a full counter takes the slot of the smallest count, whose count is then its over-count
bound: slots are kept by count plus bound, admission uses the count alone (never an over-count).
A steady new term thus enters even against terms that gathered their df long ago, with or
without decay. The candidates are model state (:meth:`StreamingTfidf.get_state`).

Tokenizer (deliberate choices for tweets and news):

* NFKC and case folding (``𝐁𝐑𝐄𝐀𝐊𝐈𝐍𝐆``, ``ＢＲＥＡＫＩＮＧ`` and ``Breaking`` are ``breaking``,
  ``ﬁ`` is ``fi``, ``ß`` is ``ss``), without the Arabic tatweel and vowel marks or Hebrew niqqud
  (:func:`_normalized`), whose hamza and madda stay parts of their letters (``أ``, ``آ``); Latin
  diacritics stay (``café`` is not ``cafe``);
* lower case, Unicode-aware words (``\\w`` letters of any script and the combining marks and
  zero-width (non-)joiners inside them, so Devanagari, vowelled Arabic or Persian words stay
  whole; a word starts at a ``\\w`` character and ends at no joiner, so the variation selector of
  ``⚠️BREAKING`` or a joiner glued to an emoji is no part of a word or tag; text is
  NFKC-normalised, so a word typed precomposed, decomposed or in presentation forms (Hebrew
  ``שׁ``, U+FB2A; Arabic ``ﺃ``, U+FE83) is one token, the dot of a
  lower-cased Turkish ``İ`` is dropped, and so are soft hyphens and variation selectors; tokens
  must contain a letter and have at least two characters; pure numbers are dropped, they are
  mostly noise in news wires); an apostrophe inside a word is part of it, so a possessive is a
  term apart from its noun (``company's`` is not ``company``, as ``don't`` is one term): a
  deliberate choice, without stemming, that every benchmark's features were measured with;
* URLs become one token ``url:<domain>`` (``urls="domain"``; the host only: no user, port, query
  or the sentence's punctuation after it), or ``"drop"``; a URL is its RFC 3986 characters but
  ``'`` and ``,``, so it ends at the first non-ASCII character (``…``, ``）``) and a word glued
  after a comma is kept; ``https://`` starts a URL even glued to a word (``詳細はhttps://``);
* ``#hashtags`` become the bare word (``hashtags="word"``, so ``#quake`` and ``quake`` match, and a
  body that would not be a word token, a stop word or one character, is dropped), or are kept as
  ``#tag`` (``"keep"``), or both (``"both"``), or dropped;
* ``@mentions`` are kept as ``@user`` (distinct from the word) or dropped (``mentions="drop"``);
  a ``#`` or ``@`` inside a word (an e-mail address) starts no tag or mention;
* scripts written without spaces between words (Chinese, Japanese, Korean, Thai, Lao, Khmer,
  Myanmar) become overlapping bigrams (``unsegmented="bigrams"``, the default; below);
* English stop words (scikit-learn's list) are removed; optional bigrams of adjacent kept tokens
  (across removed stop words, as scikit-learn), none across sentence punctuation (``.``, ``!``,
  ``?``, ``;``, ``:`` before a space, ``。``) nor with a URL, hashtag or mention token;
* tokens longer than ``max_token_chars`` (default 40) are dropped: a word, the body of a hashtag
  or mention (without ``#``/``@``) or a URL's domain. Such "words" are base64 blobs, hashes or
  glued-together junk, never the vocabulary of a story, and the vocabulary is a fixed-width
  unicode array (``terms_``, kept in every checkpoint and snapshot): one 20,000-character token
  padded a 5,000-term vocabulary from 0.12 MB to 400 MB. 40 is well above the longest words of
  a dictionary, and bounds a bigram to ``2 * 40 + 1`` characters. (With ``unsegmented="bigrams"``
  the terms of a run of the unsegmented scripts are bounded each, not the run.)

Scripts written without spaces between words: a Japanese or Chinese clause is one run of word
characters, so as one token (``unsegmented="words"``, the tokenizer as it was) two tweets about the
same earthquake shared no term, every clause was a one-off term, and a clause longer than
``max_token_chars`` left its document empty. Without a dictionary (no per-language model to ship
and keep current), a search engine indexes such text as overlapping bigrams (Lucene's
``cjk_bigram``), and so does ``unsegmented="bigrams"``:

* a run of Han, Hiragana, Katakana and Hangul letters becomes its overlapping bigrams
  (``地震が発生``: ``地震``, ``震が``, ``が発``, ``発生``); a run of one character, that unigram
  (exempt from the two-character minimum). The four are one family, as in ``cjk_bigram``:
  Japanese mixes the first three inside a word, Korean writes hanja among hangul, and hangul is
  paired too because Korean words carry particles (``지진이`` and ``지진을`` share ``지진``);
* Thai, Lao, Khmer and Myanmar (a family each) have no spaces between words either, but a
  character there may be a vowel sign or tone mark that only modifies the letter before it, so
  their bigrams are of grapheme units: a letter with the combining marks (and the Thai and Lao
  vowel SARA AM) that follow it. A term never starts with a mark (``ที่กรุง``: ``ที่ก``, ``กรุ``,
  ``รุง``; character bigrams would make ``่ก``, a tone mark and the next consonant, part of no
  word), and no table or library is needed (a unit is close to Unicode's grapheme cluster, UAX
  #29, for these scripts). The Han family's units are its characters (but for a variation
  selector or a voiced-sound mark NFC did not compose, which stay with their character);
* a run ends where the family changes and at a digit (the scripts' digits are numbers, dropped
  as ``2024`` is); a word mixing scripts is cut there, each part read by its own rule
  (``iPhone発売``: ``iphone``, ``発売``; ``東京2020年``: ``東京``, ``年``);
* half-width and full-width forms (U+FF00-U+FFEF, typed in Japanese text) are read as their
  ordinary characters (NFKC, as all text): ``ＮＨＫ`` is ``nhk``, ``＃地震`` a hashtag,
  half-width ``ｶﾀｶﾅ`` is ``カタカナ``;
* a hashtag's bare word (``hashtags="word"`` or ``"both"``) is read as a word is, so ``#地震``
  matches the ``地震`` of a text and ``#東日本大震災`` gives the bigrams of ``東日本大震災``; a
  kept ``#tag`` (``"keep"``, ``"both"``) stays whole, its body limited as before (Twitter's
  hashtags include these scripts' letters);
* an ``@mention`` stays whole (an identifier, not text), but its handle ends where the body's
  script changes (``@yamada地震です``: ``@yamada``, then ``地震``, ``震で``, ``です``): handles
  are ASCII on Twitter and Mastodon, so text glued to one is no part of it;
* ``max_token_chars`` bounds each term, not the run: a 60-character Chinese sentence gives its 59
  bigrams instead of nothing;
* stop words are English only, applied as before (a list's two-character word removes that
  bigram);
* ``bigrams`` pairs no term of such a run with its neighbour: a pair of overlapping character
  bigrams is a character trigram (four-gram across a run's end), many more terms, each rarer,
  for little more than the bigrams already match.

Text without letters of those scripts gets the same tokens in both modes:
a block of :data:`TOKEN_BLOCK` texts is scanned for runs only when it holds such a character, so
Latin text pays one scan of its non-ASCII blocks (about 2 ns a character).

Weighting: ``(1 + log tf) * idf`` (``sublinear_tf``), ``idf = log((1 + N) / (1 + df)) + 1`` with
exponentially decayed ``N`` and ``df`` (half-life ``df_half_life`` documents), optional salient-term
truncation (keep the ``max_terms_per_doc`` largest weights of each document), then l1 normalisation.
Terms not in the vocabulary (when scoring without learning) keep their weight in the normaliser and
are returned as ``oov_mass``: no atom covers them, so they add exactly that mass to the l1 error.

Memory: a window is tokenized :data:`TOKEN_BLOCK` texts at a time, a block of at most
:data:`TOKEN_BLOCK_CHARS` characters (so a block of long stories peaks near 60 MB, not near 10 GB
for 4,096 stories of 100 kB), and its tokens are kept as numbers (an index of the window's
distinct terms), so learning and weighting a window of tweets peaks at about 0.8 kB a tweet
instead of 2.1 kB with a list of token strings per tweet; the features are the same.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from numbers import Integral
from typing import Any, Literal, cast, overload

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from sklearn.utils import Tags
from sklearn.utils.validation import check_is_fitted

__all__ = ["StreamingTfidf", "remap_rows", "tokenize", "tokenize_flat"]


def _combining_marks() -> str:
    """Character ranges (for a regex class) of the combining marks (Unicode categories Mn, Mc, Me)
    of the Basic Multilingual Plane that ``\\w`` does not match: Devanagari vowel signs and
    viramas, Arabic harakat, the accents of decomposed Latin. ``\\w`` alone cut ``हिन्दी`` into
    nothing and ``समाचार`` into ``सम``. Marks of the supplementary planes (historic scripts such as
    Brahmi) are left out: a class reaching beyond the BMP is matched by a linear scan of its ranges
    for every character that is not a word character, which made tokenization 3x slower."""
    word = re.compile(r"\w")
    marks = np.array(
        [
            c
            for c in range(0x300, 0x10000)
            if unicodedata.category(chr(c))[0] == "M" and not word.match(chr(c))
        ]
    )
    runs = np.split(marks, np.flatnonzero(np.diff(marks) != 1) + 1)
    return "".join(f"{chr(r[0])}-{chr(r[-1])}" for r in runs)


# What continues a word without being \w: the combining marks and the zero-width non-joiner and
# joiner (format characters inside words, UAX #29: Persian writes ``می‌خواهم`` with a non-joiner)
_MARKS = _combining_marks()
_JOINERS = "\u200c\u200d"
_MARK = f"[{_MARKS}{_JOINERS}]"
# A word character: \w or one of those (one class: a single-character class repeats fast).
_WCHAR = rf"[\w{_MARK[1:-1]}]"
# Word characters after a word's first, not ending with a joiner (a class repeated, then a
# lookbehind: several times faster than a group repeated character by character).
_WNEXT = rf"{_WCHAR}+(?<![{_JOINERS}])"
# the variation selectors (VS1-VS16 and the ideographic variation selectors VS17-VS256)
_VARIATION_SELECTORS = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")
# a URL: its RFC 3986 characters (ASCII letters, digits, unreserved, reserved and ``%``), so it
# ends at a space, at any non-ASCII character (``（https://nhk.or.jp/a）大阪``, ``…``) and at
# two deliberate exceptions: ``'`` (a URL quoted in a sentence) and ``,`` (``https://bbc.com/x,
# quake``: a comma glued to a word is a tweet's missing space far more often than a path's
# comma). A trailing ``.`` or ``)`` stays in the URL, as before: only its host is kept
# (:data:`_URL_HOST`), which ends before them
_URL = r"(?:https?://|www\.)[A-Za-z0-9\-._~:/?#\[\]@!$&()*+;=%]+"
# where ``https://`` or ``http://`` is glued to a word (``詳細はhttps://nhk.or.jp``): a URL starts
# there all the same (a space is put before it)
_GLUED_URL = re.compile(r"\B(?=https?://)")
# a run of word characters with a letter, from its first \w (the marks and joiners before it
# are not the word's: ``⚠️BREAKING`` is U+26A0, the variation selector U+FE0F, a mark, then
# ``breaking``) to its last \w or mark, two characters or more: the word is the group. It
# starts only where a run of word characters starts, after no word character or mark (the
# lookbehinds change no match: a run whose start fails has no letter, or is one letter), else
# the letter lookahead rescans a run of digits from each of its positions: a 20,000-digit blob
# took 7 s, quadratic in its length
_WORD = rf"(?<!\w)(?<!{_MARK})(?={_WCHAR}*[^\W\d_]){_MARK}*(\w{_WNEXT}(?:'{_WNEXT})*)"
# a tag or mention starts where no word does (``bob@example.com`` mentions nobody): after no
# \w, and after no mark that ends a word (one after an emoji, ``⚠️#quake``, ends none); the
# ``#`` or ``@`` first, so the lookbehinds are not tried at every position
_TAG = rf"[#@](?<!\w[#@])(?<!{_WCHAR}{_MARK}[#@])\w(?:{_WNEXT})?"
_TOKEN = re.compile(rf"({_URL})|({_TAG})|{_WORD}|(\x00)", re.UNICODE)
# with ``bigrams``: the last group also matches sentence punctuation (a ``.``, ``!``, ``?``,
# ``;`` or ``:`` before a space or a document's end, or ``。``), where no pair is made
_BREAKS = r"\x00|[.!?;:]+(?=\s|\x00|$)|。"
_TOKEN_BREAKS = re.compile(rf"({_URL})|({_TAG})|{_WORD}|({_BREAKS})", re.UNICODE)
# what ends a pair in a document's tokens (no term holds it)
_BREAK = "\x01"
_HAS_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
# a URL's host: after any user, the run of word characters, dots and hyphens (the path, query,
# fragment or port end it) up to its last word character, so the sentence's punctuation after it
# is cut (``(see https://bbc.com).`` names ``bbc.com``); backtracking over the run is linear
_URL_HOST = re.compile(rf"(?:https?://)?(?:[^/?#@]*@)?(?:www\.)?([\w{_MARK[1:-1]}.-]*{_WCHAR})?")
_SEP = "\x00"
_URL_MODES = ("domain", "drop")
_HASHTAG_MODES = ("word", "keep", "both", "drop")
_MENTION_MODES = ("keep", "drop")
UNSEGMENTED_MODES = ("bigrams", "words")

# Scripts written without spaces between words (module docstring): the Unicode blocks of each,
# one family per script whose letters form one run (Japanese mixes kanji, hiragana and
# katakana in one word, Korean writes hanja among hangul, as cjk_bigram pairs them)
_UNSEGMENTED_BLOCKS = {
    "cjk": (
        (0x1100, 0x11FF),  # Hangul Jamo
        (0x3000, 0x303F),  # CJK symbols: the iteration marks 々 〻, 〆, 〇 and Hangzhou numerals
        (0x3040, 0x30FF),  # Hiragana, Katakana (with the prolonged sound mark ー)
        (0x3130, 0x318F),  # Hangul Compatibility Jamo (half-width hangul folds to them)
        (0x31F0, 0x31FF),  # Katakana Phonetic Extensions
        (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
        (0x4E00, 0x9FFF),  # CJK Unified Ideographs
        (0xA960, 0xA97F),  # Hangul Jamo Extended-A
        (0xAC00, 0xD7FF),  # Hangul Syllables, Hangul Jamo Extended-B
        (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    ),
    "thai": ((0x0E00, 0x0E7F),),
    "lao": ((0x0E80, 0x0EFF),),
    "khmer": ((0x1780, 0x17FF),),
    "myanmar": ((0x1000, 0x109F), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F)),
}
# Thai and Lao SARA AM are letters to \w but vowel signs that follow their consonant (UAX #29
# SpacingMark): part of the grapheme unit before them, as the combining marks are
_SPACING_VOWELS = "\u0e33\u0eb3"


def _script_letters(blocks: tuple[tuple[int, int], ...]) -> str:
    """Character ranges (for a regex class) of the letters of ``blocks``: word characters that
    are no digit (a run of Thai digits is a number, dropped as ``2024`` is) and no mark."""
    word = re.compile(r"\w")
    codes = np.array(
        [
            c
            for lo, hi in blocks
            for c in range(lo, hi + 1)
            if word.match(chr(c))
            and unicodedata.category(chr(c)) not in ("Nd", "Mn", "Mc", "Me")
            and chr(c) not in _SPACING_VOWELS
        ]
    )
    runs = np.split(codes, np.flatnonzero(np.diff(codes) != 1) + 1)
    return "".join(f"{chr(r[0])}-{chr(r[-1])}" for r in runs)


_FAMILY_LETTERS = {name: _script_letters(blocks) for name, blocks in _UNSEGMENTED_BLOCKS.items()}
_UNSEGMENTED_LETTER = f"[{''.join(_FAMILY_LETTERS.values())}]"
# a grapheme unit: a letter of those scripts and the marks that follow it (not the joiners)
_UNIT = f"{_UNSEGMENTED_LETTER}[{_MARKS}{_SPACING_VOWELS}]*"
# the overlapping pairs of units of a run of one family (a lookahead matches at every unit)
_UNIT_PAIRS = re.compile(f"(?=({_UNIT}{_UNIT}))")
# a word cut into runs of units of one family (group 1) and the rest (group 2)
_SEGMENTS = re.compile(
    "("
    + "|".join(
        f"(?:[{letters}][{_MARKS}{_SPACING_VOWELS}]*)+" for letters in _FAMILY_LETTERS.values()
    )
    + f")|([^{''.join(_FAMILY_LETTERS.values())}]+)"
)
_WORDS = re.compile(_WORD)
_HAS_UNSEGMENTED = re.compile(_UNSEGMENTED_LETTER)
# The tokens of text with such scripts: _TOKEN's, and a word of one unit (a lone kanji)
_TOKEN_UNSEGMENTED = re.compile(
    rf"({_URL})|({_TAG})|{_WORD}|(?<!\w)(?<!{_MARK}){_MARK}*({_UNIT})|(\x00)", re.UNICODE
)
_TOKEN_UNSEGMENTED_BREAKS = re.compile(
    rf"({_URL})|({_TAG})|{_WORD}|(?<!\w)(?<!{_MARK}){_MARK}*({_UNIT})|({_BREAKS})", re.UNICODE
)
# Whether a text may hold such a letter: whole blocks of the Basic Multilingual Plane, so the
# class is a bitmap (a text without them is tokenized by _TOKEN, and the check costs about 2 ns
# a character)
_MAY_BE_UNSEGMENTED = re.compile(
    "["
    + "".join(f"{chr(lo)}-{chr(hi)}" for b in _UNSEGMENTED_BLOCKS.values() for lo, hi in b)
    + "]"
)


def _special(
    url: str,
    tag: str,
    urls: str,
    hashtags: str,
    mentions: str,
    max_chars: float,
    stop: frozenset[str],
) -> list[str]:
    """Tokens for a URL, a #hashtag or an @mention (none when the domain or tag body is longer
    than ``max_chars``; a hashtag's bare word only when it would be a word token: two characters
    or more, not in ``stop``)."""
    if url:
        if urls == "drop":
            return []
        # (every part of the pattern is optional: it matches every string)
        host = cast("re.Match[str]", _URL_HOST.match(url)).group(1) or ""
        return [f"url:{host}"] if host and len(host) <= max_chars else []
    body = tag[1:]
    if len(body) > max_chars or not _HAS_LETTER.search(body):
        return []
    if tag[0] == "@":
        return [] if mentions == "drop" else [tag]
    word = [body] if len(body) >= 2 and body not in stop else []
    return {"word": word, "keep": [tag], "both": [tag, *word], "drop": []}[hashtags]


# removed before normalisation, so that a mark behind one composes with its letter: soft hyphens
# (invisible line-break hints inside words: ``news\u00adpaper`` is ``newspaper``), the variation
# selectors (they choose a glyph: ``辻󠄀本``, written with a Japanese ideographic variant, is
# ``辻本``) and the trade mark signs (NFKC spells ``™`` as ``tm``, gluing it to the brand)
_REMOVED_FIRST = re.compile("[\u00ad\ufe00-\ufe0f\U000e0100-\U000e01ef\u2120\u2122]")
# removed after NFKC, which yields some of them (the Hebrew presentation forms ``שׁ``, U+FB2A, and
# ``בּ``, U+FB31, are a letter and its niqqud; the Arabic U+FE77 a tatweel and a fatha): the Arabic
# tatweel (a stretch of the baseline, ``خـبـر`` is ``خبر``), harakat and Quranic marks and Hebrew
# niqqud and cantillation (vowel signs most text omits: a vowelled word is its bare word), but
# not the madda and hamza above and below (U+0653-U+0655): parts of the letters ``آ``, ``أ``,
# ``إ``, ``ؤ``, ``ئ``, which NFKC composes from them (removed first, a decomposed ``أحمد`` lost
# its hamza and was ``احمد``)
_REMOVED_MARKS = re.compile(
    "[\u0640\u064b-\u0652\u0656-\u065f\u0670\u06d6-\u06dc\u06df-\u06e4\u06e7\u06e8"
    "\u06ea-\u06ed\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7]"
)


def _normalized(text: str) -> str:
    """``text`` as the tokenizer reads it: NFKC, then case-folded (Unicode's caseless matching,
    as ``NFKC_Casefold``): styled letters (``𝐁𝐑𝐄𝐀𝐊𝐈𝐍𝐆``), ligatures (``ﬁ``), half-width and
    full-width forms (``ＮＨＫ``, ``＃地震``, half-width ``ｶﾞ``) are their plain letters and
    ``ß`` is ``ss``; the dot of a case-folded Turkish ``İ`` is dropped; ``’`` and ``ʼ`` (U+02BC)
    are ``'``; ``…`` is `` ... `` (NFKC's dots, spaced: they end a URL and a word); soft hyphens,
    variation selectors and the trade mark signs are removed first (:data:`_REMOVED_FIRST`), the
    Arabic tatweel and vowel marks and Hebrew niqqud after NFKC (:data:`_REMOVED_MARKS`), and
    the text composed again (NFC) when one was removed (a tatweel or mark between a letter and
    its hamza kept them apart), so a word typed precomposed, decomposed or in presentation forms
    is one token; the Thai and Lao SARA AM, which NFKC splits, stay one vowel. Latin diacritics
    stay (``café`` is not ``cafe``), typed precomposed or not."""
    if text.isascii():
        return text.lower()
    text = _REMOVED_FIRST.sub("", text.replace("\u2026", " ... "))
    text = unicodedata.normalize("NFKC", text)
    bare = _REMOVED_MARKS.sub("", text)
    if len(bare) != len(text):
        text = unicodedata.normalize("NFC", bare)
    text = text.casefold().replace("i\u0307", "i")
    text = text.replace("\u2019", "'").replace("\u02bc", "'")
    # NFKC splits the Thai and Lao SARA AM into NIKHAHIT and SARA AA: one vowel again
    return text.replace("\u0e4d\u0e32", "\u0e33").replace("\u0ecd\u0eb2", "\u0eb3")


def tokenize(texts: Sequence[str], **options: Any) -> list[list[str]]:
    """Tokens of each document: :func:`tokenize_flat`'s (same keyword ``options``), one list per
    document."""
    flat, lens = tokenize_flat(texts, **options)
    tokens = iter(flat)
    return [list(itertools.islice(tokens, n)) for n in lens]


def tokenize_flat(
    texts: Sequence[str],
    *,
    stop_words: frozenset[str] | None = ENGLISH_STOP_WORDS,
    bigrams: bool = False,
    urls: str = "domain",
    hashtags: str = "word",
    mentions: str = "keep",
    max_token_chars: int | None = 40,
    unsegmented: str = "bigrams",
) -> tuple[list[str], list[int]]:
    """Tokenize many documents with one regular-expression pass over their concatenation: all
    documents' tokens in one list, and the number of each document's (no list per document:
    fewer objects for the garbage collector to scan).

    ``max_token_chars``: longer words, tag bodies and URL domains are dropped (``None``: none).
    ``urls``, ``hashtags``, ``mentions`` and ``unsegmented`` outside their choices raise
    ``ValueError`` (they fell back to a default silently, or failed at the first hashtag).
    ``stop_words`` are read as the text is (:func:`_normalized`), so a list's ``don’t``, ``The``
    or decomposed ``café`` removes the token the same word becomes in a text (it removed
    nothing). ``unsegmented="bigrams"``: the scripts written without spaces become overlapping
    bigrams of grapheme units (module docstring); ``"words"``: a run of word characters is one
    token whatever its script, as before (a Japanese clause is one token).
    """
    for name, value, choices in (
        ("urls", urls, _URL_MODES),
        ("hashtags", hashtags, _HASHTAG_MODES),
        ("mentions", mentions, _MENTION_MODES),
        ("unsegmented", unsegmented, UNSEGMENTED_MODES),
    ):
        if value not in choices:
            raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    if not texts:
        return [], []
    segment = unsegmented == "bigrams"
    words = _SEP.join(w.replace(_SEP, " ") for w in stop_words or ())
    words = _normalized(words)
    stop = frozenset(words.split(_SEP)) if words else frozenset()
    cap = np.inf if max_token_chars is None else max_token_chars
    joined = _normalized(_SEP.join(t.replace(_SEP, " ") for t in texts))
    if "://" in joined:
        joined = _GLUED_URL.sub(" ", joined)
    grams: set[str] | None = set() if bigrams else None
    opts = _Options(urls, hashtags, mentions, cap, stop, bigrams)
    # a block without a letter of those scripts is read as before, its tokens unchanged; the
    # check costs one scan of a non-ASCII block
    if segment and not joined.isascii() and _MAY_BE_UNSEGMENTED.search(joined):
        flat, ends = _scan_unsegmented(joined, opts, grams)
    else:
        flat, ends = _scan(joined, opts)
    ends.append(len(flat))
    if not bigrams:
        return flat, [b - a for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    # pairs of adjacent terms, none across a break (sentence punctuation, a URL, tag or
    # mention) and none of character bigrams (module docstring)
    docs = []
    no_pair = (grams or set()) | {_BREAK}
    for a, b in zip([0, *ends[:-1]], ends, strict=True):
        d = flat[a:b]
        pairs = [
            f"{x} {y}" for x, y in itertools.pairwise(d) if x not in no_pair and y not in no_pair
        ]
        docs.append([t for t in d if t != _BREAK] + pairs)
    return list(itertools.chain.from_iterable(docs)), [len(d) for d in docs]


@dataclass(frozen=True)
class _Options:
    """The tokenizer options a scan of the text reads (``cap``: ``max_token_chars``, ``inf``
    for none; ``stop``: the stop words read as the text is)."""

    urls: str
    hashtags: str
    mentions: str
    cap: float
    stop: frozenset[str]
    breaks: bool = False

    @property
    def pattern(self) -> re.Pattern[str]:
        """The token pattern of text without the unsegmented scripts (with ``breaks``, sentence
        punctuation also matches, in the separator's group)."""
        return _TOKEN_BREAKS if self.breaks else _TOKEN

    def special(self, url: str, tag: str) -> list[str]:
        """:func:`_special`'s tokens, each between breaks when pairs are made (``breaks``)."""
        terms = _special(url, tag, self.urls, self.hashtags, self.mentions, self.cap, self.stop)
        if self.breaks and terms:
            return [_BREAK, *itertools.chain.from_iterable((t, _BREAK) for t in terms)]
        return terms

    @cached_property
    def stop_grams(self) -> frozenset[str]:
        """The stop words a run of the unsegmented scripts can yield (none of English's)."""
        return frozenset(w for w in self.stop if _HAS_UNSEGMENTED.search(w))


def _scan(joined: str, opts: _Options) -> tuple[list[str], list[int]]:
    """All tokens of ``joined`` (documents separated by ``_SEP``) and the token count before
    each separator: a run of word characters is one word, whatever its script. With
    ``opts.breaks``, :data:`_BREAK` where a pair ends (sentence punctuation, around a URL, tag
    or mention)."""
    flat: list[str] = []
    ends: list[int] = []
    cap, stop = opts.cap, opts.stop
    for url, tag, word, sep in opts.pattern.findall(joined):
        if word:
            if len(word) <= cap and word not in stop:
                flat.append(word)
        elif sep == _SEP:
            ends.append(len(flat))
        elif sep:
            flat.append(_BREAK)
        else:
            flat.extend(opts.special(url, tag))
    return flat, ends


def _scan_unsegmented(
    joined: str, opts: _Options, grams: set[str] | None
) -> tuple[list[str], list[int]]:
    """As :func:`_scan`, with the runs of the scripts written without spaces (in words, lone
    units and hashtag bodies) as bigrams of units (:func:`_split_word`), whose terms are added
    to ``grams`` (unless ``None``). A word without such a letter is read as by :func:`_scan`."""
    flat: list[str] = []
    ends: list[int] = []
    cap, stop = opts.cap, opts.stop
    pattern = _TOKEN_UNSEGMENTED_BREAKS if opts.breaks else _TOKEN_UNSEGMENTED
    brk = [_BREAK] if opts.breaks else []
    for url, tag, word, unit, sep in pattern.findall(joined):
        if word:
            if word.isascii() or not _HAS_UNSEGMENTED.search(word):
                if len(word) <= cap and word not in stop:
                    flat.append(word)
            else:
                flat.extend(_split_word(word, opts, grams))
        elif unit:
            flat.extend(_split_word(unit, opts, grams))
        elif sep == _SEP:
            ends.append(len(flat))
        elif sep:
            flat.append(_BREAK)
        elif tag[:1] == "#" and opts.hashtags in ("word", "both") and _HAS_UNSEGMENTED.search(tag):
            whole = [*brk, tag] if opts.hashtags == "both" and len(tag) - 1 <= cap else []
            flat.extend(whole + brk + _split_word(tag[1:], opts, grams) + brk)
        elif tag[:1] == "@" and _HAS_UNSEGMENTED.search(tag):
            # the handle is the body's first run of one script (``@yamada地震``: ``@yamada``),
            # the rest is text
            end = cast("re.Match[str]", _SEGMENTS.match(tag, 1)).end()
            flat.extend(opts.special("", tag[:end]))
            flat.extend(_split_word(tag[end:], opts, grams))
        else:
            flat.extend(opts.special(url, tag))
    return flat, ends


def _split_word(word: str, opts: _Options, grams: set[str] | None) -> list[str]:
    """The terms of a word holding letters of the scripts written without spaces: each run of
    one family's units gives its overlapping bigrams of units (one unit: that unigram), each
    part in between the words :data:`_WORD` finds in it (``東京drive2020年``: ``東京``,
    ``drive2020``, ``年``). Terms longer than ``opts.cap`` or stop words are dropped (a run's
    terms are filtered only when one is longer or a stop word could be one), and the runs'
    terms are added to ``grams``."""
    terms: list[str] = []
    for run, rest in _SEGMENTS.findall(word):
        if run:
            pairs = _UNIT_PAIRS.findall(run) or [run]
            if opts.stop_grams or (len(run) > opts.cap and max(map(len, pairs)) > opts.cap):
                pairs = [t for t in pairs if len(t) <= opts.cap and t not in opts.stop_grams]
            if grams is not None:
                grams.update(pairs)
            terms += pairs
        else:
            terms += [w for w in _WORDS.findall(rest) if len(w) <= opts.cap and w not in opts.stop]
    return terms


# Texts tokenized at a time: a block's tokens live as strings only until they are numbered
# (:class:`_Tokens`), so a window's tokens take 8 bytes each, not a string object each.
TOKEN_BLOCK = 4096
# Characters tokenized at a time: a block also ends before the text that would take it past
# this many (a longer text is a block alone). A block's tokens, as strings and the scan's match
# tuples, peak at about 150 bytes each, 27 bytes a character of English: a block of 4,096 texts
# bounded by count alone peaked near 1 GB for 10 kB stories (by extrapolation 10 GB at 100 kB),
# under this budget near 60 MB whatever the texts' length. 4,096 tweets stay under it (280
# characters at most): their blocks are unchanged. Smaller blocks cost time (1M characters:
# Reuters-21578 in 17 blocks instead of 6, 10% slower; 2M: 9 blocks, 4%).
TOKEN_BLOCK_CHARS = 1 << 21


@dataclass(frozen=True)
class _Tokens:
    """A window's tokens as numbers: ``terms[ids]``, documents one after the other (``lens``
    tokens each); ``terms`` in order of first appearance."""

    terms: list[str]
    ids: np.ndarray
    lens: np.ndarray

    def document_counts(self) -> np.ndarray:
        """Documents containing each term."""
        n_terms = max(len(self.terms), 1)
        doc = np.repeat(np.arange(self.lens.size, dtype=np.int64), self.lens)
        pairs = np.sort(doc * n_terms + self.ids)
        first = np.r_[True, pairs[1:] != pairs[:-1]] if pairs.size else np.zeros(0, dtype=bool)
        return np.bincount(pairs[first] % n_terms, minlength=len(self.terms))


def _blocks(texts: list[str]) -> list[tuple[int, int]]:
    """Bounds ``(lo, hi)`` of the consecutive blocks ``texts[lo:hi]`` tokenized at a time: at
    most :data:`TOKEN_BLOCK` texts and :data:`TOKEN_BLOCK_CHARS` characters each, but at least
    one text; one empty block for no texts (the tokenizer then still checks its options)."""
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))
    bounds: list[tuple[int, int]] = []
    lo = 0
    while lo < len(texts) or not bounds:
        start = int(ends[lo - 1]) if lo else 0
        fits = int(np.searchsorted(ends, start + TOKEN_BLOCK_CHARS, side="right"))
        hi = min(max(fits, lo + 1), lo + TOKEN_BLOCK, len(texts))
        bounds.append((lo, hi))
        lo = hi
    return bounds


def checked_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list; ``ValueError`` for a single string (a sequence of texts is expected:
    its characters were taken for documents), ``TypeError`` for a document that is not a str."""
    if isinstance(texts, str | bytes):
        raise ValueError(
            f"Iterable over raw text documents expected, {type(texts).__name__} object received."
        )
    texts = list(texts)
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"every document must be a str, got {type(t).__name__}")
    return texts


def _within_token_chars(terms: np.ndarray, max_chars: int | None) -> np.ndarray:
    """Whether the tokenizer can still yield each term under ``max_chars``: each word, URL
    domain (after ``url:``) and tag or mention body (after ``#`` or ``@``) of it, a bigram's
    two included, at most ``max_chars`` long (a term's own length bounds them: only the
    longer terms are split)."""
    ok = np.ones(terms.size, dtype=bool)
    if max_chars is None or terms.size == 0:
        return ok
    ok = np.char.str_len(terms) <= max_chars
    for i in np.flatnonzero(~ok).tolist():
        parts = str(terms[i]).split(" ")
        bodies = [
            p[4:] if p.startswith("url:") else p[1:] if p[:1] in ("#", "@") else p for p in parts
        ]
        ok[i] = all(len(b) <= max_chars for b in bodies)
    return ok


# Capacity of the admission candidates, in vocabulary sizes (``max_features``). Space-saving
# with ``k`` counters keeps every term of more than ``1 / k`` of the counted occurrences: twice
# the vocabulary's room follows the terms that could enter it at little cost (a string, two
# floats and an integer each)
CANDIDATES_PER_FEATURE = 2


def remap_rows(M: np.ndarray, kept_rows: np.ndarray, n_new: int) -> np.ndarray:
    """Drop evicted rows of ``M`` and zero-pad ``n_new`` rows at the end (vocabulary update)."""
    out = M[kept_rows]
    if n_new:
        out = np.vstack([out, np.zeros((n_new, *M.shape[1:]), dtype=M.dtype)])
    return out


class StreamingTfidf(BaseEstimator):
    """Streaming TF-IDF with a growing, bounded vocabulary (documents are l1-normalised columns).

    Parameters
    ----------
    max_features : vocabulary cap; beyond it the rarest, stalest terms are evicted, and a new
        term enters once its df, gathered as a candidate, beats the rarest kept term's (see
        module). ``None``: no cap, as in scikit-learn's vectorisers (the vocabulary then grows
        with the stream).
    df_half_life : half-life (> 0), in documents, of the document frequencies (``None``: no
        decay).
    min_df_new : a new term enters the vocabulary only when it appears in at least this many
        documents of the window that introduces it (1 = every term); a term already a candidate
        (refused or evicted at ``max_features``) adds the documents of every window it appears
        in to its gathered df, however few.
    max_terms_per_doc : salient-term truncation (keep the largest TF-IDF weights), ``None`` = all.
    idf_power : exponent on the idf (0: plain tf, 1: TF-IDF; between: damped rare terms).
    stop_words : "english" (scikit-learn's list), None, or a list of words.
    sublinear_tf, bigrams, urls, hashtags, mentions : see module.
    max_token_chars : longer tokens (words, hashtag/mention bodies, URL domains) are dropped;
        ``None`` keeps them all (see module: they would pad every entry of ``terms_``). Terms
        of a vocabulary restored under a lower cap (:meth:`set_state`) that it would drop are
        evicted by the next :meth:`partial_fit`, as those beyond a lowered ``max_features``.
    dtype : float type of the matrices.
    past_idf : in :meth:`partial_fit_transform`, weight the window with the idf of the documents
        seen BEFORE it (terms new in the window get the idf of an unseen term, the largest), so a
        word's weight says how surprising it is given the past; ``False``: the idf after the
        window's update (as :meth:`transform` after :meth:`partial_fit`).
    unsegmented : ``"bigrams"``: text of the scripts written without spaces between words
        (Chinese, Japanese, Korean, Thai, Lao, Khmer, Myanmar) becomes overlapping bigrams of
        grapheme units (see module); ``"words"``: a run of word characters is one token (a
        Japanese clause is one term, as before). Text without those scripts has the same tokens
        either way. Not part of :meth:`get_state`: a vocabulary restored under the other mode
        keeps its terms, which the tokenizer no longer yields; they age out as any term no
        longer seen does (at ``max_features``, the rarest and stalest are evicted first).

    Attributes
    ----------
    vocabulary_ : dict term -> row; terms_ : ndarray of str (row order); df_ : decayed document
    frequency per row; last_seen_ : document counter when each term was last seen; n_docs_ : total
    documents seen; n_eff_ : decayed document count; kept_rows_, n_new_ : the row map of the last
    :meth:`partial_fit` (apply it to model state with :func:`remap_rows`); evicted_rows_ : the
    rows (of the previous vocabulary) that it removed; candidates_ : dict term -> slot of the
    admission candidates (see module), whose candidate_terms_, candidate_df_ (decayed document
    frequency gathered), candidate_err_ (its over-count bound) and candidate_last_ (last seen;
    ``-1``: a free slot) are per slot.

    Input is a sequence of raw texts; unlike scikit-learn's vectorisers :meth:`transform` returns
    documents as COLUMNS (the paper's ``m x n`` layout: ``.T`` gives documents as rows).
    :meth:`fit` starts over, :meth:`partial_fit` goes on from what was learned.

    Examples
    --------
    >>> from sparsewatch.models.text_features import StreamingTfidf
    >>> tfidf = StreamingTfidf().fit(["Quake hits the coast", "Coast guard rescues fishermen"])
    >>> tfidf.terms_.tolist()  # stop words removed, rows in order of first appearance
    ['quake', 'hits', 'coast', 'guard', 'rescues', 'fishermen']
    >>> P, oov = tfidf.transform(["quake on the coast", "a new story"], return_oov=True)
    >>> P.shape  # terms x documents
    (6, 2)
    >>> P[:, 0].toarray().ravel().round(3)  # unit l1; "quake" is rarer than "coast"
    array([0.584, 0.   , 0.416, 0.   , 0.   , 0.   ])
    >>> oov  # the second document's mass lies on terms out of the vocabulary
    array([0., 1.])
    >>> tfidf.partial_fit(["a new story"]).n_features_  # "new" and "story" appended
    8
    """

    def __init__(
        self,
        max_features: int | None = 20000,
        df_half_life: float | None = 20000.0,
        min_df_new: int = 1,
        max_terms_per_doc: int | None = None,
        sublinear_tf: bool = True,
        idf_power: float = 1.0,
        bigrams: bool = False,
        stop_words: str | Sequence[str] | None = "english",
        urls: str = "domain",
        hashtags: str = "word",
        mentions: str = "keep",
        max_token_chars: int | None = 40,
        dtype: type = np.float64,
        past_idf: bool = False,
        unsegmented: str = "bigrams",
    ) -> None:
        self.max_features = max_features
        self.df_half_life = df_half_life
        self.min_df_new = min_df_new
        self.max_terms_per_doc = max_terms_per_doc
        self.sublinear_tf = sublinear_tf
        self.idf_power = idf_power
        self.bigrams = bigrams
        self.stop_words = stop_words
        self.urls = urls
        self.hashtags = hashtags
        self.mentions = mentions
        self.max_token_chars = max_token_chars
        self.dtype = dtype
        self.past_idf = past_idf
        self.unsegmented = unsegmented

    def __sklearn_tags__(self) -> Tags:
        """Input is a sequence of raw texts, as for scikit-learn's text vectorisers (so the
        numeric checks of ``check_estimator`` do not apply)."""
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        return tags

    # ------------------------------------------------------------------ tokens
    def _stop_words(self) -> frozenset[str] | None:
        """``"english"`` (scikit-learn's list), ``None``, or the given words (read as the text
        is, :func:`tokenize_flat`); a list of words was silently ignored before, removing none."""
        if self.stop_words is None:
            return None
        if isinstance(self.stop_words, str):
            if self.stop_words != "english":
                raise ValueError(
                    f"stop_words must be 'english', None or a list of words, got "
                    f"{self.stop_words!r}"
                )
            return ENGLISH_STOP_WORDS
        words = list(self.stop_words)
        if not all(isinstance(w, str) for w in words):
            raise ValueError("stop_words must be 'english', None or a list of words")
        return frozenset(words)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """Tokens of every text, with this estimator's tokenizer settings.

        ``ValueError`` for a single string (a sequence of texts is expected: its characters were
        taken for documents) and ``TypeError`` for a document that is not a string."""
        return tokenize(checked_texts(texts), **self._tokenizer_options())

    def _tokenizer_options(self) -> dict[str, Any]:
        return {
            "stop_words": self._stop_words(),
            "bigrams": self.bigrams,
            "urls": self.urls,
            "hashtags": self.hashtags,
            "mentions": self.mentions,
            "max_token_chars": self.max_token_chars,
            "unsegmented": self.unsegmented,
        }

    def _numbered_tokens(self, texts: Sequence[str]) -> _Tokens:
        """The tokens of ``texts``, tokenized a block at a time (:func:`_blocks`) and numbered
        as they come (invalid input raises as :meth:`tokenize` does). A text's tokens do not
        depend on the others', so neither do the blocks' bounds change them."""
        texts = checked_texts(texts)
        options = self._tokenizer_options()
        index: dict[str, int] = {}
        ids, lens = [], []
        for lo, hi in _blocks(texts):
            flat, counts = tokenize_flat(texts[lo:hi], **options)
            new = [t for t in dict.fromkeys(flat) if t not in index]  # in order of appearance
            index.update(zip(new, range(len(index), len(index) + len(new)), strict=True))
            ids.append(np.fromiter(map(index.__getitem__, flat), dtype=np.int64, count=len(flat)))
            lens.append(np.asarray(counts, dtype=np.int64))
        return _Tokens(list(index), np.concatenate(ids), np.concatenate(lens))

    @property
    def n_features_(self) -> int:
        return len(self.terms_)

    def _init_state(self) -> None:
        self.terms_ = np.array([], dtype=str)
        self.vocabulary_: dict[str, int] = {}
        self.df_ = np.zeros(0)
        self.last_seen_ = np.zeros(0, dtype=np.int64)
        self.n_docs_ = 0
        self.n_eff_ = 0.0
        self.kept_rows_ = np.zeros(0, dtype=np.int64)
        self.evicted_rows_ = np.zeros(0, dtype=np.int64)
        self.n_new_ = 0
        self._set_candidates([], np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64))

    def _set_candidates(
        self, terms: list[str], df: np.ndarray, err: np.ndarray, last: np.ndarray
    ) -> None:
        """The candidates, slot by slot (a free slot: ``""``, last seen ``-1``)."""
        self.candidate_terms_ = terms
        self.candidate_df_ = df
        self.candidate_err_ = err
        self.candidate_last_ = last
        self.candidates_ = {
            t: i for i, (t, s) in enumerate(zip(terms, last.tolist(), strict=True)) if s >= 0
        }

    # ------------------------------------------------------------------ learning
    def _check_params(self) -> None:
        """``ValueError`` naming the parameter out of its range (each failed deep inside, with an
        unrelated error, or gave empty documents): ``df_half_life`` neither ``None`` nor > 0 (0
        divided by zero), ``max_features`` or ``max_terms_per_doc`` neither ``None`` nor an
        integer >= 1 (``max_terms_per_doc=0`` kept no term of any document: every column was
        empty; ``None`` keeps them all), ``min_df_new`` not an integer >= 1."""
        if self.df_half_life is not None and not self.df_half_life > 0:
            raise ValueError(f"df_half_life must be > 0 or None, got {self.df_half_life}")
        for name, value, optional in (
            ("max_features", self.max_features, True),
            ("max_terms_per_doc", self.max_terms_per_doc, True),
            ("min_df_new", self.min_df_new, False),
        ):
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                allowed = "an integer >= 1 or None" if optional else "an integer >= 1"
                raise ValueError(f"{name} must be {allowed}, got {value!r}")

    def fit(self, texts: Sequence[str], y: None = None) -> StreamingTfidf:
        """Forget what was learned, then :meth:`partial_fit` ``texts``."""
        tokens = self._numbered_tokens(texts)  # invalid input raises before the state is reset
        self._check_params()
        self._init_state()
        return self._update(tokens)

    def partial_fit(self, texts: Sequence[str], y: None = None) -> StreamingTfidf:
        """Update vocabulary and document frequencies with one window of documents."""
        return self._update(self._numbered_tokens(texts))

    def _rows_of(self, terms: list[str]) -> np.ndarray:
        """Vocabulary row of each term, -1 for a term out of the vocabulary."""
        voc = self.vocabulary_
        return np.fromiter((voc.get(t, -1) for t in terms), dtype=np.int64, count=len(terms))

    def _update(self, tokens: _Tokens) -> StreamingTfidf:
        self._check_params()
        if not hasattr(self, "terms_"):
            self._init_state()
        n = tokens.lens.size
        decay = 1.0 if self.df_half_life is None else 0.5 ** (n / self.df_half_life)
        now = self.n_docs_ + n
        # documents containing each term; terms numbered in order of first appearance, so the
        # new rows are in that order: deterministic
        counts = tokens.document_counts()
        rows = self._rows_of(tokens.terms)
        # min_df_new gates terms not yet candidates; a candidate gathers its df whatever its
        # count in the window (else one seen in fewer documents a window never gained)
        new = np.flatnonzero((rows < 0) & (counts >= self.min_df_new))
        if self.min_df_new > 1 and self.candidates_:
            rare = np.flatnonzero((rows < 0) & (counts < self.min_df_new)).tolist()
            cand = [i for i in rare if tokens.terms[i] in self.candidates_]
            new = np.union1d(new, np.asarray(cand, dtype=np.int64))
        known = np.flatnonzero(rows >= 0)
        m_old = self.terms_.size
        new_terms = [tokens.terms[i] for i in new.tolist()]
        # a new term's document frequency: this window's, plus what it gathered as a candidate
        new_df, new_err = self._take_candidates(new_terms, decay)
        df = np.concatenate([self.df_ * decay, new_df + counts[new]])
        last = np.concatenate([self.last_seen_, np.full(new.size, now, dtype=np.int64)])
        df[rows[known]] += counts[known]
        last[rows[known]] = now
        # the window's terms are within max_token_chars; older ones may not be (a vocabulary
        # restored under a lower cap): the tokenizer never yields them again, so they go
        fits = np.r_[
            _within_token_chars(self.terms_, self.max_token_chars), np.ones(new.size, bool)
        ]
        keep = fits.copy()
        if self.max_features is not None and np.count_nonzero(keep) > self.max_features:
            rank = np.flatnonzero(keep)
            keep[_lowest(rank.size - self.max_features, df[rank], last[rank], -rank, rank)] = False
        evicted = ~keep[:m_old]
        kept_new = np.flatnonzero(keep[m_old:])
        if self.max_features is not None:  # refused and evicted terms are candidates
            out = np.flatnonzero(~keep & fits)
            err = np.r_[np.zeros(m_old), new_err][out]
            terms = self.terms_[out[out < m_old]].tolist()
            terms += [new_terms[i - m_old] for i in out[out >= m_old].tolist()]
            self._add_candidates(terms, df[out], err, last[out])
        added = [new_terms[i] for i in kept_new.tolist()]
        if evicted.any():  # the rows after the first evicted one move up
            gone = self.terms_[evicted]
            terms = np.concatenate([self.terms_[~evicted], np.array(added, dtype=str)])
            # an evicted longest term stops padding the others: the array is made as wide as
            # the longest term kept (indexing and concatenating keep the widest dtype seen)
            if terms.size and np.char.str_len(gone).max() * 4 >= self.terms_.itemsize:
                terms = terms.astype(f"<U{max(int(np.char.str_len(terms).max()), 1)}")
            for t in gone.tolist():
                del self.vocabulary_[t]
            first = int(np.argmax(evicted))
            moved = terms[first:].tolist()
            self.vocabulary_.update(zip(moved, range(first, terms.size), strict=True))
            self.terms_ = terms
        elif added:  # rows stay: the new ones are appended
            self.terms_ = np.concatenate([self.terms_, np.array(added, dtype=str)])
            self.vocabulary_.update(zip(added, range(m_old, m_old + len(added)), strict=True))
        self.df_ = df[keep]
        self.last_seen_ = last[keep]
        self.n_docs_ = now
        self.n_eff_ = self.n_eff_ * decay + n
        self.kept_rows_ = np.flatnonzero(~evicted)
        self.evicted_rows_ = np.flatnonzero(evicted)
        self.n_new_ = int(kept_new.size)
        return self

    def _take_candidates(self, terms: list[str], decay: float) -> tuple[np.ndarray, np.ndarray]:
        """Decay the candidates' counts (as ``df_``) and take ``terms`` out of them: the count
        each gathered (0 for one not a candidate) and its over-count bound (space-saving: a term
        not a candidate may have been one, evicted with at most the smallest count kept, which
        is its bound when the candidates are full; else 0)."""
        self.candidate_df_ = self.candidate_df_ * decay
        self.candidate_err_ = self.candidate_err_ * decay
        used = self.candidate_last_ >= 0
        full = self.max_features is not None and np.count_nonzero(used) >= self._n_candidates()
        floor = float((self.candidate_df_ + self.candidate_err_)[used].min()) if full else 0.0
        slots = np.fromiter(
            (self.candidates_.pop(t, -1) for t in terms), dtype=np.int64, count=len(terms)
        )
        found = slots >= 0
        gathered, err = np.zeros(len(terms)), np.full(len(terms), floor)
        gathered[found] = self.candidate_df_[slots[found]]
        err[found] = self.candidate_err_[slots[found]]
        self.candidate_last_[slots[found]] = -1  # free
        return gathered, err

    def _n_candidates(self) -> int:
        """Capacity of the candidates: :data:`CANDIDATES_PER_FEATURE` times ``max_features``."""
        return CANDIDATES_PER_FEATURE * int(self.max_features or 0)

    def _add_candidates(
        self, terms: list[str], df: np.ndarray, err: np.ndarray, last: np.ndarray
    ) -> None:
        """Make ``terms`` candidates with these counts; beyond the capacity, those of smallest
        count (plus over-count bound), then stalest, then latest slot (an incoming term after
        every slot) are dropped, as in space-saving."""
        used = np.flatnonzero(self.candidate_last_ >= 0)
        over = used.size + len(terms) - self._n_candidates()
        if over > 0:
            est = np.r_[(self.candidate_df_ + self.candidate_err_)[used], df + err]
            stamp = np.r_[self.candidate_last_[used], last]
            pos = np.arange(est.size)
            drop = _lowest(over, est, stamp, -pos, pos)
            gone = used[drop[drop < used.size]]
            for slot in gone.tolist():
                del self.candidates_[self.candidate_terms_[slot]]
            self.candidate_last_[gone] = -1
            stay = np.ones(len(terms), dtype=bool)
            stay[drop[drop >= used.size] - used.size] = False
            terms = [t for t, s in zip(terms, stay.tolist(), strict=True) if s]
            df, err, last = df[stay], err[stay], last[stay]
        free = np.flatnonzero(self.candidate_last_ < 0)[: len(terms)]
        grow = len(terms) - free.size
        if grow > 0:
            self.candidate_terms_ += [""] * grow
            self.candidate_df_ = np.r_[self.candidate_df_, np.zeros(grow)]
            self.candidate_err_ = np.r_[self.candidate_err_, np.zeros(grow)]
            self.candidate_last_ = np.r_[self.candidate_last_, np.full(grow, -1, dtype=np.int64)]
            free = np.r_[
                free, np.arange(len(self.candidate_terms_) - grow, len(self.candidate_terms_))
            ]
        for slot, term in zip(free.tolist(), terms, strict=True):
            self.candidate_terms_[slot] = term
            self.candidates_[term] = slot
        self.candidate_df_[free] = df
        self.candidate_err_[free] = err
        self.candidate_last_[free] = last

    # ------------------------------------------------------------------ features
    def idf(self) -> np.ndarray:
        """Smoothed inverse document frequency per vocabulary row, to the power ``idf_power``."""
        return (np.log((1.0 + self.n_eff_) / (1.0 + self.df_)) + 1.0) ** self.idf_power

    @overload
    def transform(
        self, texts: Sequence[str], return_oov: Literal[False] = False
    ) -> sp.csc_matrix: ...

    @overload
    def transform(
        self, texts: Sequence[str], return_oov: Literal[True]
    ) -> tuple[sp.csc_matrix, np.ndarray]: ...

    @overload
    def transform(
        self, texts: Sequence[str], return_oov: bool = False
    ) -> sp.csc_matrix | tuple[sp.csc_matrix, np.ndarray]: ...

    def transform(
        self, texts: Sequence[str], return_oov: bool = False
    ) -> sp.csc_matrix | tuple[sp.csc_matrix, np.ndarray]:
        """Term-by-document matrix (``m x n`` CSC, unit l1 columns) of ``texts``; no learning.

        With ``return_oov`` also the l1 mass per document of out-of-vocabulary terms (weighted with
        the idf of an unseen term); columns then sum to ``1 - oov_mass``. ``NotFittedError``
        before any :meth:`fit`, :meth:`partial_fit` or :meth:`set_state`.
        """
        check_is_fitted(self, "terms_")
        self._check_params()
        return self._transform(self._numbered_tokens(texts), return_oov)

    @overload
    def partial_fit_transform(
        self, texts: Sequence[str], return_oov: Literal[False] = False
    ) -> sp.csc_matrix: ...

    @overload
    def partial_fit_transform(
        self, texts: Sequence[str], return_oov: Literal[True]
    ) -> tuple[sp.csc_matrix, np.ndarray]: ...

    @overload
    def partial_fit_transform(
        self, texts: Sequence[str], return_oov: bool = False
    ) -> sp.csc_matrix | tuple[sp.csc_matrix, np.ndarray]: ...

    def partial_fit_transform(
        self, texts: Sequence[str], return_oov: bool = False
    ) -> sp.csc_matrix | tuple[sp.csc_matrix, np.ndarray]:
        """``partial_fit`` then ``transform`` on one window, tokenizing once."""
        tokens = self._numbered_tokens(texts)
        fitted = hasattr(self, "terms_")
        idf_before = self.idf() if fitted else np.zeros(0)
        n_before = self.n_eff_ if fitted else 0.0
        self._update(tokens)
        idf = unseen = None
        if self.past_idf:  # kept rows keep their past idf; new rows get an unseen term's, as do
            # the window's terms left out of the vocabulary (``min_df_new``, the cap): both are
            # unseen given the past
            unseen = self._unseen_idf(n_before)
            idf = np.r_[idf_before[self.kept_rows_], np.full(self.n_new_, unseen)]
        return self._transform(tokens, return_oov, idf, unseen)

    def _unseen_idf(self, n_eff: float) -> float:
        return (np.log(1.0 + n_eff) + 1.0) ** self.idf_power

    def _transform(
        self,
        tokens: _Tokens,
        return_oov: bool,
        idf: np.ndarray | None = None,
        unseen_idf: float | None = None,
    ) -> sp.csc_matrix | tuple[sp.csc_matrix, np.ndarray]:
        """Weighted, truncated, l1-normalised columns; ``idf`` per vocabulary row and
        ``unseen_idf`` for out-of-vocabulary terms (default: the current ones)."""
        n, m = tokens.lens.size, self.terms_.size
        # counts per (row, doc); OOV terms get distinct virtual rows (in the order of their
        # strings) so their tf is right
        row_of = self._rows_of(tokens.terms)
        oov = np.flatnonzero(row_of < 0).tolist()
        row_of[sorted(oov, key=tokens.terms.__getitem__)] = m + np.arange(len(oov))
        rows = row_of[tokens.ids]
        cols = np.repeat(np.arange(n), tokens.lens)
        n_rows = int(rows.max()) + 1 if rows.size else m
        C = sp.csc_matrix((np.ones(rows.size), (rows, cols)), shape=(max(n_rows, m), n))
        C.sum_duplicates()
        tf = np.log(C.data) + 1.0 if self.sublinear_tf else C.data
        idf_new = self._unseen_idf(self.n_eff_) if unseen_idf is None else unseen_idf
        idf_known = self.idf() if idf is None else idf
        idf_ext = np.concatenate([idf_known, np.full(C.shape[0] - m, idf_new)])
        C.data = (tf * idf_ext[C.indices]).astype(self.dtype)
        if self.max_terms_per_doc is not None:
            C = _top_per_column(C, self.max_terms_per_doc)
        if not return_oov:
            C = C[:m] if C.shape[0] > m else C
        tot = np.asarray(C.sum(axis=0)).ravel()
        C.data /= np.repeat(np.where(tot > 0, tot, 1.0), np.diff(C.indptr)).astype(self.dtype)
        if not return_oov:
            return sp.csc_matrix(C)
        oov_mass = np.asarray(C[m:].sum(axis=0)).ravel()
        return sp.csc_matrix(C[:m]), oov_mass

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, np.ndarray]:
        """Learned state as plain numpy arrays (vocabulary as a unicode array); unfitted, the
        empty state (a :class:`~sparsewatch.models.window_detector.Detector` checkpoints it in
        its warm-up), leaving this instance unfitted."""
        if not hasattr(self, "terms_"):
            empty = StreamingTfidf()
            empty._init_state()
            return empty.get_state()
        return {
            "terms": self.terms_.astype(str),
            "df": self.df_.astype(np.float64),
            "last_seen": self.last_seen_.astype(np.int64),
            "n_docs": np.asarray(self.n_docs_, dtype=np.int64),
            "n_eff": np.asarray(self.n_eff_, dtype=np.float64),
            "candidate_terms": np.array(
                [
                    t if s >= 0 else ""
                    for t, s in zip(self.candidate_terms_, self.candidate_last_, strict=True)
                ],
                dtype=str,
            ),
            "candidate_df": self.candidate_df_.astype(np.float64),
            "candidate_err": self.candidate_err_.astype(np.float64),
            "candidate_last": self.candidate_last_.astype(np.int64),
        }

    def set_state(self, state: dict[str, np.ndarray]) -> StreamingTfidf:
        """Restore what :meth:`get_state` returned (a state without candidates, saved before
        they were kept, restores with none)."""
        self._init_state()
        self.terms_ = np.asarray(state["terms"]).astype(str)
        self.vocabulary_ = {t: i for i, t in enumerate(self.terms_.tolist())}
        self.df_ = np.asarray(state["df"], dtype=np.float64).copy()
        self.last_seen_ = np.asarray(state["last_seen"], dtype=np.int64).copy()
        self.n_docs_ = int(state["n_docs"])
        self.n_eff_ = float(state["n_eff"])
        self.kept_rows_ = np.arange(self.terms_.size)
        if "candidate_terms" in state:
            self._set_candidates(
                np.asarray(state["candidate_terms"]).astype(str).tolist(),
                np.asarray(state["candidate_df"], dtype=np.float64).copy(),
                np.asarray(state["candidate_err"], dtype=np.float64).copy(),
                np.asarray(state["candidate_last"], dtype=np.int64).copy(),
            )
        return self


def _lowest(
    k: int, key: np.ndarray, then: np.ndarray, last: np.ndarray, items: np.ndarray
) -> np.ndarray:
    """The ``k`` (>= 1) ``items`` lowest by ``key``, then ``then``, then ``last`` (distinct):
    sorted are only those whose key is at most the ``k``-th smallest (a partition), not all."""
    low = np.flatnonzero(key <= np.partition(key, k - 1)[k - 1])
    return items[low[np.lexsort((last[low], then[low], key[low]))[:k]]]


def _top_per_column(C: sp.csc_matrix, t: int) -> sp.csc_matrix:
    """Keep the ``t`` largest entries of every column (ties broken by row order)."""
    counts = np.diff(C.indptr)
    if counts.max(initial=0) <= t:
        return C
    col = np.repeat(np.arange(C.shape[1]), counts)
    order = np.lexsort((-C.data, col))  # by column, then by decreasing weight
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - np.repeat(C.indptr[:-1], counts)
    keep = rank < t
    out = sp.csc_matrix(
        (C.data[keep], C.indices[keep], np.r_[0, np.cumsum(np.minimum(counts, t))]), shape=C.shape
    )
    out.sort_indices()
    return out
