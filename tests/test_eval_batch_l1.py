"""BATCH-IMPL (Algorithm 7) on top of the shared l1 coding and dictionary update."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError
from sparsewatch.models.l1_coding import l1_objective
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.novelty_baselines import BatchL1Novelty


def _docs(seed: int, n: int, m: int = 40, n_topics: int = 3) -> sp.csr_matrix:
    """Short documents: each uses 2-4 keywords of one topic plus one random term."""
    rng = np.random.default_rng(seed)
    topic_terms = rng.permutation(m)[: 5 * n_topics].reshape(n_topics, 5)
    rows, cols, vals = [], [], []
    for i in range(n):
        terms = rng.choice(
            topic_terms[rng.integers(n_topics)], size=rng.integers(2, 5), replace=False
        )
        terms = np.unique(np.r_[terms, rng.integers(m)])
        rows += [i] * terms.size
        cols += terms.tolist()
        vals += (rng.random(terms.size) + 0.5).tolist()
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, m))
    return sp.csr_matrix(X.multiply(1 / X.sum(axis=1)))


PARAMS = {
    "n_components": 6,
    "lam": 0.05,
    "atom_terms": 2,
    "n_init_iter": 2,
    "over_weight": 1.0,  # Eq. (3), the paper's BATCH (the ONLINE default is a weighted loss)
    "random_state": 0,
}


def test_warm_up_dictionary_is_the_online_one() -> None:
    X = _docs(0, 60)
    batch = BatchL1Novelty(**PARAMS).fit(X)
    # plain Eq. (3), coded as BATCH codes (LP polish after 300 iterations, not 30)
    online = OnlineL1NoveltyDetector(**PARAMS, score_margin=False, coding_polish_after=300).fit(X)
    np.testing.assert_array_equal(batch.components_, online.components_.toarray())
    np.testing.assert_allclose(batch.score_samples(X), online.score_samples(X), rtol=1e-6)


def test_scores_are_the_l1_objective_and_stored_codes_match() -> None:
    X = _docs(1, 50)
    model = BatchL1Novelty(**PARAMS).fit(X)
    res = model.code(X)
    obj, _ = l1_objective(X.T.toarray(), model.components_, res.codes, model.lam)
    np.testing.assert_allclose(res.objective, obj, rtol=1e-5, atol=1e-6)
    assert np.all(res.objective <= 1 + 1e-6)  # x = 0 gives ||p||_1 = 1


def test_alternations_decrease_the_batch_objective() -> None:
    model = BatchL1Novelty(**{**PARAMS, "eta": 0, "n_alternations": 1, "dict_iter": 30})
    model.fit(_docs(2, 80))
    model.partial_fit(_docs(3, 40))
    values = [model.objective()]
    for _ in range(4):
        model.partial_fit(sp.csr_matrix((0, 40)))  # one more alternation on the same history
        values.append(model.objective())
    assert values[-1] <= values[0] + 1e-6
    assert all(b <= a * (1 + 1e-3) + 1e-6 for a, b in itertools.pairwise(values))


def test_partial_fit_grows_history_dictionary_and_vocabulary() -> None:
    model = BatchL1Novelty(**{**PARAMS, "eta": 3}).fit(_docs(4, 30, m=40))
    new = sp.hstack([_docs(5, 20, m=40), sp.csr_matrix((20, 5))]).tocsr()
    model.partial_fit(new)
    assert model.components_.shape == (45, 9)
    assert model.P_.shape == (45, 50)
    assert model.codes_.shape == (50, 9)
    A = model.components_
    assert A.min() >= 0 and A.sum(axis=0).max() <= 1 + 1e-5
    assert model.get_params()["eta"] == 3


def test_scoring_a_wider_vocabulary_leaves_the_fitted_model_as_it_was() -> None:
    model = BatchL1Novelty(**PARAMS).fit(_docs(2, 50))
    A, history = model.components_.copy(), model.P_.shape
    wider = sp.hstack([_docs(3, 20), sp.random(20, 7, density=0.2, random_state=0)]).tocsr()
    scores = model.score_samples(wider)
    assert scores.shape == (20,) and np.all(np.isfinite(scores))
    np.testing.assert_array_equal(model.components_, A)
    assert model.P_.shape == history


def test_non_finite_documents_are_rejected_before_any_state_changes() -> None:
    """A NaN/inf step raises ``ValueError`` first: with ``eta = 0`` it joined the history (and
    with a wider vocabulary padded the dictionary) before the coding failed."""
    for eta in (0, 3):
        model = BatchL1Novelty(**{**PARAMS, "eta": eta}).fit(_docs(6, 30))
        before = (model.components_.copy(), model.P_.copy(), model.codes_.copy())
        bad = sp.hstack([_docs(7, 5), sp.csr_matrix(np.ones((5, 2)))]).tocsr()
        bad.data[0] = np.nan
        for call in (model.partial_fit, model.score_samples, model.transform, model.code):
            with pytest.raises(ValueError, match=r"NaN|infinity"):
                call(bad)
        np.testing.assert_array_equal(model.components_, before[0])
        np.testing.assert_array_equal(model.P_.toarray(), before[1].toarray())
        np.testing.assert_array_equal(model.codes_.toarray(), before[2].toarray())


def test_scoring_before_fit_raises_not_fitted() -> None:
    model = BatchL1Novelty(**PARAMS)
    for call in (model.score_samples, model.transform, model.code):
        with pytest.raises(NotFittedError):
            call(_docs(8, 3))
