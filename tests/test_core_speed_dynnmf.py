"""Dynamic NMF's inner loop without temporaries and repeated checks changes no result.

The emerging weights' projected gradient runs in two buffers, the box threshold is found without
re-testing a box the solver has tested, and its bracket comes from the vector directly: each must
give bit for bit what the plain expressions give, and an invalid box must still be refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.dynamic_nmf import DynamicNMF, hp_smoother
from sparsewatch.models.projections import simplex_box_threshold


def _plain_emerging_w(
    model: DynamicNMF,
    w: np.ndarray,
    Rh: np.ndarray,
    hh: float,
    M: np.ndarray,
    c: np.ndarray,
    mu: float,
    lip: float,
    dw: np.ndarray | None,
) -> np.ndarray:
    """The projected gradient on problem (9) written with temporaries, as the model had it."""
    dw = np.ones_like(w) if dw is None else dw
    step = 1.0 / (2.0 * hh * float(dw.max(initial=1.0)) + lip * float(c.max(initial=0.0)) + 1e-300)
    for _ in range(model.pg_iter):
        grad = 2.0 * dw * (hh * w - Rh)
        if M.size:
            grad -= 2.0 * mu * (M.T @ (c * np.maximum(model.margin - M @ w, 0.0)))
        w = np.maximum(w - step * grad, 0.0)
    return w


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("tau", [1, 5])
def test_emerging_weights_are_the_plain_projected_gradient(weighted: bool, tau: int) -> None:
    """From a column of ``W`` (strided, as the solver passes it): the plain iteration's weights
    bit for bit, and the column is only read."""
    rng = np.random.default_rng(5)
    n = 300
    model = DynamicNMF(n_initial_topics=3, mu=2.0, margin=0.3, pg_iter=25)
    S = np.zeros((tau, n))
    S[np.sort(rng.integers(0, tau, n)), np.arange(n)] = 1.0
    M = np.diff(hp_smoother(tau, model.hp_lambda) @ S, axis=0) / 3.0
    c = np.arange(1, tau, dtype=np.float64) / max(tau - 1, 1)
    W = rng.random((n, 4)) * (rng.random((n, 4)) < 0.5)
    column = W[:, 2].copy()
    Rh, hh = rng.standard_normal(n), 0.37
    dw = rng.integers(1, 4, n).astype(np.float64) if weighted else None
    lip = 2.0 * model.mu * (np.linalg.norm(M, 2) ** 2 if M.size else 0.0)
    got = model._emerging_w(W[:, 2], Rh, hh, M, c, model.mu, lip, dw)
    want = _plain_emerging_w(model, W[:, 2], Rh, hh, M, c, model.mu, lip, dw)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(W[:, 2], column)
    assert got.min() >= 0.0 and got.any()


@pytest.mark.parametrize("infinite", [False, True])
def test_unchecked_box_threshold_is_the_checked_one(infinite: bool) -> None:
    """``check=False`` finds the very threshold of the checked call, cold and hot-started, with
    finite bounds and with an infinite upper bound (the searched bracket)."""
    rng = np.random.default_rng(6)
    p = rng.dirichlet(np.full(500, 0.1))
    lo, hi = np.maximum(p - 0.01, 0.0), np.minimum(p + 0.01, 1.0)
    if infinite:
        hi[::7] = np.inf
    v = p + rng.normal(scale=2e-3, size=p.size)
    for start in (None, 1e-3, -5.0):
        checked = simplex_box_threshold(v, lo, hi, theta0=start)
        assert simplex_box_threshold(v, lo, hi, theta0=start, check=False) == checked
        assert abs(np.clip(v - checked, lo, hi).sum() - 1.0) <= 1e-12


def test_box_threshold_still_refuses_an_empty_set_when_checked() -> None:
    v = np.linspace(0.0, 1.0, 10)
    with pytest.raises(ValueError, match="empty set"):
        simplex_box_threshold(v, np.full(10, 0.2), np.ones(10))  # the lower bounds sum to 2


def test_solve_refuses_an_invalid_box() -> None:
    """A topic's box is tested once in a solve (on its first projection), so an invalid one is
    refused as when every projection tested it."""
    rng = np.random.default_rng(7)
    X = sp.csr_matrix(rng.random((40, 30)) * (rng.random((40, 30)) < 0.3))
    model = DynamicNMF(n_initial_topics=3, window=3, max_iter=5, random_state=0)
    model.partial_fit(X[:20]).partial_fit(X[20:])
    lo = np.maximum(model.components_ - model.delta, 0.0)
    hi = np.minimum(model.components_ + model.delta, 1.0)
    lo[1] = hi[1] + 0.5  # lower above upper
    with pytest.raises(ValueError, match="empty set"):
        model._solve(model._window_matrix(), lo, hi)
