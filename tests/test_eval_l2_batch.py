"""L2-BATCH (Algorithm 8): the non-negative lasso against exact references, monotone updates."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize, nnls
from sklearn.exceptions import NotFittedError
from sparsewatch.models.novelty_baselines import (
    L2BatchNovelty,
    l2_objective,
    nonneg_lasso_cd,
    project_l2_ball_nonneg,
)


def _instance(seed: int, m: int = 30, k: int = 8, n: int = 5):
    rng = np.random.default_rng(seed)
    A = project_l2_ball_nonneg(rng.random((m, k)))
    P = rng.random((m, n)) * (rng.random((m, n)) < 0.4)
    return A, P


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_lambda_zero_equals_scipy_nnls(seed: int) -> None:
    A, P = _instance(seed)
    X = nonneg_lasso_cd(A.T @ A, A.T @ P, 0.0, max_iter=5000, tol=1e-12)
    for i in range(P.shape[1]):
        ref, _ = nnls(A, P[:, i])
        f = lambda x, i=i: 0.5 * np.sum((P[:, i] - A @ x) ** 2)  # noqa: E731
        assert f(X[:, i]) <= f(ref) + 1e-9


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.001, 0.01, 0.1]))
def test_nonneg_lasso_matches_a_bound_constrained_reference(seed: int, alpha: float) -> None:
    A, P = _instance(seed)
    X = nonneg_lasso_cd(A.T @ A, A.T @ P, alpha, max_iter=5000, tol=1e-12)
    ours = l2_objective(sp.csc_matrix(P), A, X, alpha)
    for i in range(P.shape[1]):
        p = P[:, i]
        res = minimize(
            lambda x, p=p: 0.5 * np.sum((p - A @ x) ** 2) + alpha * x.sum(),
            np.zeros(A.shape[1]),
            jac=lambda x, p=p: A.T @ (A @ x - p) + alpha,
            bounds=[(0, None)] * A.shape[1],
            method="L-BFGS-B",
            options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000},
        )
        assert ours[i] <= res.fun + 1e-8
        # KKT: gradient >= 0 everywhere, = 0 on the support
        grad = A.T @ (A @ X[:, i] - p) + alpha
        assert grad.min() >= -1e-6
        assert np.all(np.abs(grad[X[:, i] > 1e-10]) <= 1e-6)


def _docs(seed: int, n: int, m: int = 60) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    topics = rng.random((4, m)) * (rng.random((4, m)) < 0.2)
    X = rng.dirichlet(np.ones(4) * 0.3, size=n) @ topics
    X *= rng.random(X.shape) < 0.5
    X[np.arange(n), rng.integers(0, m, n)] += 0.1
    return sp.csr_matrix(X)


def test_objective_never_increases_over_alternations() -> None:
    model = L2BatchNovelty(n_components=6, eta=0, n_alternations=1, random_state=0)
    model.fit(_docs(0, 80))
    values = [model.objective()]
    for _ in range(6):
        model._alternate()
        values.append(model.objective())
    assert np.all(np.diff(values) <= 1e-12)
    assert values[-1] < values[0]
    A = model.components_
    assert A.min() >= 0 and np.linalg.norm(A, axis=0).max() <= 1 + 1e-12


def test_partial_fit_grows_dictionary_and_vocabulary() -> None:
    model = L2BatchNovelty(n_components=5, eta=3, random_state=0).fit(_docs(1, 40, 60))
    new = sp.hstack([_docs(2, 30, 60), sp.random(30, 10, density=0.1, random_state=0)]).tocsr()
    before = model.score_samples(new)
    model.partial_fit(new)
    assert model.components_.shape == (70, 8)
    assert model.P_.shape == (70, 70)
    after = model.score_samples(new)
    assert after.mean() < before.mean()  # the documents are now part of the training set
    codes = model.transform(new)
    assert codes.shape == (30, 8) and codes.min() >= 0
    assert model.get_params()["eta"] == 3


def test_scoring_before_fit_raises_not_fitted() -> None:
    model = L2BatchNovelty(n_components=3)
    X = np.random.default_rng(0).random((4, 6))
    for call in (model.score_samples, model.transform):
        with pytest.raises(NotFittedError):
            call(X)
