"""The simplex projections the NMF models use, against a brute-force QP over active sets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sparsewatch.models.projections import (
    _simplex_pivot,
    project_simplex,
    project_simplex_box,
    simplex_box_threshold,
)


def _brute_force(v: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float = 1.0) -> np.ndarray:
    """``min ||x - v||^2`` s.t. ``sum x = z``, ``lo <= x <= hi``: try every active set.

    Each coordinate is at its lower bound, at its upper bound or free; on the free set the
    equality-constrained minimiser is ``x = v - t`` with the ``t`` that meets the sum. The best
    feasible candidate is the exact solution (the problem is a strictly convex QP).
    """
    best, best_val = None, np.inf
    for labels in itertools.product((0, 1, 2), repeat=v.size):
        lab = np.array(labels)
        x = np.where(lab == 0, lo, hi).astype(float)
        free = lab == 2
        if free.any():
            t = (v[free].sum() - (z - x[~free].sum())) / free.sum()
            x[free] = v[free] - t
        elif abs(x.sum() - z) > 1e-12:
            continue
        if np.all(x >= lo - 1e-12) and np.all(x <= hi + 1e-12) and abs(x.sum() - z) < 1e-9:
            val = float(np.sum((x - v) ** 2))
            if val < best_val:
                best, best_val = x, val
    assert best is not None
    return best


vectors = st.lists(st.floats(-2.0, 2.0, allow_nan=False), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(vectors)
def test_simplex_projection_matches_brute_force(values: list[float]) -> None:
    v = np.array(values)
    ref = _brute_force(v, np.zeros_like(v), np.full_like(v, np.inf))
    np.testing.assert_allclose(project_simplex(v), ref, atol=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(vectors, st.integers(0, 2**31 - 1), st.floats(0.0, 0.4))
def test_simplex_box_projection_matches_brute_force(
    values: list[float], seed: int, delta: float
) -> None:
    """The box of constraint (4): ``|x - p| <= delta`` around a point ``p`` of the simplex."""
    v = np.array(values)
    p = np.random.default_rng(seed).dirichlet(np.ones(v.size))
    lo, hi = np.maximum(p - delta, 0.0), np.minimum(p + delta, 1.0)
    ref = _brute_force(v, lo, hi)
    got = project_simplex_box(v, lo, hi)
    np.testing.assert_allclose(got, ref, atol=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(vectors, st.integers(0, 2**31 - 1), st.floats(0.0, 0.4), st.floats(-3.0, 3.0))
def test_hot_started_box_threshold_matches_brute_force(
    values: list[float], seed: int, delta: float, theta0: float
) -> None:
    """The scalar path the dynamic NMF's sweeps use: any starting threshold, inside or outside
    the bracket, gives the exact projection."""
    v = np.array(values)
    p = np.random.default_rng(seed).dirichlet(np.ones(v.size))
    lo, hi = np.maximum(p - delta, 0.0), np.minimum(p + delta, 1.0)
    ref = _brute_force(v, lo, hi)
    for start in (None, theta0):
        theta = simplex_box_threshold(v, lo, hi, theta0=start)
        np.testing.assert_allclose(np.clip(v - theta, lo, hi), ref, atol=1e-9)


def test_box_threshold_on_a_long_topic_matches_the_batched_rows() -> None:
    """A 4,000-term topic in the box of constraint (4), started cold and from thresholds near
    and far from the root: the same projection as the batched rows (closed form on the free set)."""
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(4000, 0.05))
    lo, hi = np.maximum(p - 0.01, 0.0), np.minimum(p + 0.01, 1.0)
    v = p + rng.normal(scale=1e-3, size=p.size)
    batched = project_simplex_box(np.vstack([v, v]), lo, hi, axis=1)[0]
    cold = simplex_box_threshold(v, lo, hi)
    for start in (None, cold + 1e-7, cold - 1e-3, 10.0):
        theta = simplex_box_threshold(v, lo, hi, theta0=start)
        np.testing.assert_allclose(np.clip(v - theta, lo, hi), batched, atol=1e-12)
        assert abs(np.clip(v - theta, lo, hi).sum() - 1.0) <= 1e-12


def test_columnwise_projection_of_a_basis_matrix() -> None:
    rng = np.random.default_rng(0)
    W = rng.standard_normal((5, 4))
    P = project_simplex(W, axis=0)
    for j in range(4):
        ref = _brute_force(W[:, j], np.zeros(5), np.full(5, np.inf))
        np.testing.assert_allclose(P[:, j], ref, atol=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(vectors, st.floats(0.1, 3.0))
def test_pivot_simplex_projection_matches_brute_force(values: list[float], z: float) -> None:
    """Michelot's pivoting (``method="pivot"``) gives the exact projection, mass ``z`` too."""
    v = np.array(values)
    ref = _brute_force(v, np.zeros_like(v), np.full_like(v, np.inf), z)
    np.testing.assert_allclose(project_simplex(v, z=z, method="pivot"), ref, atol=1e-9)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(0, 2**31 - 1), st.integers(1, 400), st.integers(1, 6), st.sampled_from([0, 1]))
def test_pivot_equals_sort_on_long_slices(seed: int, m: int, r: int, axis: int) -> None:
    """Both methods agree on topic-model-shaped inputs (long, mostly tiny slices, ties of 0)."""
    rng = np.random.default_rng(seed)
    V = rng.random((m, r)) ** 6 - 0.1 * rng.random((m, r)) * (rng.random((m, r)) < 0.5)
    V = V if axis == 0 else V.T
    sort = project_simplex(V, axis=axis)
    pivot = project_simplex(V, axis=axis, method="pivot")
    np.testing.assert_allclose(pivot, sort, atol=1e-12)
    np.testing.assert_allclose(pivot.sum(axis=axis), 1.0, atol=1e-12)
    assert pivot.min() >= 0.0


def test_pivot_keeps_float32() -> None:
    rng = np.random.default_rng(1)
    V = (rng.random((3, 5000)) ** 8).astype(np.float32)
    P = project_simplex(V, axis=1, method="pivot")
    assert P.dtype == np.float32
    np.testing.assert_allclose(P, project_simplex(V.astype(np.float64), axis=1), atol=1e-7)
    np.testing.assert_allclose(P.sum(axis=1, dtype=np.float64), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="method"):
        project_simplex(V, method="bisect")


@pytest.mark.parametrize("passes", [0, 1, 50])
def test_pivot_falls_back_to_sorting_when_passes_run_out(passes: int) -> None:
    rng = np.random.default_rng(2)
    V = rng.standard_normal((40, 3))
    np.testing.assert_allclose(
        _simplex_pivot(V, 1.0, 0, max_passes=passes), project_simplex(V), atol=1e-12
    )


def test_pivot_on_long_sparse_slices_matches_sorting() -> None:
    """Long slices with a few large entries (a dictionary's term columns after a gradient step):
    the first pass leaves few candidates, the compact passes finish them; float32 and float64,
    both axes."""
    rng = np.random.default_rng(4)
    V = rng.random((30, 5000)) * 1e-4
    hot = rng.random(V.shape) < 0.01
    V[hot] += rng.random(int(hot.sum()))
    V[3] = 1e-5  # all equal: every entry stays in the support
    for dtype in (np.float64, np.float32):
        W = V.astype(dtype)
        ref = project_simplex(W.astype(np.float64), axis=1)
        np.testing.assert_allclose(_simplex_pivot(W, 1.0, 1), ref, atol=1e-6)
        np.testing.assert_allclose(_simplex_pivot(W.T, 1.0, 0), ref.T, atol=1e-6)
