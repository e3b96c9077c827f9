"""Randomised checks of the l1 coding (Algorithm 5 with its LP polish) against an exact LP
(``scipy.optimize.linprog``, HiGHS) and of the ONLINE detector's state bookkeeping against
explicit references: degenerate shapes, dtypes, sparse layouts (non-canonical included), warm
starts, vocabulary remaps and top-q flagging."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog
from sklearn.base import clone
from sparsewatch.models.l1_coding import l1_objective, l1_sparse_code, weighted_l1_loss
from sparsewatch.models.novelty import OnlineL1NoveltyDetector

from tests.support.arrays import to_dense


def _lp_optimum(p: np.ndarray, A: np.ndarray, lam: float, w: float) -> float:
    """``min_{x>=0} sum loss_w(p - A x) + lam ||x||_1`` by linprog, at unit scale."""
    scale = np.abs(p).sum()
    if scale == 0:
        return 0.0
    m, k = A.shape
    if k == 0:
        return float(weighted_l1_loss(p, w).sum())
    cost = np.r_[np.full(k, lam), np.ones(m), np.full(m, w)]
    res = linprog(
        cost,
        A_eq=np.hstack([A, np.eye(m), -np.eye(m)]),
        b_eq=p / scale,
        bounds=(0, None),
        method="highs",
    )
    assert res.status == 0
    return float(res.fun * scale)


def _non_canonical(M: np.ndarray, rng: np.random.Generator, fmt: str) -> sp.spmatrix:
    """``M`` as CSR or CSC with every entry split in two (duplicates), explicit zeros, and
    indices in random order within each row or column."""
    C = sp.coo_matrix(M)
    z = 2 if M.size else 0
    r = np.r_[C.row, C.row, rng.integers(0, max(M.shape[0], 1), z)]
    c = np.r_[C.col, C.col, rng.integers(0, max(M.shape[1], 1), z)]
    d = np.r_[C.data * 0.25, C.data * 0.75, np.zeros(z)]
    perm = rng.permutation(r.size)
    r, c, d = r[perm], c[perm], d[perm]
    major, minor, size = (r, c, M.shape[0]) if fmt == "csr" else (c, r, M.shape[1])
    order = np.argsort(major, kind="stable")
    indptr = np.r_[0, np.cumsum(np.bincount(major, minlength=size))]
    cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    out = cls((d[order], minor[order], indptr), shape=M.shape)
    assert C.nnz == 0 or not out.has_canonical_format
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(0, 2**32 - 1),
    m=st.integers(1, 25),
    k=st.integers(0, 10),
    n=st.integers(1, 6),
    lam=st.sampled_from([0.0, 1e-3, 0.01, 0.1, 1.0, 1e6]),
    w=st.sampled_from([1.0, 0.5, 0.1]),
    dtype=st.sampled_from([np.float32, np.float64]),
    layout=st.sampled_from(["dense", "csr", "csc", "noncanonical-csr", "noncanonical-csc"]),
    a_layout=st.sampled_from(["dense", "csc", "noncanonical-csr"]),
    start=st.sampled_from(["cold", "garbage", "previous"]),
    polish=st.sampled_from([300, 30, 0]),
)
def test_objective_matches_the_exact_lp(
    seed, m, k, n, lam, w, dtype, layout, a_layout, start, polish
) -> None:
    rng = np.random.default_rng(seed)
    A = rng.random((m, k)) * (rng.random((m, k)) < rng.uniform(0.1, 1))
    A *= rng.choice([1.0, 0.3], size=k) / np.maximum(A.sum(axis=0), 1e-12)  # masses 1 and < 1
    if k >= 2:
        A[:, 1] = A[:, 0]  # a duplicated atom
    if k >= 3:
        A[:, 2] = 0  # a zero atom
    P = rng.random((m, n)) * (rng.random((m, n)) < rng.uniform(0.05, 1))
    if k:
        P = P * 0.2 + A @ (rng.random((k, n)) * (rng.random((k, n)) < 0.4))
    P[:, 0] = 0  # an empty document
    if n > 1:
        P[:, 1] = 0
        P[rng.integers(m), 1] = 0.7  # a document of one term
    P /= np.maximum(P.sum(axis=0), 1e-12)
    if layout.startswith("noncanonical"):
        Pin = _non_canonical(P, rng, layout.split("-")[1])
    else:
        Pin = {"dense": P, "csr": sp.csr_matrix(P), "csc": sp.csc_matrix(P)}[layout]
    if a_layout == "noncanonical-csr":
        Ain = _non_canonical(A, rng, "csr")
    else:
        Ain = A if a_layout == "dense" else sp.csc_matrix(A)
    x0 = None
    if start == "garbage":
        x0 = (rng.random((n, k)) - 0.3) * 100
    elif start == "previous":
        x0 = l1_sparse_code(P, A, lam, over_weight=w).codes
    res = l1_sparse_code(Pin, Ain, lam, dtype=dtype, over_weight=w, x0=x0, polish_after=polish)
    Pd, Ad = P.astype(dtype).astype(np.float64), A.astype(dtype).astype(np.float64)
    obj, rec = l1_objective(Pd, Ad, res.codes, lam, w)
    assert res.codes.shape == (n, k) and (res.codes.data >= 0).all()
    np.testing.assert_allclose(res.objective, obj, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(res.reconstruction_error, rec, rtol=1e-4, atol=1e-6)
    lx = np.asarray(res.codes.sum(axis=1), dtype=np.float64).ravel()
    np.testing.assert_allclose(res.reconstruction_error + lam * lx, res.objective, rtol=1e-6)
    assert res.objective[0] == 0.0
    for j in range(n):
        opt = _lp_optimum(Pd[:, j], Ad, lam, w)
        assert obj[j] <= opt + 1e-3 * max(abs(opt), 1e-3) + 1e-7, (j, obj[j], opt)
        assert obj[j] >= opt - 1e-6 * max(1.0, abs(opt))
        assert obj[j] - opt <= res.gap[j] + 1e-6  # the certified gap bounds the error


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), w=st.sampled_from([1.0, 0.1]))
def test_certified_gap_without_polish_bounds_the_error(seed: int, w: float) -> None:
    """ADMM alone (``polish_after=None``): whatever stopped it, ``gap`` bounds the distance to
    the optimum, and a document certified within ``tol`` is within ``tol`` of it."""
    rng = np.random.default_rng(seed)
    m, k, n = 15, 8, 5
    A = rng.random((m, k)) * (rng.random((m, k)) < 0.4)
    A /= np.maximum(A.sum(axis=0), 1e-12)
    P = A @ (rng.random((k, n)) * (rng.random((k, n)) < 0.4)) + 0.05 * rng.random((m, n))
    P /= P.sum(axis=0)
    res = l1_sparse_code(P, A, 0.01, over_weight=w, polish_after=None, tol=1e-4)
    obj, _ = l1_objective(P, A, res.codes, 0.01, w)
    for j in range(n):
        opt = _lp_optimum(P[:, j], A, 0.01, w)
        assert obj[j] - opt <= res.gap[j] + 1e-9
        if res.gap[j] <= 1e-4 * obj[j]:
            assert obj[j] <= opt * (1 + 2e-4) + 1e-12


def _window(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    X = (rng.random((n, m)) ** 4) * (rng.random((n, m)) < 0.2)
    X[X.sum(axis=1) == 0, 0] = 1.0
    return X / X.sum(axis=1, keepdims=True)


@pytest.mark.parametrize(
    "params", [{}, {"grow_threshold": None}, {"dtype": np.float64, "update_passes": 2}]
)
def test_vocabulary_remap_matches_an_explicitly_reindexed_model(params: dict) -> None:
    """Evicting rows and appending new ones (:meth:`remap_features`) gives the model that holds
    the explicitly re-indexed dictionary and dual: same scores, same next step."""
    rng = np.random.default_rng(1)
    model = OnlineL1NoveltyDetector(n_components=10, **params).fit(_window(rng, 50, 40))
    model.partial_fit(_window(rng, 40, 43))  # a dual, new terms, grown atoms
    kept = np.sort(rng.choice(43, size=38, replace=False))
    ref = clone(model).set_state(model.get_state())
    model.remap_features(kept, 4)
    A, D = to_dense(ref.components_), to_dense(ref.oiadmm_.dual_)
    A2 = np.vstack([A[kept], np.zeros((4, A.shape[1]))]).astype(ref.dtype)
    D2 = np.vstack([D[kept], np.zeros((4, D.shape[1]))]).astype(ref.dtype)
    sparse = sp.issparse(ref.components_)
    ref.oiadmm_.components_ = sp.csc_matrix(A2) if sparse else A2
    ref.oiadmm_.dual_ = sp.csc_matrix(D2) if sp.issparse(ref.oiadmm_.dual_) else D2
    np.testing.assert_array_equal(to_dense(model.components_), A2)
    np.testing.assert_array_equal(to_dense(model.oiadmm_.dual_), D2)
    X = _window(rng, 30, 42)
    np.testing.assert_array_equal(model.score_samples(X), ref.score_samples(X))
    model.partial_fit(X)
    ref.partial_fit(X)
    np.testing.assert_array_equal(to_dense(model.components_), to_dense(ref.components_))
    np.testing.assert_array_equal(to_dense(model.oiadmm_.dual_), to_dense(ref.oiadmm_.dual_))


def test_term_order_does_not_change_the_model() -> None:
    """Permuting the terms permutes the dictionary's and the dual's rows, nothing else."""
    rng = np.random.default_rng(2)
    X, X2 = _window(rng, 50, 30), _window(rng, 40, 33)
    perm = rng.permutation(30)
    perm2 = np.r_[perm, 30, 31, 32]
    a = OnlineL1NoveltyDetector(n_components=8, dtype=np.float64).fit(X).partial_fit(X2)
    b = OnlineL1NoveltyDetector(n_components=8, dtype=np.float64).fit(X[:, perm])
    b.partial_fit(X2[:, perm2])
    np.testing.assert_allclose(to_dense(a.components_)[perm2], to_dense(b.components_), atol=1e-12)
    np.testing.assert_allclose(
        to_dense(a.oiadmm_.dual_)[perm2], to_dense(b.oiadmm_.dual_), atol=1e-12
    )
    np.testing.assert_allclose(a.score_samples(X2), b.score_samples(X2[:, perm2]), atol=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.0, 1.05, 2.0]), max_size=30),
    q=st.sampled_from([0.01, 0.07, 0.1, 1 / 3, 0.5, 1.0]),
    data=st.data(),
)
def test_top_q_flags_match_a_reference(scores: list[float], q: float, data) -> None:
    """The top ``ceil(q n)`` eligible scores, ties at the cut included; fewer than ``1 / q``
    eligible documents: the last threshold, kept."""
    model = OnlineL1NoveltyDetector(top_q=q)
    model.threshold_ = 0.77
    s = np.asarray(scores)
    ok = np.asarray(data.draw(st.lists(st.booleans(), min_size=s.size, max_size=s.size)), bool)
    flags, thr = model.flag_novel(s, ok)
    pool = s[ok]
    q_n = Fraction(repr(q)) * pool.size
    if q_n < 1:
        assert thr == model.threshold_ == 0.77
        np.testing.assert_array_equal(flags, ok & (s > 0.77))
        return
    cut = np.sort(pool)[::-1][math.ceil(q_n) - 1]
    np.testing.assert_array_equal(flags, ok & (s >= cut))
    assert model.threshold_ == thr
