"""Theorem 1 (Irofti et al. 2024): the closed-form atom update against brute force on the sphere."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from sparsewatch.models._ocsvm_base import group_shrink, maximize_on_sphere


def subproblem(R: np.ndarray, c: np.ndarray, beta: float, d: np.ndarray, x: np.ndarray) -> float:
    """Sub-problem (11): 1/2 ||R - d x^T||^2 + beta ||x|| - c^T x (c = w_i lambda)."""
    return 0.5 * float(np.sum((R - np.outer(d, x)) ** 2)) + beta * np.linalg.norm(x) - c @ x


def closed_form(R: np.ndarray, c: np.ndarray, beta: float, method: str = "exact"):
    d = maximize_on_sphere(R, c, method, d0=np.ones(R.shape[0]), max_iter=20000, tol=1e-14)
    return d, group_shrink(R.T @ d + c, beta)


def sphere_grid(m: int, n: int, rng: np.random.Generator) -> np.ndarray:
    if m == 2:
        t = np.linspace(0.0, 2.0 * np.pi, n, endpoint=False)
        return np.stack([np.cos(t), np.sin(t)], axis=1)
    P = rng.standard_normal((n, m))
    return P / np.linalg.norm(P, axis=1, keepdims=True)


def brute_force_min(R: np.ndarray, c: np.ndarray, beta: float, rng: np.random.Generator) -> float:
    """min over a dense sphere sample of min_x (11); the inner minimum by a generic solver is
    replaced by the l2 prox only after checking it on a few directions (test below)."""
    grid = sphere_grid(R.shape[0], 200_000, rng)
    V = grid @ R + c  # rows: R^T d + c
    nv = np.linalg.norm(V, axis=1)
    inner = -0.5 * np.maximum(nv - beta, 0.0) ** 2  # min_x (11) - 1/2 ||R||^2
    return 0.5 * float(np.sum(R**2)) + float(inner.min())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("m", [2, 3])
def test_closed_form_attains_brute_force_minimum(seed: int, m: int) -> None:
    rng = np.random.default_rng(seed)
    n_i = int(rng.integers(2, 7))
    R = rng.standard_normal((m, n_i))
    c = rng.standard_normal(n_i) * [0.0, 0.3, 1.0, 3.0][seed % 4]
    beta = [0.0, 0.5, 1.5][seed % 3]
    d, x = closed_form(R, c, beta)
    value = subproblem(R, c, beta, d, x)
    brute = brute_force_min(R, c, beta, rng)
    assert np.isclose(np.linalg.norm(d), 1.0)
    assert value <= brute + 1e-9  # never worse than any sampled direction
    assert value >= brute - 1e-3 * max(1.0, abs(brute))  # and the sample gets close to it


@pytest.mark.parametrize("seed", range(4))
def test_row_update_is_the_exact_inner_minimiser(seed: int) -> None:
    """For a fixed unit d, x = (1 - beta/||v||)_+ v minimises (11) (checked with Nelder-Mead)."""
    rng = np.random.default_rng(100 + seed)
    R = rng.standard_normal((3, 4))
    c = rng.standard_normal(4)
    d = rng.standard_normal(3)
    d /= np.linalg.norm(d)
    for beta in (0.0, 0.7, 50.0):
        x = group_shrink(R.T @ d + c, beta)
        res = minimize(
            lambda z, beta=beta: subproblem(R, c, beta, d, z),
            x0=rng.standard_normal(4),
            method="Nelder-Mead",
            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000},
        )
        assert subproblem(R, c, beta, d, x) <= res.fun + 1e-8
    assert not np.any(group_shrink(R.T @ d + c, 50.0))  # ||v|| < beta: the row is trimmed


def test_hard_case_matches_brute_force() -> None:
    """b orthogonal to the top singular direction (the trust-region "hard case")."""
    rng = np.random.default_rng(7)
    R = np.diag([3.0, 1.0]) @ np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    c = np.array([0.0, 0.1, 0.0])  # R c has no component along e_1
    d, x = closed_form(R, c, 0.0)
    assert subproblem(R, c, 0.0, d, x) <= brute_force_min(R, c, 0.0, rng) + 1e-9


@pytest.mark.parametrize("seed", range(10))
def test_exact_and_power_method_agree(seed: int) -> None:
    """K-SVD-like residuals (a dominant atom plus noise) and OC-SVM terms: within 1e-3."""
    rng = np.random.default_rng(200 + seed)
    m, n_i = int(rng.integers(3, 12)), int(rng.integers(5, 60))
    atom = rng.standard_normal(m)
    atom /= np.linalg.norm(atom)
    R = np.outer(atom, rng.standard_normal(n_i)) + 0.3 * rng.standard_normal((m, n_i))
    c = rng.uniform(0.0, 0.5, n_i) * rng.choice([0.0, 1.0, 5.0])
    d0 = atom + 0.2 * rng.standard_normal(m)
    exact = maximize_on_sphere(R, c, "exact")
    power = maximize_on_sphere(R, c, "power", d0=d0, max_iter=5000, tol=1e-12)
    gap = np.linalg.norm(exact - power)
    if not c.any():  # plain K-SVD: the top singular vector, defined up to its sign
        gap = min(gap, np.linalg.norm(exact + power))
    assert gap < 1e-3
    f_exact, f_power = (float(np.sum((R.T @ d + c) ** 2)) for d in (exact, power))
    assert f_power <= f_exact * (1.0 + 1e-12)
    assert f_power >= f_exact * (1.0 - 1e-6)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    m=st.integers(1, 6),
    n_i=st.integers(1, 8),
    scale=st.sampled_from([0.0, 0.01, 1.0, 100.0]),
)
def test_exact_solution_beats_random_unit_vectors(seed: int, m: int, n_i: int, scale: float):
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((m, n_i))
    c = scale * rng.standard_normal(n_i)
    d = maximize_on_sphere(R, c, "exact")
    best = float(np.sum((R.T @ d + c) ** 2))
    P = rng.standard_normal((500, m))
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    others = np.sum((P @ R + c) ** 2, axis=1)
    assert np.isclose(np.linalg.norm(d), 1.0)
    assert best >= others.max() * (1.0 - 1e-10) - 1e-12
