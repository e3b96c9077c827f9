"""Emerging topics of the dynamic NMF are seeded one per story (``seed_similarity``).

The ``K_em`` worst-fitted new documents were the seeds, and they are usually all of one burst:
one new story became three emerging topics (and three alerts), two stories born together got
topics mixing both."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.dynamic_nmf import DynamicNMF

from sparsewatch.config import DetectorConfig

N_TERMS = 60
OLD_TERMS = 44  # the old stories' keywords are drawn from terms 0 .. 43


def _stream(seed: int, bursts: list[np.ndarray], n_steps: int = 6) -> list[sp.csr_matrix]:
    """``n_steps`` time points of 80 documents on four old stories; at the last one, the first
    documents are on the new stories of ``bursts`` (keyword sets), the same number each."""
    rng = np.random.default_rng(seed)
    old = [rng.choice(OLD_TERMS, 8, replace=False) for _ in range(4)]
    per_burst = 30 // max(len(bursts), 1) if len(bursts) > 1 else 20
    steps = []
    for t in range(n_steps):
        rows = []
        for i in range(80):
            story = i // per_burst
            last = t == n_steps - 1
            terms = bursts[story] if last and story < len(bursts) else old[i % 4]
            x = np.zeros(N_TERMS)
            x[rng.choice(terms, 6, replace=False)] = rng.random(6) + 0.5  # 6 of 8 keywords
            x[rng.integers(0, N_TERMS, 2)] += 0.2  # noise
            rows.append(x / x.sum())
        steps.append(sp.csr_matrix(np.array(rows)))
    return steps


def _worker_model() -> DynamicNMF:
    """The dynamic NMF as the worker builds it (three emerging topics a window)."""
    config = DetectorConfig()
    return DynamicNMF(
        10, n_emerging=config.emerging_per_window, max_topics=config.max_topics, random_state=0
    )


def _fit(model: DynamicNMF, steps: list[sp.csr_matrix]) -> DynamicNMF:
    vocabulary = [str(j) for j in range(N_TERMS)]
    for X in steps:
        model.partial_fit(X, vocabulary=vocabulary)
    return model


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_one_new_story_is_one_emerging_topic_and_one_alert(seed: int) -> None:
    story = np.arange(50, 58)
    model = _fit(_worker_model(), _stream(seed, [story]))
    # the worker alerts an emerging topic that dominates emerging_min_documents documents
    alerted = [e for e in model.events_ if e.n_documents >= DetectorConfig().emerging_min_documents]
    words = {str(j) for j in story}
    on_story = [e for e in alerted if words & set(e.top_terms[:4])]
    assert len(on_story) == 1  # was 3 (e.g. 9, 6 and 5 of the story's 20 documents)
    event = on_story[0]
    assert np.sum(model.labels_[:20] == event.topic_id) >= 19
    assert event.n_documents <= 21
    assert set(event.top_terms[:4]) <= words
    # a spare slot may take an old story's documents (not this one's): it is another alert
    for other in model.events_:
        if other is not event:
            assert np.sum(model.labels_[:20] == other.topic_id) <= 1


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_two_new_stories_are_two_clean_emerging_topics(seed: int) -> None:
    stories = [np.arange(44, 52), np.arange(52, 60)]
    model = _fit(_worker_model(), _stream(seed, stories))
    for k, story in enumerate(stories):
        docs = model.labels_[15 * k : 15 * (k + 1)]
        topic, count = np.unique(docs, return_counts=True)
        assert count.max() >= 14  # (nearly) all its documents in one topic
        event = next(e for e in model.events_ if e.topic_id == topic[count.argmax()])
        assert set(event.top_terms[:4]) <= {str(j) for j in story}  # not mixed with the other
        assert np.sum(model.labels_ == event.topic_id) <= 16


def test_seeds_are_pairwise_unlike() -> None:
    """Directly on the seeding: the seeds' positive residuals are below ``seed_similarity``
    pairwise, and each is the worst-fitted document unlike the seeds before it."""
    model = _fit(_worker_model(), _stream(0, [np.arange(50, 58)], n_steps=5))
    X_new = _stream(0, [np.arange(50, 58)])[-1]
    H = model.components_
    seeds = model._emerging_init(X_new, model.transform(X_new), H)
    assert seeds.shape == (3, N_TERMS)
    np.testing.assert_allclose(seeds.sum(axis=1), 1.0)
    unit = seeds / np.linalg.norm(seeds, axis=1, keepdims=True)
    cosine = unit @ unit.T
    assert cosine[np.triu_indices(3, 1)].max() < model.seed_similarity
    assert seeds[0, 50:58].sum() > 0.8  # the first seed is the new story's


@pytest.mark.parametrize("value", [0, -0.1, 1.5, float("nan"), "0.3"])
def test_seed_similarity_is_checked(value: object) -> None:
    model = DynamicNMF(2, seed_similarity=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed_similarity"):
        model.partial_fit(np.ones((4, 3)))
