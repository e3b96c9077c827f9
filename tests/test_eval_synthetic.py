"""The synthetic stream generator: determinism, shape of documents, emergence of topics."""

from __future__ import annotations

import gzip
import json
from datetime import datetime

import numpy as np
import pytest
from sparsewatch.replay.evaluate import assign_steps, novelty_labels
from sparsewatch.replay.synthetic import generate_stream, write_jsonl


def test_same_seed_same_stream_other_seed_other_stream() -> None:
    a = generate_stream(300, seed=3)
    assert a == generate_stream(300, seed=3)
    assert a != generate_stream(300, seed=4)


@pytest.mark.parametrize(("kind", "lo", "hi"), [("tweet", 6, 21), ("news", 80, 250)])
def test_document_lengths_and_fields(kind: str, lo: int, hi: int) -> None:
    docs = generate_stream(200, kind=kind, seed=0)
    lengths = np.array([len(d["text"].split()) for d in docs])
    assert lengths.min() >= lo and lengths.max() <= hi
    assert {d["stream"] for d in docs} == {f"synthetic-{kind}"}
    assert len({d["id"] for d in docs}) == len(docs)
    stamps = [datetime.fromisoformat(d["timestamp"]) for d in docs]
    assert all(s.tzinfo is not None for s in stamps)
    assert stamps == sorted(stamps)
    assert all(1 <= len(d["labels"]) <= 2 for d in docs)


def test_topics_emerge_over_time_and_only_initial_topics_at_start() -> None:
    docs = generate_stream(3000, n_topics=20, n_initial_topics=4, seed=1)
    first_seen: dict[str, int] = {}
    for i, d in enumerate(docs):
        for label in d["labels"]:
            first_seen.setdefault(label, i)
    early = {label for label, i in first_seen.items() if i < 0.05 * len(docs)}
    assert len(early) <= 4
    assert len(first_seen) > 10  # most later topics are born and used
    step_of = assign_steps(len(docs), 500, 500)
    novel, evaluable = novelty_labels([d["labels"] for d in docs], step_of)
    assert evaluable[500:].all() and not evaluable[:500].any()
    assert 0 < novel.sum() < 0.5 * evaluable.sum()


def test_a_topic_keywords_separate_it_from_other_topics() -> None:
    docs = generate_stream(2000, n_topics=6, n_initial_topics=6, kind="news", seed=2)
    words = {}
    for d in docs:
        if len(d["labels"]) == 1:
            words.setdefault(d["labels"][0], set()).update(d["text"].split())
    topics = sorted(words)
    assert len(topics) == 6  # every topic has single-topic documents to compare
    vocab_union = set().union(*words.values())
    specific = [words[t] - set().union(*(words[u] for u in topics if u != t)) for t in topics]
    assert all(len(s) >= 5 for s in specific)
    assert len(vocab_union) > 500


def test_write_jsonl_round_trip(tmp_path) -> None:
    docs = generate_stream(20, kind="mixed", seed=5)
    for name, opener in (("s.jsonl", open), ("s.jsonl.gz", gzip.open)):
        assert write_jsonl(docs, tmp_path / name) == 20
        with opener(tmp_path / name, "rt", encoding="utf-8") as fh:
            assert [json.loads(line) for line in fh] == docs
