"""Dynamic NMF: which documents seed emerging topics, what labels say, and refitting.

* Empty (or fully explained) documents, with a zero positive residual, became seeds of uniform
  topics once the real stories ran out: such a topic split a story and halved its alert's rise.
* Labels were the argmax of the solver's weights, which carry the hinge of problem (9): it raises
  every document of the latest time point on an emerging topic alike, so documents that share no
  term with the topic were labelled with it (``predict`` gave -1 or another topic).
* ``fit`` checked the feature count of the state it was about to forget.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.dynamic_nmf import DynamicNMF

N_TERMS = 40  # four blocks of 10 terms, one story each


def _documents(rng: np.random.Generator, story: int, n: int, terms: int = 6) -> np.ndarray:
    """``n`` l1-normalised documents (as the TF-IDF rows) on ``terms`` of ``story``'s 10 terms."""
    X = np.zeros((n, N_TERMS))
    for row in X:
        row[10 * story + rng.choice(10, terms, replace=False)] = rng.random(terms) + 0.5
    return X / X.sum(axis=1, keepdims=True)


def _known(rng: np.random.Generator, n: int, terms: int = 6) -> np.ndarray:
    """A time point of the two known stories (terms 0-19)."""
    return np.vstack([_documents(rng, 0, n, terms), _documents(rng, 1, n, terms)])


def _fit_known(
    rng: np.random.Generator, n: int = 30, terms: int = 6, **params: object
) -> DynamicNMF:
    """Three time points of the known stories, one emerging topic a time point."""
    model = DynamicNMF(2, **{"n_emerging": 1, "window": 4, **params})  # type: ignore[arg-type]
    for _ in range(3):
        model.partial_fit(_known(rng, n, terms))
    return model


def test_seeds_come_from_documents_with_a_residual_only() -> None:
    """Directly on the seeding: of a fully explained document, two empty ones and one of a new
    story, only the last seeds a topic (it was 3 seeds, two of them uniform)."""
    model = DynamicNMF(2, n_emerging=3)
    H = np.zeros((2, N_TERMS))
    H[0, :10] = H[1, 10:20] = 0.1
    new = np.zeros(N_TERMS)
    new[[21, 25, 28]] = [0.5, 0.3, 0.2]
    X_new = sp.csr_matrix(np.vstack([H[0], np.zeros(N_TERMS), new, np.zeros(N_TERMS)]))
    W_new = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    seeds = model._emerging_init(X_new, W_new, H)
    np.testing.assert_allclose(seeds, new[None, :])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_empty_documents_do_not_split_a_new_story(seed: int) -> None:
    """With the detector's 3 emerging topics a time point, two empty documents added to a new
    story (documents on all its 10 terms: one seed) change nothing (they seeded uniform topics,
    which took 3 to 6 of its 30 documents and halved the rise of its alert)."""
    events = []
    for n_empty in (0, 2):
        rng = np.random.default_rng(seed)
        model = _fit_known(rng, n=15, terms=10, n_emerging=3)
        new = _documents(rng, 2, 30, terms=10)
        model.partial_fit(np.vstack([new, np.zeros((n_empty, N_TERMS))]))
        assert np.all(model.labels_[30:] == -1)
        events.append(
            [(e.top_term_indices, e.n_documents, round(e.rise, 6)) for e in model.events_]
        )
    assert events[1] == events[0]
    assert max(n for _, n, _ in events[1]) == 30


def test_a_time_point_of_empty_documents_adds_no_emerging_topic() -> None:
    model = _fit_known(np.random.default_rng(0), n_emerging=2)
    ids = model.topic_ids_.copy()
    model.partial_fit(np.zeros((5, N_TERMS)))
    assert model.events_ == []  # were two uniform topics, events of 0 documents
    np.testing.assert_array_equal(model.topic_ids_, ids)
    np.testing.assert_array_equal(model.labels_, -1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_labels_reflect_the_documents_terms(seed: int) -> None:
    """Two new stories and one emerging topic: the one left without a topic is not labelled
    with the other's (its documents share no term with it); ``labels_`` is ``predict``."""
    rng = np.random.default_rng(seed)
    model = _fit_known(rng)
    X = np.vstack([_known(rng, 30), _documents(rng, 2, 5), _documents(rng, 3, 20)])
    model.partial_fit(X)
    np.testing.assert_array_equal(model.labels_, model.predict(X))
    labelled = model.labels_ >= 0
    explained = X @ model.components_.T  # x . h_k, positive where the document shares a term
    columns = np.searchsorted(model.topic_ids_, model.labels_[labelled])
    assert np.all(explained[labelled, columns] > 0)
    for event in model.events_:
        assert event.n_documents == np.sum(model.labels_ == event.topic_id)


def test_labels_of_a_sampled_time_point_are_its_predictions() -> None:
    """Solved and unsampled rows of a time point larger than ``max_step_documents`` are
    labelled alike."""
    rng = np.random.default_rng(0)
    model = _fit_known(rng, max_step_documents=40)
    X = np.vstack([_known(rng, 30), _documents(rng, 2, 20), np.zeros((2, N_TERMS))])
    model.partial_fit(X)
    np.testing.assert_array_equal(model.labels_, model.predict(X))


def test_fit_forgets_the_state_before_checking_the_number_of_terms() -> None:
    rng = np.random.default_rng(0)
    model = DynamicNMF(2).fit(rng.random((20, 10)))
    model.fit(rng.random((20, 5)))  # raised "X has 5 features, but DynamicNMF is expecting 10"
    assert model.n_features_in_ == 5
    assert model.components_.shape == (2, 5)
    assert model.labels_.shape == (20,)
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(rng.random((20, 4)))  # a stream's time point still may not narrow


def test_fit_still_refuses_an_invalid_vocabulary_before_forgetting() -> None:
    rng = np.random.default_rng(0)
    model = DynamicNMF(2).fit(rng.random((20, 10)))
    components = model.components_.copy()
    with pytest.raises(ValueError, match="vocabulary"):
        model.fit(rng.random((20, 5)), vocabulary=["a", "b"])
    np.testing.assert_array_equal(model.components_, components)
