"""The simulated topic stream of Saha and Sindhwani (WSDM 2012, Section 5.1) and its evaluation.

Generator (defaults are the paper's setting): ``n_topics`` topics over ``n_terms`` terms, each a
sparse term distribution (a fraction ``topic_density`` of the terms non-zero, uniform weights,
normalised); every topic dominates ``docs_per_topic`` documents with a mixing weight of at least
``dominant_min``, the rest of the mass going by a Dirichlet draw to ``Poisson(topics_per_doc - 1)``
other topics already alive on that day (so about ``topics_per_doc`` topics per document). The
first ``n_initial`` topics spread their documents uniformly over the ``n_days`` days; topic
``i > n_initial`` (1-based) is born on day ``i`` and its documents fall on days ``i .. n_days`` with
probability proportional to ``d - i + 1`` (a rising topic). Each document is its mixture of
topics plus uniform noise on a random fraction ``noise_density`` of the terms.

Evaluation (:func:`evaluate_dynamic_nmf`): topics are compared by the symmetric KL divergence of
the term distributions smoothed by ``eps`` per term. A learned topic tracks the true topic
nearest to it when that divergence is below ``threshold``. *Tracking*: micro-averaged F1 over
every (document, day), where a document's prediction is the true topic tracked by its dominant
learned topic (none when that topic tracks nothing): precision = correct / predicted, recall =
correct / documents. *Detection*: a rising topic is detected on the first day one of that day's
emerging topics is within ``threshold`` of it; its miss rate is the fraction of its documents
that arrived before that day (1 when never detected).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from sparsewatch.models.dynamic_nmf import DynamicNMF

__all__ = [
    "SimulatedTopicStream",
    "TopicStreamScores",
    "evaluate_dynamic_nmf",
    "simulate_topic_stream",
    "symmetric_kl",
]


@dataclass(frozen=True)
class SimulatedTopicStream:
    """Documents (rows of ``X``), their day, dominant topic and mixture, and the true topics."""

    X: sp.csr_matrix
    days: np.ndarray
    dominant: np.ndarray
    mixing: np.ndarray
    topics: np.ndarray
    births: np.ndarray

    def by_day(self) -> Iterator[tuple[int, sp.csr_matrix, np.ndarray]]:
        """``(day, documents of that day, their dominant topics)`` in day order."""
        for day in range(int(self.days.max()) + 1):
            rows = np.flatnonzero(self.days == day)
            yield day, self.X[rows], self.dominant[rows]


def simulate_topic_stream(
    n_terms: int = 2500,
    n_topics: int = 25,
    n_days: int = 31,
    n_initial: int = 5,
    docs_per_topic: int = 40,
    topic_density: float = 0.01,
    noise_density: float = 0.001,
    dominant_min: float = 0.8,
    topics_per_doc: float = 2.5,
    random_state: int | None = 0,
) -> SimulatedTopicStream:
    """Draw the stream (``n_topics * docs_per_topic`` documents; 1,000 with the defaults).

    A ValueError for parameters outside the setting: ``1 <= n_initial <= n_topics <= n_days``
    (topic ``i`` is born on day ``i``), ``docs_per_topic >= 1``, densities in (0, 1] (noise:
    [0, 1]), ``0.5 <= dominant_min <= 1`` (below 0.5 another topic could outweigh the dominant
    one) and ``topics_per_doc >= 1``."""
    if not 1 <= n_initial <= n_topics <= n_days:
        raise ValueError("need 1 <= n_initial <= n_topics <= n_days")
    if docs_per_topic < 1:
        raise ValueError("docs_per_topic must be >= 1")
    if not 0 < topic_density <= 1 or not 0 <= noise_density <= 1:
        raise ValueError("need 0 < topic_density <= 1 and 0 <= noise_density <= 1")
    if not 0.5 <= dominant_min <= 1:
        raise ValueError("dominant_min must be in [0.5, 1]")
    if not topics_per_doc >= 1:
        raise ValueError("topics_per_doc must be >= 1")
    rng = np.random.default_rng(random_state)
    nnz = max(1, round(topic_density * n_terms))
    topics = np.zeros((n_topics, n_terms))
    for k in range(n_topics):
        topics[k, rng.choice(n_terms, nnz, replace=False)] = rng.random(nnz) + 0.1
    topics /= topics.sum(axis=1, keepdims=True)
    births = np.where(np.arange(n_topics) < n_initial, 0, np.arange(n_topics))
    n_docs = n_topics * docs_per_topic
    dominant = np.repeat(np.arange(n_topics), docs_per_topic)
    days = np.empty(n_docs, dtype=np.int64)
    for k in range(n_topics):
        span = np.arange(births[k], n_days)
        p = np.ones(span.size) if k < n_initial else (span - births[k] + 1.0)
        days[dominant == k] = rng.choice(span, docs_per_topic, p=p / p.sum())
    mixing = np.zeros((n_docs, n_topics))
    for d in range(n_docs):
        k = dominant[d]
        alive = np.flatnonzero((births <= days[d]) & (np.arange(n_topics) != k))
        n_extra = min(rng.poisson(topics_per_doc - 1.0), alive.size)
        a = 1.0 if n_extra == 0 else rng.uniform(dominant_min, 1.0)
        mixing[d, k] = a
        if n_extra:
            others = rng.choice(alive, n_extra, replace=False)
            mixing[d, others] = (1.0 - a) * rng.dirichlet(np.ones(n_extra))
    noise = sp.random(n_docs, n_terms, density=noise_density, random_state=rng, data_rvs=rng.random)
    X = sp.csr_matrix(mixing @ topics) + noise.tocsr() / nnz
    X.eliminate_zeros()
    order = np.argsort(days, kind="stable")
    return SimulatedTopicStream(
        X=X[order].tocsr(),
        days=days[order],
        dominant=dominant[order],
        mixing=mixing[order],
        topics=topics,
        births=births,
    )


def symmetric_kl(P: np.ndarray, Q: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Symmetric KL divergence between every row of ``P`` and every row of ``Q``.

    Rows are smoothed by ``eps`` per term and renormalised. Returns ``len(P) x len(Q)``.
    """
    P = (P + eps) / (P + eps).sum(axis=1, keepdims=True)
    Q = (Q + eps) / (Q + eps).sum(axis=1, keepdims=True)
    lp, lq = np.log(P), np.log(Q)
    return (
        np.sum(P * lp, axis=1)[:, None] - P @ lq.T + np.sum(Q * lq, axis=1)[None, :] - (Q @ lp.T).T
    )


@dataclass(frozen=True)
class TopicStreamScores:
    """Tracking F1 and detection results of one run."""

    f1: float
    precision: float
    recall: float
    miss_rate: float
    detection_delay: float
    n_detected: int
    n_rising: int
    detection_days: tuple[int, ...]


def evaluate_dynamic_nmf(
    model: DynamicNMF, stream: SimulatedTopicStream, threshold: float = 2.0, eps: float = 1e-4
) -> TopicStreamScores:
    """Run a fresh :class:`~sparsewatch.models.dynamic_nmf.DynamicNMF` over the stream, scored."""
    n_topics = stream.topics.shape[0]
    rising = np.flatnonzero(stream.births > 0)
    detected = np.full(n_topics, -1)
    correct = predicted = total = 0
    for day, X_day, truth in stream.by_day():
        model.partial_fit(X_day)
        div = symmetric_kl(model.components_, stream.topics, eps)
        nearest = div.argmin(axis=1)
        tracks = np.where(div.min(axis=1) < threshold, nearest, -1)
        lookup = dict(zip(model.topic_ids_.tolist(), tracks.tolist(), strict=True))
        pred = np.array([lookup.get(int(t), -1) for t in model.labels_], dtype=np.int64)
        correct += int(np.sum(pred == truth))
        predicted += int(np.sum(pred >= 0))
        total += truth.size
        for event in model.events_:
            row = int(np.flatnonzero(model.topic_ids_ == event.topic_id)[0])
            for j in np.flatnonzero(div[row] < threshold):
                if detected[j] < 0 and stream.births[j] > 0:
                    detected[j] = day
    precision = correct / max(predicted, 1)
    recall = correct / max(total, 1)
    f1 = 0.0 if correct == 0 else 2 * precision * recall / (precision + recall)
    misses, delays = [], []
    for j in rising:
        docs = stream.days[stream.dominant == j]
        if detected[j] < 0:
            misses.append(1.0)
        else:
            misses.append(float(np.mean(docs < detected[j])))
            delays.append(float(detected[j] - stream.births[j]))
    return TopicStreamScores(
        f1=f1,
        precision=precision,
        recall=recall,
        miss_rate=float(np.mean(misses)),
        detection_delay=float(np.mean(delays)) if delays else float("nan"),
        n_detected=int(np.sum(detected[rising] >= 0)),
        n_rising=int(rising.size),
        detection_days=tuple(int(d) for d in detected[rising]),
    )
