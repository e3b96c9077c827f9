"""scikit-learn conformance of the topic models (OR-/MOR-/WOR-NMF and dynamic NMF).

Every check of ``check_estimator`` applies and passes: no expected failures. The streaming
behaviour the checks do not see is pinned below: ``partial_fit`` waits on empty windows and a
wider ``X`` is a grown vocabulary, while ``fit`` refuses empty data and a narrower ``X`` is refused
in scikit-learn's words.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks
from sparsewatch.models.dynamic_nmf import DynamicNMF
from sparsewatch.models.nmf_online import MORNMF, ORNMF, WORNMF

ONLINE = [
    ORNMF(3, batch_size=5, max_inner_iter=20, random_state=0),
    MORNMF(3, buffer_size=3, max_inner_iter=20, random_state=0),
    WORNMF(3, batch_size=10, max_inner_iter=20, random_state=0),
]
DYNAMIC = DynamicNMF(3, window=3, max_iter=10, random_state=0)


@parametrize_with_checks([*ONLINE, DYNAMIC])
def test_sklearn_compatible(
    estimator: object, check: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # check_array_api_input (numpy namespace) runs only with SciPy's array API switch on
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    check(estimator)


def _documents(n: int = 30, m: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.random((n, m)) * (rng.random((n, m)) < 0.5)


@pytest.mark.parametrize("model", [*ONLINE, DYNAMIC], ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("shape", [(0, 12), (5, 0), (0, 0)])
def test_fit_refuses_empty_data_but_partial_fit_waits(model: object, shape: tuple) -> None:
    """``fit`` on no documents or no terms returned a model without bases; a stream's empty
    window stays a no-op for ``partial_fit``. A failed ``fit`` keeps the fitted state."""
    fitted = clone(model).fit(_documents())
    before = fitted.components_.copy()
    with pytest.raises(ValueError, match=r"Found array with 0 (sample|feature)\(s\)"):
        fitted.fit(sp.csr_matrix(shape))
    np.testing.assert_array_equal(fitted.components_, before)
    fresh = clone(model)
    assert fresh.partial_fit(sp.csr_matrix(shape)) is fresh
    assert not hasattr(fresh, "components_")


@pytest.mark.parametrize("model", [*ONLINE, DYNAMIC], ids=lambda m: type(m).__name__)
def test_narrower_input_is_refused_and_wider_is_a_grown_vocabulary(model: object) -> None:
    """A narrower ``X`` raises scikit-learn's message in every method; a wider one is scored
    with zero weight on the new terms (the vocabulary grew) without changing the model."""
    X = _documents()
    fitted = clone(model).fit(X)
    expected = r"X has 11 features, but \w+ is expecting 12 features as input"
    for method in (fitted.transform, fitted.predict, fitted.partial_fit):
        with pytest.raises(ValueError, match=expected):
            method(X[:, :11])
    wider = np.hstack([X, np.zeros((X.shape[0], 3))])
    np.testing.assert_allclose(fitted.transform(wider), fitted.transform(X), atol=1e-12)
    assert fitted.n_features_in_ == 12


def test_dynamic_nmf_fit_is_a_first_time_point_on_a_fresh_model() -> None:
    """``fit`` forgets the stream (window, topics, ids, events) and learns ``X`` as its first
    time point: the same model as ``partial_fit`` on a fresh instance."""
    days = [_documents(20, 15, seed) for seed in range(4)]
    fresh = clone(DYNAMIC).partial_fit(days[3])
    refit = clone(DYNAMIC)
    for X in days[:3]:
        refit.partial_fit(X)
    assert refit.n_steps_ == 3 and refit.topic_ids_.size > 3
    refit.fit(days[3])
    for name, value in fresh.get_state().items():
        np.testing.assert_array_equal(refit.get_state()[name], value, err_msg=name)
    np.testing.assert_array_equal(refit.labels_, fresh.labels_)
    assert refit.events_ == [] and refit.n_steps_ == 1
    assert 1 <= refit.n_iter_ <= DYNAMIC.max_iter


def test_dynamic_nmf_fit_checks_before_forgetting() -> None:
    """Invalid input to ``fit`` raises before the stream is forgotten."""
    model = clone(DYNAMIC).partial_fit(_documents(20, 15))
    model.partial_fit(_documents(20, 15, 1))
    before = {k: v.copy() for k, v in model.get_state().items()}
    with pytest.raises(ValueError, match="vocabulary has 2 terms"):
        model.fit(_documents(20, 15, 2), vocabulary=["a", "b"])
    with pytest.raises(ValueError, match="Negative values"):
        model.fit(-_documents(20, 15, 2) - 1.0)
    for name, value in before.items():
        np.testing.assert_array_equal(model.get_state()[name], value, err_msg=name)
