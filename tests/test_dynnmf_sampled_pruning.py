"""The dynamic NMF (Saha and Sindhwani): pruning of sampled documents (regression)."""

from __future__ import annotations

import numpy as np
from sparsewatch.models.dynamic_nmf import DynamicNMF


def test_pruning_counts_the_documents_a_sampled_document_stands_for() -> None:
    """``max_topics`` drops the evolving topics of least weight in the window. A time point of
    60 documents of story A, sampled down to 6 (each standing for 10), counted as 6: the topic
    of A (63 documents in the window) was dropped for story B (3 documents, larger entries),
    and the new documents were labelled with what was left."""
    rng = np.random.default_rng(0)
    a, b = np.zeros(12), np.zeros(12)
    a[:4], b[4:8] = 1.0, 1.0

    def docs(topic: np.ndarray, n: int, scale: float) -> np.ndarray:
        return scale * topic * (0.5 + rng.random((n, 12)))

    model = DynamicNMF(2, window=3, max_topics=2, max_step_documents=6, random_state=0)
    model.partial_fit(np.vstack([docs(a, 3, 1.0), docs(b, 3, 4.0)]))
    on_a = int(model.topic_ids_[np.argmax(model.components_[:, :4].sum(axis=1))])
    model.partial_fit(docs(a, 60, 1.0))
    assert on_a in model.topic_ids_.tolist()  # story A's topic is kept, B's dropped
    assert model.components_[:, 4:8].sum(axis=1).max() < 0.1  # no topic on B
    assert (model.labels_ >= 0).all()
