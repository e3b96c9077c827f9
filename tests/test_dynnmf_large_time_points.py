"""Resource bounds of the topic models on large windows: dynamic NMF keeps at most
``max_step_documents`` documents of a time point in its window (state, checkpoint and solve), and
its weighted sample keeps volumes and labels on the scale of the whole time point."""

from __future__ import annotations

import tracemalloc

import numpy as np
import scipy.sparse as sp
from sparsewatch.models.dynamic_nmf import DynamicNMF
from sparsewatch.storage.serialization import arrays_to_npz

N_TERMS = 3000


def _topics(rng: np.random.Generator, k: int) -> np.ndarray:
    """``k`` topics, each on its own 40 terms."""
    topics = np.zeros((k, N_TERMS))
    for i in range(k):
        topics[i, rng.choice(N_TERMS, 40, replace=False)] = rng.dirichlet(np.ones(40))
    return topics


def _documents(rng: np.random.Generator, topics: np.ndarray, counts: list[int]) -> sp.csr_matrix:
    """``counts[i]`` documents of topic ``i``, 30 tokens each, l1-normalised rows."""
    rows = []
    for topic, n in zip(topics, counts, strict=True):
        tokens = rng.multinomial(30, topic, size=n).astype(float)
        rows.append(sp.csr_matrix(tokens / tokens.sum(axis=1, keepdims=True)))
    X = sp.vstack(rows, format="csr")
    return X[rng.permutation(X.shape[0])]


def test_a_stream_of_large_time_points_keeps_a_bounded_window():
    """Eight time points of 5,000 documents: the model's window holds at most
    ``window * max_step_documents`` documents (it held all 35,000 of the last seven: 13.6 MB of
    state and a 51 MB step peak, against 14,000, 5.7 MB and 22 MB at the default bound of
    2,000), and every document still gets a label."""
    rng = np.random.default_rng(0)
    topics = _topics(rng, 4)
    model = DynamicNMF(n_initial_topics=3, n_emerging=2, max_topics=10)
    peaks = []
    for _ in range(8):
        X = _documents(rng, topics, [1250] * 4)
        tracemalloc.start()
        model.partial_fit(X)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert model.labels_.shape == (X.shape[0],)
        assert (model.labels_ >= 0).all()
    assert model.doc_times_.size == model.window * 2000
    assert len(arrays_to_npz(model.get_state())) < 8e6
    assert max(peaks) < 35e6


def test_a_sampled_time_point_weighs_as_much_as_the_whole():
    """A burst of a new topic (1,600 documents after days of 200 each): solved on a sample of 400
    documents per time point, the emerging topic's smoothed volume (its trend), strength and
    number of documents are those of the whole time point within 15% (measured: 8%, 7%, 0%)."""
    rng = np.random.default_rng(1)
    topics = _topics(rng, 3)
    days = [[100, 100, 0]] * 5 + [[100, 100, 1600]]
    data = [_documents(rng, topics, counts) for counts in days]
    events = {}
    for cap in (None, 400):
        model = DynamicNMF(n_initial_topics=2, n_emerging=1, max_step_documents=cap)
        for X in data:
            model.partial_fit(X)
        (event,) = model.events_
        events[cap] = event
        assert model.labels_.shape == (data[-1].shape[0],)
    full, sampled = events[None], events[400]
    assert abs(sampled.n_documents - full.n_documents) <= 0.15 * full.n_documents
    assert abs(sampled.strength - full.strength) <= 0.15 * full.strength
    assert abs(sampled.trend[-1] - full.trend[-1]) <= 0.15 * abs(full.trend[-1])
    assert abs(sampled.slope - full.slope) <= 0.15 * abs(full.slope)
