"""Dynamic NMF with temporal regularisation: constraints, updates, events, state."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sparsewatch.models.dynamic_nmf import EMERGING, EVOLVING, DynamicNMF, hp_smoother
from sparsewatch.replay.topic_simulation import (
    evaluate_dynamic_nmf,
    simulate_topic_stream,
    symmetric_kl,
)


def _small_stream(seed: int = 0, n_topics: int = 6, n_initial: int = 3, n_days: int = 9):
    return simulate_topic_stream(
        n_terms=300,
        n_topics=n_topics,
        n_days=n_days,
        n_initial=n_initial,
        docs_per_topic=30,
        topic_density=0.05,
        noise_density=0.002,
        random_state=seed,
    )


def _model(**params: float) -> DynamicNMF:
    base = {"n_initial_topics": 3, "window": 4, "max_iter": 15}
    return DynamicNMF(**{**base, **params})


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12])
def test_hp_smoother(n: int) -> None:
    F = hp_smoother(n, 3.0)
    np.testing.assert_allclose(F, F.T, atol=1e-12)
    line = 2.0 + 0.5 * np.arange(n)
    np.testing.assert_allclose(F @ line, line, atol=1e-10)
    if n >= 3:
        D2 = np.diff(np.eye(n), n=2, axis=0)
        np.testing.assert_allclose(F @ (np.eye(n) + 6.0 * D2.T @ D2), np.eye(n), atol=1e-10)


def _topics_by_id(model: DynamicNMF) -> dict[int, np.ndarray]:
    return {int(i): model.components_[k].copy() for k, i in enumerate(model.topic_ids_)}


@pytest.mark.parametrize("delta", [0.0, 0.01])
def test_evolving_topics_stay_in_the_delta_box(delta: float) -> None:
    stream = _small_stream(1)
    model = _model(delta=delta)
    previous: dict[int, np.ndarray] = {}
    for _, X_day, _ in stream.by_day():
        model.partial_fit(X_day)
        H = model.components_
        np.testing.assert_allclose(H.sum(axis=1), 1.0, atol=1e-9)
        assert H.min() >= 0.0
        for k, topic in enumerate(model.topic_ids_):
            if int(topic) in previous:
                assert model.topic_kinds_[k] == EVOLVING
                old = previous[int(topic)]
                if delta == 0.0:
                    np.testing.assert_array_equal(H[k], old)
                else:
                    assert np.max(np.abs(H[k] - old)) <= delta + 1e-12
        previous = _topics_by_id(model)


def test_emerging_topics_are_added_then_promoted() -> None:
    stream = _small_stream(2)
    model = _model(n_emerging=2, max_topics=8)
    emerging_before: set[int] = set()
    for day, X_day, _ in stream.by_day():
        model.partial_fit(X_day)
        kinds = dict(zip(model.topic_ids_.tolist(), model.topic_kinds_.tolist(), strict=True))
        for topic in emerging_before & set(kinds):
            assert kinds[topic] == EVOLVING
        emerging_before = {t for t, k in kinds.items() if k == EMERGING}
        assert len(emerging_before) == (0 if day == 0 else 2)
        assert model.topic_ids_.size == min(3 + 2 * day, 8)
        assert len(model.events_) == len(emerging_before)


def test_emerging_weights_solve_problem_9() -> None:
    """Projected gradient for an emerging ``w_i`` against L-BFGS-B on the same convex problem."""
    rng = np.random.default_rng(3)
    n, tau = 40, 5
    model = _model(mu=5.0, margin=0.3, pg_iter=5000)
    times = np.sort(rng.integers(0, tau, n))
    S = np.zeros((tau, n))
    S[times, np.arange(n)] = 1.0
    M = np.diff(hp_smoother(tau, model.hp_lambda) @ S, axis=0)
    c = np.arange(1, tau) / (tau - 1)
    Rh, hh = rng.standard_normal(n), 0.7
    lip = 2.0 * model.mu * np.linalg.norm(M, 2) ** 2
    w = model._emerging_w(np.zeros(n), Rh, hh, M, c, model.mu, lip)

    def phi(x: np.ndarray) -> tuple[float, np.ndarray]:
        gap = np.maximum(model.margin - M @ x, 0.0)
        value = hh * x @ x - 2 * x @ Rh + model.mu * np.sum(c * gap**2)
        return value, 2 * hh * x - 2 * Rh - 2 * model.mu * M.T @ (c * gap)

    ref = minimize(
        phi,
        np.zeros(n),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None)] * n,
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000},
    )
    assert phi(w)[0] <= ref.fun + 1e-7 * abs(ref.fun)
    np.testing.assert_allclose(w, ref.x, atol=1e-4)
    assert w.min() >= 0.0


def test_planted_rising_topic_is_captured_within_a_few_time_points() -> None:
    stream = _small_stream(4, n_topics=4, n_initial=3, n_days=10)
    scores = evaluate_dynamic_nmf(_model(delta=0.01, mu=5.0), stream, threshold=2.0)
    assert scores.n_detected == 1
    assert scores.detection_delay <= 3
    born = int(stream.births[3])
    first_doc_day = int(stream.days[stream.dominant == 3].min())
    assert scores.detection_days[0] - first_doc_day <= 2
    assert scores.detection_days[0] >= born


def test_events_carry_terms_trend_and_labels() -> None:
    stream = _small_stream(5)
    vocabulary = [f"term{j}" for j in range(stream.X.shape[1])]
    model = _model()
    for day, X_day, _ in stream.by_day():
        model.partial_fit(X_day, vocabulary=vocabulary)
        assert model.labels_.shape == (X_day.shape[0],)
        assert set(model.labels_.tolist()) <= set(model.topic_ids_.tolist()) | {-1}
        for event in model.events_:
            row = int(np.flatnonzero(model.topic_ids_ == event.topic_id)[0])
            top = np.argsort(-model.components_[row], kind="stable")[: model.n_top_terms]
            top = top[model.components_[row, top] > 0]
            assert event.top_terms == tuple(vocabulary[j] for j in top)
            assert len(event.top_terms) >= 1 and min(event.top_weights) > 0
            assert len(event.trend) == min(day + 1, model.window)
            assert event.time_index == day
            assert event.as_dict()["topic_id"] == event.topic_id
    np.testing.assert_array_equal(model.predict(X_day), model.predict(X_day))


def test_event_terms_are_the_topic_terms_of_positive_weight() -> None:
    # topic_density 0.05 of 300 terms: an emerging topic has far fewer than 300 terms of
    # positive weight, so asking for every term must return only those (no zero-weight padding,
    # which used to fill an alert's term list with the first words of the vocabulary)
    stream = _small_stream(7)
    vocabulary = [f"term{j}" for j in range(stream.X.shape[1])]
    model = _model(n_top_terms=stream.X.shape[1])
    events = []
    for _, X_day, _ in stream.by_day():
        model.partial_fit(X_day, vocabulary=vocabulary)
        events += model.events_
    assert events
    for event in events:
        assert 1 <= len(event.top_terms) < stream.X.shape[1]
        assert min(event.top_weights) > 0
        assert list(event.top_weights) == sorted(event.top_weights, reverse=True)


def test_state_round_trip_is_bit_identical() -> None:
    stream = _small_stream(6)
    days = list(stream.by_day())
    model = _model()
    for _, X_day, _ in days[:4]:
        model.partial_fit(X_day)
    buffer = io.BytesIO()
    np.savez(buffer, **model.get_state())
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as data:
        restored = clone(model).set_state(dict(data))
    for _, X_day, _ in days[4:]:
        model.partial_fit(X_day)
        restored.partial_fit(X_day)
        np.testing.assert_array_equal(restored.components_, model.components_)
        np.testing.assert_array_equal(restored.labels_, model.labels_)
        assert restored.events_ == model.events_


def test_vocabulary_grows_and_shrinks() -> None:
    stream = _small_stream(7)
    days = list(stream.by_day())
    model = _model()
    model.partial_fit(days[0][1])
    m = days[0][1].shape[1]
    wider = sp.hstack([days[1][1], sp.csr_matrix((days[1][1].shape[0], 10))]).tocsr()
    model.partial_fit(wider)
    assert model.components_.shape[1] == m + 10
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
    keep = np.arange(0, m + 10, 2)
    model.resize_features(keep.size + 3, keep_index=keep)
    assert model.components_.shape[1] == keep.size + 3
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
    X = sp.csr_matrix(days[2][1].toarray()[:, keep[keep < m]])
    X = sp.hstack([X, sp.csr_matrix((X.shape[0], keep.size + 3 - X.shape[1]))]).tocsr()
    model.partial_fit(X)
    assert model.labels_.shape == (X.shape[0],)
    assert np.isfinite(symmetric_kl(model.components_, model.components_)).all()


def test_empty_and_tiny_time_points() -> None:
    rng = np.random.default_rng(8)
    model = _model(n_initial_topics=5)
    model.partial_fit(sp.csr_matrix((0, 40)))
    assert model.labels_.shape == (0,)
    assert model.events_ == []
    assert not hasattr(model, "components_")
    model.partial_fit(sp.csr_matrix(rng.random((3, 40))))
    assert model.components_.shape == (5, 40)
    model.partial_fit(sp.csr_matrix((0, 40)))
    assert model.topic_ids_.size == 5
    assert model.events_ == []
    model.partial_fit(sp.csr_matrix(rng.random((4, 40))))
    assert model.topic_ids_.size == 6
    assert len(model.events_) == 1
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)


def test_empty_documents_get_no_weight_label_or_event_share() -> None:
    """All-zero rows: only the hinge (which rewards any rise of ``S w``) could give them weight,
    on an emerging topic; they were labelled with it and counted in its ``n_documents``."""
    rng = np.random.default_rng(9)
    model = _model()
    for _ in range(2):
        model.partial_fit(sp.csr_matrix(rng.random((20, 30)) * (rng.random((20, 30)) < 0.3)))
    model.partial_fit(sp.csr_matrix((4, 30)))
    np.testing.assert_array_equal(model.labels_, -1)
    np.testing.assert_array_equal(model.weights_[-4:], 0.0)
    assert [e.n_documents for e in model.events_] == [0] * len(model.events_)
    assert all(e.strength == 0.0 for e in model.events_)
    X = rng.random((12, 30)) * (rng.random((12, 30)) < 0.3)
    X[[2, 5, 11]] = 0.0  # empty documents among normal ones
    model.partial_fit(sp.csr_matrix(X))
    assert np.all(model.labels_[[2, 5, 11]] == -1)
    assert np.all(np.delete(model.labels_, [2, 5, 11]) >= 0)
    empty = np.asarray(model._window_matrix().sum(axis=1)).ravel() == 0
    np.testing.assert_array_equal(model.weights_[empty], 0.0)  # the whole window's
    counted = sum(e.n_documents for e in model.events_)
    assert counted == sum(np.sum(model.labels_ == e.topic_id) for e in model.events_)


def test_no_terms_learns_nothing_until_a_vocabulary_exists() -> None:
    """An empty vocabulary (0 columns) has nothing to factorise: no error, labels -1."""
    rng = np.random.default_rng(10)
    model = _model()
    model.partial_fit(sp.csr_matrix((6, 0)))
    np.testing.assert_array_equal(model.labels_, [-1] * 6)
    assert model.events_ == [] and not hasattr(model, "components_")
    model.partial_fit(sp.csr_matrix(rng.random((10, 25))))
    assert model.components_.shape == (3, 25) and model.labels_.shape == (10,)


def _snapshot(model: DynamicNMF) -> dict[str, object]:
    state = {k: v.copy() for k, v in model.get_state().items()}
    return {**state, "labels_": model.labels_.copy(), "events_": list(model.events_)}


def _assert_same(a: dict[str, object], b: dict[str, object]) -> None:
    assert a.keys() == b.keys()
    for name, value in a.items():
        if name == "events_":
            assert value == b[name]
        else:
            np.testing.assert_array_equal(value, b[name], err_msg=name)


def test_non_finite_time_point_is_rejected_before_any_state_changes() -> None:
    """A NaN/inf window raises a clear ValueError and leaves the model exactly as it was (it was
    stored and counted, then the solver failed, and every later clean window failed too)."""
    rng = np.random.default_rng(11)
    X = rng.random((30, 12)) * (rng.random((30, 12)) < 0.4)
    X[:, 0] += 0.1
    model, twin = _model(), _model()
    model.partial_fit(X)
    twin.partial_fit(X)
    before = _snapshot(model)
    nan_sparse = sp.csr_matrix(X[:5])
    nan_sparse.data[3] = np.nan
    inf_wide = np.hstack([X[:5], np.zeros((5, 2))])  # wider: would have resized the topics
    inf_wide[1, 13] = np.inf
    for bad in (nan_sparse, inf_wide):
        with pytest.raises(ValueError, match=r"NaN|infinity"):
            model.partial_fit(bad)
        _assert_same(_snapshot(model), before)
        with pytest.raises(ValueError, match=r"NaN|infinity"):
            model.transform(bad)
    model.partial_fit(X[:10])
    twin.partial_fit(X[:10])
    _assert_same(_snapshot(model), _snapshot(twin))
    first = _model()
    with pytest.raises(ValueError, match=r"NaN|infinity"):
        first.partial_fit(nan_sparse)
    assert not hasattr(first, "components_")


def test_transform_before_any_topic_raises_not_fitted() -> None:
    model = _model()
    with pytest.raises(NotFittedError):
        model.transform(np.ones((2, 5)))
    model.partial_fit(sp.csr_matrix((3, 0)))  # no vocabulary yet: still no topics
    with pytest.raises(NotFittedError):
        model.predict(np.ones((2, 5)))
