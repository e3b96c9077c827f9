"""Seeded synthetic document streams with topics that emerge over time.

A labelled stream for the offline evaluation (``sparsewatch.replay.evaluate``) and for the pipeline
demo. The generative model:

* a background vocabulary with Zipf frequencies (the words every document uses);
* ``n_categories`` categories, each with its own words (a new topic in an existing category shares
  these words with older topics, which makes novelty detection non-trivial);
* ``n_topics`` topics, each with its own keywords (Zipf weights) and a category.
  ``n_initial_topics`` exist from the start; the others are born at random times spread over the
  stream. A topic is popular right after its birth (a burst that decays), then keeps a steady level;
* a document picks one topic by popularity (sometimes a second one, so it carries two labels) and
  draws a tweet-length (about 6-18 words, sometimes a ``#hashtag``, ``@mention`` or URL) or a
  news-length (about 80-250 words) bag of words mixing topic, category and background words.

Words are pronounceable pseudo-words, so every tokenizer sees ordinary lowercase alphabetic terms.
Everything is drawn from one ``numpy.random.Generator`` seeded with ``seed``: the same arguments
give the same stream, byte for byte.

>>> docs = generate_stream(n_docs=50, seed=1)
>>> sorted(docs[0])
['id', 'labels', 'stream', 'text', 'timestamp']
>>> docs == generate_stream(n_docs=50, seed=1)
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import numpy as np

Kind = Literal["tweet", "news", "mixed"]

_CONSONANTS = list("bcdfghjklmnprstvz")
_VOWELS = list("aeiou")
_LENGTHS = {"tweet": (6, 18), "news": (80, 250)}


def _pseudo_words(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct words of 2-4 consonant-vowel syllables plus a final consonant."""
    words: dict[str, None] = {}
    while len(words) < n:
        n_syl = rng.integers(2, 5, size=n)
        cons = rng.integers(0, len(_CONSONANTS), size=(n, 5))
        vows = rng.integers(0, len(_VOWELS), size=(n, 4))
        for i in range(n):
            syl = "".join(_CONSONANTS[cons[i, j]] + _VOWELS[vows[i, j]] for j in range(n_syl[i]))
            words.setdefault(syl + _CONSONANTS[cons[i, 4]], None)
            if len(words) == n:
                break
    return list(words)


def _zipf(n: int, exponent: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** exponent
    return w / w.sum()


def generate_stream(
    n_docs: int = 8000,
    *,
    kind: Kind = "tweet",
    n_topics: int = 40,
    n_initial_topics: int = 12,
    n_categories: int = 8,
    n_background_words: int = 3000,
    n_category_words: int = 40,
    n_topic_words: int = 25,
    n_shared_keywords: int = 300,
    shared_keyword_frac: float = 0.4,
    topic_share: float = 0.4,
    category_share: float = 0.2,
    second_topic_prob: float = 0.1,
    burst_docs: float = 150.0,
    burst_strength: float = 1.5,
    seconds_per_doc: float = 30.0,
    start: str = "2026-01-01T00:00:00+00:00",
    stream: str | None = None,
    seed: int = 0,
) -> list[dict]:
    """Generate a labelled stream of ``n_docs`` documents in timestamp order.

    Parameters
    ----------
    n_docs : number of documents.
    kind : ``"tweet"``, ``"news"`` or ``"mixed"`` (each document tweet or news with equal odds).
    n_topics, n_initial_topics : topics in total, and topics alive from the first document; the
        others are born at times uniform over the 5%-90% span of the stream.
    n_categories : topics are spread over this many categories sharing category words.
    n_background_words, n_category_words, n_topic_words : vocabulary sizes per source.
    n_shared_keywords, shared_keyword_frac : that fraction of every topic's keywords is drawn from a
        common pool of ``n_shared_keywords`` words (names, places that recur across stories), so a
        new topic is a new combination of partly known words, not only new words.
    topic_share, category_share : expected fractions of a document's words drawn from its topic(s)
        and from its category; the rest is background.
    second_topic_prob : probability that a document mixes in a second alive topic (two labels).
    burst_docs, burst_strength : decay length (in documents) and height, relative to the steady
        level, of a topic's popularity burst after its birth.
    seconds_per_doc : mean inter-arrival time (exponential gaps).
    start : ISO-8601 start of the stream (naive means UTC); the first document comes one
        inter-arrival gap after it.
    stream : the ``stream`` field; default ``"synthetic-<kind>"``.
    seed : seed of the single random generator.

    Returns
    -------
    A list of dicts ``{"id", "text", "timestamp" (ISO-8601, UTC), "stream", "labels"}`` where
    ``labels`` lists topic names such as ``"topic-007"`` (the first one is the main topic).
    """
    if n_initial_topics < 1 or n_initial_topics > n_topics:
        raise ValueError("need 1 <= n_initial_topics <= n_topics")
    if kind not in ("tweet", "news", "mixed"):
        raise ValueError(f"kind must be 'tweet', 'news' or 'mixed', not {kind!r}")
    _check_parameters(
        n_docs=n_docs,
        sizes={
            "n_categories": n_categories,
            "n_background_words": n_background_words,
            "n_category_words": n_category_words,
            "n_topic_words": n_topic_words,
        },
        fractions={
            "shared_keyword_frac": shared_keyword_frac,
            "topic_share": topic_share,
            "category_share": category_share,
            "second_topic_prob": second_topic_prob,
        },
    )
    if topic_share + category_share > 1:
        raise ValueError("topic_share + category_share must be at most 1")
    if round(shared_keyword_frac * n_topic_words) > n_shared_keywords:
        raise ValueError("shared_keyword_frac * n_topic_words exceeds n_shared_keywords")
    if not burst_docs > 0 or not burst_strength >= 0 or not seconds_per_doc >= 0:
        raise ValueError("need burst_docs > 0, burst_strength >= 0 and seconds_per_doc >= 0")
    rng = np.random.default_rng(seed)
    n_shared_per_topic = round(shared_keyword_frac * n_topic_words)
    n_own = n_topic_words - n_shared_per_topic
    # one array, so every slice holds the longest word (an array of a topic's own words was as
    # wide as the longest of them, and cut a longer shared keyword short) and has a string type
    # when empty (a topic without its own words)
    vocab = np.array(
        _pseudo_words(
            rng,
            n_background_words
            + n_categories * n_category_words
            + n_shared_keywords
            + n_topics * n_own,
        )
    )
    background = vocab[:n_background_words]
    off = n_background_words
    cat_words = vocab[off : off + n_categories * n_category_words].reshape(
        n_categories, n_category_words
    )
    off += n_categories * n_category_words
    shared = vocab[off : off + n_shared_keywords]
    off += n_shared_keywords
    own = vocab[off:].reshape(n_topics, n_own)
    borrowed = np.array(
        [rng.choice(shared, size=n_shared_per_topic, replace=False) for _ in range(n_topics)]
    ).reshape(n_topics, n_shared_per_topic)
    # interleave so that own and borrowed keywords share the Zipf head of each topic
    topic_words = np.empty((n_topics, n_topic_words), dtype=own.dtype)
    slots = rng.permutation(n_topic_words)
    topic_words[:, slots[:n_own]] = own
    topic_words[:, slots[n_own:]] = borrowed
    p_background = _zipf(n_background_words, 1.0)
    p_category = _zipf(n_category_words, 0.8)
    p_topic = _zipf(n_topic_words, 0.8)
    topic_category = rng.integers(0, n_categories, size=n_topics)
    birth = np.zeros(n_topics)
    birth[n_initial_topics:] = np.sort(
        rng.uniform(0.05, 0.9, size=n_topics - n_initial_topics) * n_docs
    )
    strength = rng.uniform(0.5, 1.5, size=n_topics)

    t0 = datetime.fromisoformat(start)
    t0 = t0.replace(tzinfo=UTC) if t0.tzinfo is None else t0.astimezone(UTC)
    seconds = np.cumsum(rng.exponential(seconds_per_doc, size=n_docs))
    doc_kinds = (
        np.full(n_docs, kind)
        if kind != "mixed"
        else np.where(rng.random(n_docs) < 0.5, "tweet", "news")
    )
    stream_name = stream or f"synthetic-{kind}"
    docs: list[dict] = []
    for i in range(n_docs):
        age = i - birth
        alive = age >= 0
        pop = np.where(
            alive, strength * (1.0 + burst_strength * np.exp(-np.maximum(age, 0) / burst_docs)), 0
        )
        topics = [int(rng.choice(n_topics, p=pop / pop.sum()))]
        if rng.random() < second_topic_prob and alive.sum() > 1:
            pop2 = pop.copy()
            pop2[topics[0]] = 0
            topics.append(int(rng.choice(n_topics, p=pop2 / pop2.sum())))
        lo, hi = _LENGTHS[str(doc_kinds[i])]
        length = int(rng.integers(lo, hi + 1))
        src = rng.choice(
            3, size=length, p=[topic_share, category_share, 1 - topic_share - category_share]
        )
        which_topic = np.array(topics)[rng.integers(0, len(topics), size=length)]
        words = np.where(
            src == 0,
            topic_words[which_topic, rng.choice(n_topic_words, size=length, p=p_topic)],
            np.where(
                src == 1,
                cat_words[
                    topic_category[which_topic],
                    rng.choice(n_category_words, size=length, p=p_category),
                ],
                background[rng.choice(n_background_words, size=length, p=p_background)],
            ),
        )
        tokens = list(words)
        if doc_kinds[i] == "tweet":
            extra = rng.random(3)
            if extra[0] < 0.3:
                tokens.append("#" + topic_words[topics[0], 0])
            if extra[1] < 0.2:
                tokens.insert(0, "@" + background[rng.integers(0, 200)])
            if extra[2] < 0.2:
                tokens.append(f"https://t.co/{rng.integers(0, 16**8):08x}")
        docs.append(
            {
                "id": f"{stream_name}-{i:07d}",
                "text": " ".join(tokens),
                "timestamp": (t0 + timedelta(seconds=float(seconds[i]))).isoformat(),
                "stream": stream_name,
                "labels": [f"topic-{k:03d}" for k in topics],
            }
        )
    return docs


def _check_parameters(n_docs: int, sizes: dict[str, int], fractions: dict[str, float]) -> None:
    """A ValueError naming the first parameter out of its range: ``n_docs`` >= 0, ``sizes`` >= 1,
    ``fractions`` in [0, 1] (numpy's own errors named none, and a probability above 1 passed)."""
    if n_docs < 0:
        raise ValueError(f"n_docs must be >= 0, not {n_docs}")
    for name, size in sizes.items():
        if size < 1:
            raise ValueError(f"{name} must be >= 1, not {size}")
    for name, value in fractions.items():
        if not 0 <= value <= 1:
            raise ValueError(f"{name} must be in [0, 1], not {value}")


def write_jsonl(docs: Iterable[dict], path: str | Path) -> int:
    """Write documents as JSON Lines (gzip when ``path`` ends in ``.gz``); return the count."""
    import gzip

    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    n = 0
    with opener(path, "wt", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
            n += 1
    return n
