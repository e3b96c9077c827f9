"""Projections onto the simplex, the non-negative l1 ball (the set A) and the box simplex."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.optimize import minimize
from sparsewatch.models.projections import (
    project_l1_ball_nonneg,
    project_l1_ball_nonneg_csc,
    project_simplex,
    project_simplex_box,
)


def _qp(v: np.ndarray, constraints: list[dict], bounds: list[tuple]) -> np.ndarray:
    """Brute-force ``min ||w - v||^2`` by SLSQP from several starts."""
    best = None
    for x0 in (np.zeros_like(v), np.clip(v, 0, None), np.full_like(v, 1.0 / v.size)):
        r = minimize(
            lambda w: 0.5 * np.sum((w - v) ** 2),
            x0,
            jac=lambda w: w - v,
            bounds=bounds,
            constraints=constraints,
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 500},
        )
        if best is None or r.fun < best.fun:
            best = r
    return best.x


@pytest.mark.parametrize("method", ["sort", "pivot"])
@pytest.mark.parametrize("seed", range(5))
def test_l1_ball_matches_qp(seed: int, method: str) -> None:
    rng = np.random.default_rng(seed)
    V = rng.normal(scale=0.7, size=(7, 4))
    W = project_l1_ball_nonneg(V, method=method)
    for j in range(V.shape[1]):
        ref = _qp(
            V[:, j],
            [{"type": "ineq", "fun": lambda w: 1 - w.sum(), "jac": lambda w: -np.ones_like(w)}],
            [(0, None)] * V.shape[0],
        )
        np.testing.assert_allclose(W[:, j], ref, atol=1e-6)


@pytest.mark.parametrize("max_passes", [0, 1, 50])
@pytest.mark.parametrize("seed", range(3))
def test_sparse_l1_ball_matches_qp_and_dense(seed: int, max_passes: int) -> None:
    """Michelot's passes (and, when cut short, the sort finishing the unsettled columns) give the
    exact projection of the stored entries; implicit zeros stay zero."""
    rng = np.random.default_rng(seed)
    V = rng.normal(scale=0.7, size=(7, 5)) * (rng.random((7, 5)) < 0.7)
    V[:, 0] = 0.0  # an empty column
    S = sp.csc_matrix(V)
    W = project_l1_ball_nonneg_csc(S, max_passes=max_passes).toarray()
    for j in range(V.shape[1]):
        stored = V[:, j] != 0
        if not stored.any():
            assert not W[:, j].any()
            continue
        ref = _qp(
            V[stored, j],
            [{"type": "ineq", "fun": lambda w: 1 - w.sum(), "jac": lambda w: -np.ones_like(w)}],
            [(0, None)] * int(stored.sum()),
        )
        np.testing.assert_allclose(W[stored, j], ref, atol=1e-6)
        assert not W[~stored, j].any()
    # Large random instances: equal to the dense sort-based projection (zeros project to zeros).
    big = sp.random(300, 40, density=0.3, random_state=seed, format="csc")
    big.data = rng.exponential(rng.uniform(0.01, 0.2), big.nnz) * rng.choice([-1, 1, 1], big.nnz)
    np.testing.assert_allclose(
        project_l1_ball_nonneg_csc(big, max_passes=max_passes).toarray(),
        project_l1_ball_nonneg(big.toarray()),
        atol=1e-12,
    )


@pytest.mark.parametrize("seed", range(5))
def test_simplex_matches_qp(seed: int) -> None:
    rng = np.random.default_rng(seed)
    V = rng.normal(size=(3, 6))
    W = project_simplex(V, z=2.0, axis=1)
    for i in range(V.shape[0]):
        ref = _qp(
            V[i],
            [{"type": "eq", "fun": lambda w: w.sum() - 2.0, "jac": lambda w: np.ones_like(w)}],
            [(0, None)] * V.shape[1],
        )
        np.testing.assert_allclose(W[i], ref, atol=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_simplex_box_matches_qp(seed: int) -> None:
    rng = np.random.default_rng(seed)
    V = rng.normal(size=(6, 3))
    lower = rng.uniform(0, 0.1, size=(6, 1))
    upper = lower + rng.uniform(0.05, 0.5, size=(6, 1))
    W = project_simplex_box(V, lower, upper, axis=0)
    for j in range(V.shape[1]):
        ref = _qp(
            V[:, j],
            [{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones_like(w)}],
            list(zip(lower.ravel(), upper.ravel(), strict=True)),
        )
        np.testing.assert_allclose(W[:, j], ref, atol=1e-6)
    assert np.all(lower - 1e-12 <= W) and np.all(upper + 1e-12 >= W)
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-10)


def test_simplex_box_rejects_empty_set() -> None:
    with pytest.raises(ValueError):
        project_simplex_box(np.zeros(3), 0.5, 1.0)


matrices = arrays(
    np.float64,
    st.tuples(st.integers(1, 30), st.integers(1, 6)),
    elements=st.floats(-5, 5, allow_nan=False),
)


@settings(max_examples=60, deadline=None)
@given(matrices, st.floats(0.1, 3.0), st.sampled_from(["sort", "pivot"]))
def test_l1_ball_feasible_idempotent_kkt(V: np.ndarray, radius: float, method: str) -> None:
    W = project_l1_ball_nonneg(V, radius=radius, method=method)
    assert W.shape == V.shape
    assert np.all(W >= 0)
    assert np.all(W.sum(axis=0) <= radius * (1 + 1e-12) + 1e-12)
    np.testing.assert_allclose(project_l1_ball_nonneg(W, radius=radius), W, atol=1e-12)
    # KKT: W = max(V - theta, 0) with theta >= 0, theta > 0 only when the ball is active
    for j in range(V.shape[1]):
        pos = W[:, j] > 0
        if pos.any():
            theta = (V[:, j] - W[:, j])[pos]
            np.testing.assert_allclose(theta, theta[0], atol=1e-9)
            assert theta[0] >= -1e-9
            assert np.all(V[~pos, j] <= theta[0] + 1e-9)
            if theta[0] > 1e-9:
                assert abs(W[:, j].sum() - radius) < 1e-9


@settings(max_examples=60, deadline=None)
@given(matrices)
def test_simplex_feasible_idempotent(V: np.ndarray) -> None:
    W = project_simplex(V, axis=0)
    assert np.all(W >= 0)
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-10)
    np.testing.assert_allclose(project_simplex(W, axis=0), W, atol=1e-12)


@pytest.mark.parametrize("method", ["sort", "pivot"])
def test_float32_is_kept_and_axis_one(method: str) -> None:
    V = np.random.default_rng(0).normal(size=(5, 40)).astype(np.float32)
    W = project_l1_ball_nonneg(V, axis=1, method=method)
    assert W.dtype == np.float32
    np.testing.assert_allclose(W, project_l1_ball_nonneg(V.T.astype(np.float64)).T, atol=1e-6)


@pytest.mark.parametrize(("dtype", "level"), [(np.float32, 1e8), (np.float64, 1e17)])
def test_huge_nearly_equal_entries_are_projected_exactly(dtype: type, level: float) -> None:
    """Entries so large that ``v - theta`` cancels (theta differs from them by less than their
    spacing) are still projected exactly: the projection only depends on the differences of the
    entries, which are exact. Every method and layout returns the projection onto the ball."""
    spacing = float(np.spacing(dtype(level)))
    V = np.zeros((4, 3), dtype=dtype)
    V[:, 0] = level  # all equal: a quarter each
    V[:, 1] = level + spacing * np.array([0, 1, 0, 0])  # one entry a spacing above the others
    V[:, 2] = level * np.array([1, 1, 0.5, 0])  # two entries far below: zero in the projection
    assert spacing > 1.0  # the gap exceeds the mass: all of it goes to the larger entry
    expected = np.array([[0.25, 0.0, 0.5], [0.25, 1.0, 0.5], [0.25, 0.0, 0.0], [0.25, 0.0, 0.0]])
    outputs = {
        "simplex sort": project_simplex(V),
        "simplex pivot": project_simplex(V, method="pivot"),
        "simplex pivot axis 1": project_simplex(V.T, axis=1, method="pivot").T,
        "ball sort": project_l1_ball_nonneg(V),
        "ball pivot": project_l1_ball_nonneg(V, method="pivot"),
        "ball sparse": project_l1_ball_nonneg_csc(sp.csc_matrix(V)).toarray(),
        "1-d simplex": np.column_stack([project_simplex(V[:, j]) for j in range(3)]),
        "1-d ball": np.column_stack([project_l1_ball_nonneg(V[:, j]) for j in range(3)]),
    }
    for name, W in outputs.items():
        assert W.dtype == dtype, name
        np.testing.assert_allclose(W, expected, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("method", ["sort", "pivot"])
def test_zero_mass_projects_to_zero_and_a_negative_one_is_refused(method: str) -> None:
    """With z = 0 the sort found no support (argmax of all-False said "all of it") and returned
    [0, 1] for [0.3, 0.9]; a negative mass (an empty set) gave zeros or garbage silently."""
    V = np.array([[0.3, 0.9], [1.0, 0.0], [-2.0, 5.0]])
    assert not project_simplex(V, z=0.0, axis=1, method=method).any()
    assert not project_l1_ball_nonneg(V, radius=0.0, axis=1, method=method).any()
    assert not project_l1_ball_nonneg_csc(sp.csc_matrix(V.T), radius=0.0).toarray().any()
    for bad in (-1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="must be finite and >= 0"):
            project_simplex(V, z=bad, method=method)
        with pytest.raises(ValueError, match="must be finite and >= 0"):
            project_l1_ball_nonneg(V, radius=bad, method=method)
        with pytest.raises(ValueError, match="must be finite and >= 0"):
            project_l1_ball_nonneg_csc(sp.csc_matrix(V), radius=bad)


def test_an_integer_sparse_matrix_is_projected_in_floating_point() -> None:
    """In place in its own dtype, [3, 2] onto the ball of radius 2 came back as [1, 0]."""
    out = project_l1_ball_nonneg_csc(sp.csc_matrix([[3], [2]]), 2.0)
    np.testing.assert_allclose(out.toarray().ravel(), [1.5, 0.5])
    np.testing.assert_allclose(out.toarray(), project_l1_ball_nonneg(np.array([[3], [2]]), 2.0))


@pytest.mark.parametrize("seed", range(4))
def test_infinite_box_bounds_are_the_open_sides_of_the_box(seed: int) -> None:
    """The bracket was (v - upper).min(), (v - lower).max(): an infinite bound made its midpoint
    infinite and the result inf or NaN. Against the QP with the bound left out."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=5)
    eq = [{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones_like(w)}]
    np.testing.assert_allclose(project_simplex_box(v, 0.0, np.inf), project_simplex(v), atol=1e-12)
    ref = _qp(v, eq, [(None, 0.4)] * 5)
    np.testing.assert_allclose(project_simplex_box(v, -np.inf, 0.4), ref, atol=1e-6)
    rows = project_simplex_box(np.stack([v, 3 * v]), -np.inf, np.inf, axis=1)
    np.testing.assert_allclose(
        rows, np.stack([v, 3 * v]) - (np.stack([v, 3 * v]).sum(1) - 1)[:, None] / 5
    )
