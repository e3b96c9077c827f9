"""The projection onto the simplex with a box at extreme spreads, against exact rationals.

``project_simplex_box`` and ``simplex_box_threshold`` at entries from ``1e-30`` to ``1e30``, tight
and infinite bounds, float32 and float64: every answer is checked against the exact projection
computed in :class:`fractions.Fraction` from the same floats.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise

import numpy as np
import pytest
from sparsewatch.models.projections import project_simplex_box, simplex_box_threshold


def _clip(w: Fraction, lo: Fraction | None, hi: Fraction | None) -> Fraction:
    if lo is not None and w < lo:
        return lo
    if hi is not None and w > hi:
        return hi
    return w


def _exact(v: np.ndarray, lower: np.ndarray, upper: np.ndarray, z: float) -> np.ndarray:
    """The exact projection of ``v`` onto ``{lower <= w <= upper, sum w = z}`` (rationals: the
    root of the piecewise-linear ``s(theta)`` on the piece between two breakpoints)."""
    vs = [Fraction(float(x)) for x in v]
    los = [Fraction(float(x)) if np.isfinite(x) else None for x in lower]
    his = [Fraction(float(x)) if np.isfinite(x) else None for x in upper]
    zf = Fraction(float(z))

    def s(t: Fraction) -> Fraction:
        return sum((_clip(x - t, a, b) for x, a, b in zip(vs, los, his, strict=True)), Fraction(0))

    uppers = {x - b for x, b in zip(vs, his, strict=True) if b is not None}
    points = sorted(uppers | {x - a for x, a in zip(vs, los, strict=True) if a is not None})
    reach = sum(abs(x) for x in vs) + abs(zf) + 1
    points = [(points[0] if points else 0) - reach, *points, (points[-1] if points else 0) + reach]
    for t0, t1 in pairwise(points):
        s0, s1 = s(t0), s(t1)
        if s0 >= zf >= s1:
            t = t0 if s0 == s1 else t0 + (s0 - zf) * (t1 - t0) / (s0 - s1)
            return np.array(
                [float(_clip(x - t, a, b)) for x, a, b in zip(vs, los, his, strict=True)]
            )
    raise AssertionError("the set is empty")


def _both_paths(v: np.ndarray, lower: np.ndarray, upper: np.ndarray, z: float) -> list:
    """The 1-d (scalar threshold) and the batched (rows) paths of ``project_simplex_box``."""
    return [
        project_simplex_box(v, lower, upper, z=z),
        project_simplex_box(v[:, None], lower[:, None], upper[:, None], axis=0, z=z)[:, 0],
    ]


@pytest.mark.parametrize(
    ("v", "lower", "upper", "z", "exact"),
    [
        # a step without free coordinates fell below theta's rounding and read as converged
        ([1e16, -1e30, 0.0, 10.0], [0.0] * 4, [1.0] * 4, 1.0, [1.0, 0.0, 0.0, 0.0]),
        # the free entry far below the largest: v - theta cancelled to 0
        ([1e12, -1e19], [0.0, 0.0], [0.5, 0.5], 1.0, [0.5, 0.5]),
        # the shift to the largest entry rounded the two free entries onto each other
        ([1e28, 1e10, 1e10 + 0.5], [0.0] * 3, [1.0] * 3, 1.5, [1.0, 0.0, 0.5]),
        # a box of width 1e-12 next to entries of 1e30: beyond 60 bisections of the bracket
        ([0.0, -1e30, -1e30], [0.3, 0.0, 0.0], [0.3 + 1e-12, 1.0, 1.0], 1.0, None),
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_extreme_spreads_project_onto_the_set(
    v: list, lower: list, upper: list, z: float, exact: list | None, dtype: type
) -> None:
    v_a, lo_a, hi_a = (np.asarray(x, dtype=dtype) for x in (v, lower, upper))
    want = _exact(v_a, lo_a, hi_a, z)
    if exact is not None and dtype is np.float64:
        np.testing.assert_allclose(want, exact, atol=1e-12)
    eps = np.finfo(dtype).eps
    for got in _both_paths(v_a, lo_a, hi_a, z):
        assert got.dtype == dtype
        assert np.all(got >= lo_a) and np.all(got <= hi_a)
        assert abs(float(got.astype(np.float64).sum()) - z) <= 16 * eps * max(z, 1.0)
        np.testing.assert_allclose(got, want, atol=16 * eps * max(z, 1.0), rtol=0)


def test_scalar_threshold_of_a_flat_piece_far_from_the_bracket_midpoint() -> None:
    """``simplex_box_threshold`` on the first case above: the threshold put every coordinate
    but the largest at its upper bound (the projection summed to 3, ``z = 1``)."""
    v = np.array([1e16, -1e30, 0.0, 10.0])
    theta = simplex_box_threshold(v, np.zeros(4), np.ones(4))
    np.testing.assert_array_equal(np.clip(v - theta, 0.0, 1.0), [1.0, 0.0, 0.0, 0.0])


def test_scalar_threshold_when_bisection_runs_out() -> None:
    """A box of width ``1e-11`` on the entry that stays free, next to an entry of ``-1e30``:
    64 bisections of a bracket ``1e30`` wide do not reach the root's piece (and a step without
    free coordinates, below theta's rounding, had stopped them with the sum ``z + 5e-12``)."""
    v = np.array([0.0, -1e30])
    lower, upper = np.array([0.5, 0.5 - 0.5e-11]), np.array([0.5 + 1e-11, 1.0])
    theta = simplex_box_threshold(v, lower, upper)
    w = np.clip(v - theta, lower, upper)
    np.testing.assert_allclose(w, _exact(v, lower, upper, 1.0), atol=1e-15, rtol=0)
    assert abs(w.sum() - 1.0) <= 1e-15


def test_sum_of_bounds_rounded_past_a_large_mass_is_not_an_empty_set() -> None:
    """Lower bounds ``z / 49`` with ``z = 3e7`` sum to ``z + 4e-9`` in float64: the set (one
    point) was refused as empty; float32 upper bounds ``z / 6`` fall ``1e-7`` short of ``z``."""
    z = 3e7
    got = project_simplex_box(np.zeros((49, 2)), z / 49, z, z=z)
    np.testing.assert_allclose(got, z / 49, rtol=1e-15)
    z = 2.6189238416925695
    v = np.array([3.8e8, -9.5e4, 2.3e19, 2.2e29, 6.6e7, 6.6e22], dtype=np.float32)
    got = project_simplex_box(v[:, None], 0.0, z / 6, z=z)[:, 0]
    np.testing.assert_allclose(got, np.float32(z / 6), rtol=1e-6)
    with pytest.raises(ValueError, match="empty set"):
        project_simplex_box(np.zeros(3), 0.5, 1.0)  # the lower bounds sum to 1.5 > 1


def test_random_extreme_spreads_against_exact_rationals() -> None:
    """Entries log-uniform over ``1e-30 .. 1e30`` of either sign, bounds from tight (``1e-14``)
    to infinite, masses ``1e-3 .. 1e3``: feasible, and within a few ulps of the exact
    projection (relative to its largest coordinate and ``z``). Before, 857 of 3,000 such cases
    missed ``z`` by more than ``1e-11`` relative (float64), some of them by ``2 z``."""
    rng = np.random.default_rng(38)
    for _ in range(300):
        dtype = np.float32 if rng.random() < 0.4 else np.float64
        n = int(rng.integers(1, 7))
        v = 10.0 ** rng.uniform(-30, 30, n) * rng.choice([-1.0, 1.0], n)
        z = float(10.0 ** rng.uniform(-3, 3))
        kind = rng.integers(3)
        if kind == 0:
            lower = rng.uniform(0, 1, n) * z / n
            upper = lower + 10.0 ** rng.uniform(-14, 0, n) * z
        elif kind == 1:
            lower = np.where(rng.random(n) < 0.5, -np.inf, -rng.uniform(0, 1, n))
            upper = np.where(rng.random(n) < 0.5, np.inf, rng.uniform(z / n, 2 * z, n))
        else:
            lower, upper = np.zeros(n), np.full(n, z / n * (1 + 10.0 ** rng.uniform(-12, 0)))
        v, lower, upper = (x.astype(dtype) for x in (v, lower, upper))
        if lower.astype(np.float64).sum() > z or upper.astype(np.float64).sum() < z:
            continue  # the float bounds leave the set empty
        want = _exact(v, lower, upper, z)
        scale = max(float(np.abs(want).max()), z, 1.0)
        tol = 64 * np.finfo(dtype).eps * scale
        one_d, rows = _both_paths(v, lower, upper, z)
        # the 1-d path's threshold is simplex_box_threshold's: its sum to 1e-12 max(z, 1)
        for got, tol_sum in ((one_d, max(n * tol, 1e-12 * max(z, 1.0))), (rows, n * tol)):
            assert np.all(got >= lower) and np.all(got <= upper), (v, lower, upper, z, got)
            assert abs(float(got.astype(np.float64).sum()) - z) <= tol_sum, (v, lower, upper, z)
            np.testing.assert_allclose(got, want, atol=max(tol, tol_sum), rtol=0, err_msg=str(z))
