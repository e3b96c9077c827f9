"""Streaming text features: tokenizer, bounded growing vocabulary, streaming TF-IDF.

The documents of Kasiviswanathan et al. (NIPS 2012, Sec. 5) are TF-IDF vectors ``p in R^m`` with
``||p||_1 = 1`` whose dimension ``m`` grows as new terms arrive (new rows are appended; the paper's
footnote zero-pads the dictionary and the dual variable). Here the vocabulary is also bounded, so
memory stays flat on an unbounded stream: when the cap is exceeded the terms with the smallest
*decayed* document frequency (rare and stale) are evicted, and :class:`StreamingTfidf` reports the
rows it kept (``kept_rows_``) and how many it appended (``n_new_``) so that model state can drop
and pad the same rows (:func:`remap_rows`).

Tokenizer (deliberate choices for tweets and news):

* lower case, Unicode-aware words (``\\w`` letters of any script and the combining marks and
  zero-width (non-)joiners inside them, so Devanagari, vowelled Arabic or Persian words stay
  whole; a word starts at a ``\\w`` character and ends at no joiner, so the variation selector of
  ``⚠️BREAKING`` or a joiner glued to an emoji is no part of a word or tag; text is
  NFC-normalised, so a word typed precomposed or decomposed is one token, the dot of a
  lower-cased Turkish ``İ`` is dropped, and so are soft hyphens and variation selectors; tokens
  must contain a letter and have at least two characters; pure numbers are dropped, they are
  mostly noise in news wires);
* URLs become one token ``url:<domain>`` (``urls="domain"``; the host only: no user, port, query
  or the sentence's punctuation after it), or ``"drop"``;
* ``#hashtags`` become the bare word (``hashtags="word"``, so ``#quake`` and ``quake`` match, and a
  body that would not be a word token, a stop word or one character, is dropped), or are kept as
  ``#tag`` (``"keep"``), or both (``"both"``), or dropped;
* ``@mentions`` are kept as ``@user`` (distinct from the word) or dropped (``mentions="drop"``);
  a ``#`` or ``@`` inside a word (an e-mail address) starts no tag or mention;
* scripts written without spaces between words (Chinese, Japanese, Korean, Thai, Lao, Khmer,
  Myanmar) become overlapping bigrams (``unsegmented="bigrams"``, the default; below);
* English stop words (scikit-learn's list) are removed; optional bigrams of adjacent kept tokens;
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
  ordinary characters (NFKC of those only, as Lucene's CJK width filter): ``ＮＨＫ`` is ``nhk``,
  ``＃地震`` a hashtag, half-width ``ｶﾀｶﾅ`` is ``カタカナ``;
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

Text without letters of those scripts and without width forms gets the same tokens in both modes:
a block of :data:`TOKEN_BLOCK` texts is scanned for runs only when it holds such a character, so
Latin text pays one scan of its non-ASCII blocks (about 2 ns a character).

Weighting: ``(1 + log tf) * idf`` (``sublinear_tf``), ``idf = log((1 + N) / (1 + df)) + 1`` with
exponentially decayed ``N`` and ``df`` (half-life ``df_half_life`` documents), optional salient-term
truncation (keep the ``max_terms_per_doc`` largest weights of each document), then l1 normalisation.
Terms not in the vocabulary (when scoring without learning) keep their weight in the normaliser and
are returned as ``oov_mass``: no atom covers them, so they add exactly that mass to the l1 error.

Memory: a window is tokenized :data:`TOKEN_BLOCK` texts at a time and its tokens are kept as
numbers (an index of the window's distinct terms), so learning and weighting a window of tweets
peaks at about 0.8 kB a tweet instead of 2.1 kB with a list of token strings per tweet; the
features are the same.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
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
_URL = r"(?:https?://|www\.)[^\s<>\"'\x00]+"
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
# Whether a text may hold such a letter or a half-width or full-width form: whole blocks of the
# Basic Multilingual Plane, so the class is a bitmap (a text without them is tokenized by
# _TOKEN, and the check costs about 2 ns a character)
_MAY_BE_UNSEGMENTED = re.compile(
    "["
    + "".join(f"{chr(lo)}-{chr(hi)}" for b in _UNSEGMENTED_BLOCKS.values() for lo, hi in b)
    + "\uff00-\uffef]"
)
_HALF_OR_FULL_WIDTH = re.compile("[\uff00-\uffef]+")


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


def _normalized(text: str) -> str:
    """``text`` as the tokenizer reads it: lower case, ``’`` as ``'``, without soft hyphens
    (invisible line-break hints inside words: ``news\u00adpaper`` is ``newspaper``) and
    variation selectors (they choose a glyph: ``辻󠄀本``, written with a Japanese ideographic
    variant, is ``辻本``), then NFC (after lower-casing, which decomposes ``İ`` into ``i`` + a
    combining dot, dropped: the dot of a lower-case ``i``; after the removals, so that a mark
    behind a soft hyphen composes with its letter)."""
    text = text.lower().replace("i\u0307", "i").replace("’", "'").replace("\u00ad", "")
    if not text.isascii():
        text = _VARIATION_SELECTORS.sub("", text)
    return unicodedata.normalize("NFC", text)


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
    words = _width_folded(_normalized(words)) if segment else _normalized(words)
    stop = frozenset(words.split(_SEP)) if words else frozenset()
    cap = np.inf if max_token_chars is None else max_token_chars
    joined = _normalized(_SEP.join(t.replace(_SEP, " ") for t in texts))
    grams: set[str] | None = set() if bigrams else None
    # a block without a letter of those scripts (or a width form) is read as before, its
    # tokens unchanged; the check costs one scan of a non-ASCII block
    if segment and not joined.isascii() and _MAY_BE_UNSEGMENTED.search(joined):
        flat, ends = _scan_unsegmented(
            _width_folded(joined), _Options(urls, hashtags, mentions, cap, stop), grams
        )
    else:
        flat, ends = _scan(joined, _Options(urls, hashtags, mentions, cap, stop))
    ends.append(len(flat))
    lens = [b - a for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    if bigrams:
        docs = [flat[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        if grams:  # no bigram of character bigrams (module docstring)
            docs = [
                d
                + [
                    f"{a} {b}"
                    for a, b in itertools.pairwise(d)
                    if a not in grams and b not in grams
                ]
                for d in docs
            ]
        else:
            docs = [d + [f"{a} {b}" for a, b in itertools.pairwise(d)] for d in docs]
        flat, lens = list(itertools.chain.from_iterable(docs)), [len(d) for d in docs]
    return flat, lens


@dataclass(frozen=True)
class _Options:
    """The tokenizer options a scan of the text reads (``cap``: ``max_token_chars``, ``inf``
    for none; ``stop``: the stop words read as the text is)."""

    urls: str
    hashtags: str
    mentions: str
    cap: float
    stop: frozenset[str]

    @cached_property
    def stop_grams(self) -> frozenset[str]:
        """The stop words a run of the unsegmented scripts can yield (none of English's)."""
        return frozenset(w for w in self.stop if _HAS_UNSEGMENTED.search(w))


def _scan(joined: str, opts: _Options) -> tuple[list[str], list[int]]:
    """All tokens of ``joined`` (documents separated by ``_SEP``) and the token count before
    each separator: a run of word characters is one word, whatever its script."""
    flat: list[str] = []
    ends: list[int] = []
    cap, stop = opts.cap, opts.stop
    for url, tag, word, sep in _TOKEN.findall(joined):
        if word:
            if len(word) <= cap and word not in stop:
                flat.append(word)
        elif sep:
            ends.append(len(flat))
        else:
            flat.extend(_special(url, tag, opts.urls, opts.hashtags, opts.mentions, cap, stop))
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
    for url, tag, word, unit, sep in _TOKEN_UNSEGMENTED.findall(joined):
        if word:
            if word.isascii() or not _HAS_UNSEGMENTED.search(word):
                if len(word) <= cap and word not in stop:
                    flat.append(word)
            else:
                flat.extend(_split_word(word, opts, grams))
        elif unit:
            flat.extend(_split_word(unit, opts, grams))
        elif sep:
            ends.append(len(flat))
        elif tag[:1] == "#" and opts.hashtags in ("word", "both") and _HAS_UNSEGMENTED.search(tag):
            whole = [tag] if opts.hashtags == "both" and len(tag) - 1 <= cap else []
            flat.extend(whole + _split_word(tag[1:], opts, grams))
        elif tag[:1] == "@" and _HAS_UNSEGMENTED.search(tag):
            # the handle is the body's first run of one script (``@yamada地震``: ``@yamada``),
            # the rest is text
            end = cast("re.Match[str]", _SEGMENTS.match(tag, 1)).end()
            flat.extend(_special("", tag[:end], opts.urls, opts.hashtags, opts.mentions, cap, stop))
            flat.extend(_split_word(tag[end:], opts, grams))
        else:
            flat.extend(_special(url, tag, opts.urls, opts.hashtags, opts.mentions, cap, stop))
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


def _width_folded(text: str) -> str:
    """``text`` with its half-width and full-width forms (U+FF00-U+FFEF) as their ordinary
    characters (their NFKC: ``ＮＨＫ`` is ``nhk``, ``＃地震`` a hashtag, half-width ``ｶﾞ`` is
    ``ガ``), then NFC again (a half-width voiced mark may follow a full-width kana)."""
    folded, n = _HALF_OR_FULL_WIDTH.subn(lambda m: unicodedata.normalize("NFKC", m[0]), text)
    return unicodedata.normalize("NFC", folded) if n else text


# Texts tokenized at a time: a block's tokens live as strings only until they are numbered
# (:class:`_Tokens`), so a window's tokens take 8 bytes each, not a string object each.
TOKEN_BLOCK = 4096


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
    max_features : vocabulary cap; beyond it the rarest, stalest terms are evicted. ``None``: no
        cap, as in scikit-learn's vectorisers (the vocabulary then grows with the stream).
    df_half_life : half-life (> 0), in documents, of the document frequencies (``None``: no
        decay).
    min_df_new : a new term enters the vocabulary only when it appears in at least this many
        documents of the window that introduces it (1 = every term).
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
    rows (of the previous vocabulary) that it removed.

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
        """The tokens of ``texts``, tokenized :data:`TOKEN_BLOCK` texts at a time and numbered
        as they come (invalid input raises as :meth:`tokenize` does)."""
        texts = checked_texts(texts)
        options = self._tokenizer_options()
        index: dict[str, int] = {}
        ids, lens = [], []
        for lo in range(0, max(len(texts), 1), TOKEN_BLOCK):  # once for no texts: option checks
            flat, counts = tokenize_flat(texts[lo : lo + TOKEN_BLOCK], **options)
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

    # ------------------------------------------------------------------ learning
    def _check_params(self) -> None:
        """``ValueError`` for a ``df_half_life`` neither ``None`` nor > 0 (0 divided by zero)."""
        if self.df_half_life is not None and not self.df_half_life > 0:
            raise ValueError(f"df_half_life must be > 0 or None, got {self.df_half_life}")

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
        # documents containing each term; terms numbered in order of first appearance, so the
        # new rows are in that order: deterministic
        counts = tokens.document_counts()
        rows = self._rows_of(tokens.terms)
        new = np.flatnonzero((rows < 0) & (counts >= self.min_df_new))
        known = np.flatnonzero(rows >= 0)
        m_old = self.terms_.size
        df = np.concatenate([self.df_ * decay, np.zeros(new.size)])
        last = np.concatenate([self.last_seen_, np.zeros(new.size, dtype=np.int64)])
        df[rows[known]] += counts[known]
        last[rows[known]] = self.n_docs_ + n
        df[m_old:] = counts[new]
        last[m_old:] = self.n_docs_ + n
        new_terms = [tokens.terms[i] for i in new.tolist()]
        # the window's terms are within max_token_chars; older ones may not be (a vocabulary
        # restored under a lower cap): the tokenizer never yields them again, so they go
        keep = np.flatnonzero(
            np.r_[_within_token_chars(self.terms_, self.max_token_chars), np.ones(new.size, bool)]
        )
        if self.max_features is not None and keep.size > self.max_features:
            order = keep[np.lexsort((last[keep], df[keep]))]  # ascending: rarest, then stalest
            keep = np.sort(order[keep.size - self.max_features :])
        kept_old = keep[keep < m_old]
        kept_new = keep[keep >= m_old] - m_old
        terms = self.terms_[kept_old].tolist() + [new_terms[i] for i in kept_new.tolist()]
        # a new array each time: its width is that of the longest term kept, so an evicted long
        # term stops padding the others (indexing and concatenating keep the widest dtype seen)
        self.terms_ = np.array(terms, dtype=str)
        self.vocabulary_ = {t: i for i, t in enumerate(terms)}
        self.df_ = df[keep]
        self.last_seen_ = last[keep]
        self.n_docs_ += n
        self.n_eff_ = self.n_eff_ * decay + n
        self.kept_rows_ = kept_old
        self.evicted_rows_ = np.setdiff1d(np.arange(m_old), kept_old)
        self.n_new_ = int(kept_new.size)
        return self

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
        }

    def set_state(self, state: dict[str, np.ndarray]) -> StreamingTfidf:
        """Restore what :meth:`get_state` returned."""
        self._init_state()
        self.terms_ = np.asarray(state["terms"]).astype(str)
        self.vocabulary_ = {t: i for i, t in enumerate(self.terms_.tolist())}
        self.df_ = np.asarray(state["df"], dtype=np.float64).copy()
        self.last_seen_ = np.asarray(state["last_seen"], dtype=np.int64).copy()
        self.n_docs_ = int(state["n_docs"])
        self.n_eff_ = float(state["n_eff"])
        self.kept_rows_ = np.arange(self.terms_.size)
        return self


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
