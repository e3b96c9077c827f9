"""OIADMM (Algorithm 2) and the batch l1 dictionary update (Algorithm 6)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.l1_coding import l1_sparse_code
from sparsewatch.models.oiadmm import _DENSE_DUAL_FRACTION, OIADMM, l1_dictionary_update, psi_max
from sparsewatch.models.projections import project_l1_ball_nonneg

from tests.support.arrays import to_dense

M, K = 300, 10


def _initialize(
    A0: np.ndarray, dual: str, monkeypatch: pytest.MonkeyPatch, **params: object
) -> OIADMM:
    """An OIADMM whose dual stays sparse (``"sparse"``: no density switches to dense steps) or is
    dense from the start (``"dense"``)."""
    o = OIADMM(**params).initialize(A0)
    if dual == "sparse":
        monkeypatch.setattr("sparsewatch.models.oiadmm._DENSE_DUAL_FRACTION", 2.0)
    else:
        o.dual_ = np.zeros((A0.shape[0], 0), dtype=o.components_.dtype)
    return o


def _truth(rng: np.random.Generator) -> np.ndarray:
    A = np.zeros((M, K))
    for j in range(K):
        A[rng.choice(M, 15, replace=False), j] = rng.random(15)
    return A / A.sum(axis=0)


def _window(rng: np.random.Generator, A: np.ndarray, n: int) -> sp.csc_matrix:
    X = np.zeros((K, n))
    for i in range(n):
        X[rng.choice(K, 2, replace=False), i] = rng.random(2) + 0.2
    P = (A @ X) * (rng.random((M, n)) < 0.8)
    P += 0.02 * rng.random((M, n)) * (rng.random((M, n)) < 0.02)
    return sp.csc_matrix(P / P.sum(axis=0))


def _start(rng: np.random.Generator, A: np.ndarray) -> np.ndarray:
    noise = 0.02 * rng.random((M, K)) * (rng.random((M, K)) < 0.2)
    return project_l1_ball_nonneg(A * (rng.random((M, K)) < 0.7) + noise)


@pytest.mark.parametrize("dual", ["sparse", "dense"])
@pytest.mark.parametrize("w", [1.0, 0.3])
def test_step_matches_dense_formulas(w: float, dual: str) -> None:
    """Algorithm 2, one step, against the formulas on dense matrices; ``w < 1``: the weighted-l1
    prox ``Z - clip(Z, -w/b, 1/b)``. A 3%-full sparse dual takes the sparse step, a dense one
    the dense step (which then returns a dense dual)."""
    rng = np.random.default_rng(0)
    A_true = _truth(rng)
    P = _window(rng, A_true, 40)
    A0 = _start(rng, A_true)
    X = l1_sparse_code(P, A0, 0.1).codes.T.toarray()
    Delta0 = 0.3 * rng.standard_normal((M, 40)) * (rng.random((M, 40)) < 0.03)
    o = OIADMM(dtype=np.float64, over_weight=w).initialize(A0)
    o.dual_ = sp.csc_matrix(Delta0) if dual == "sparse" else Delta0.copy()
    o.partial_fit(P, sp.csr_matrix(X))
    assert isinstance(o.dual_, np.ndarray) == (dual == "dense")
    beta, tau = 5.0, 1.0 / (2 * np.linalg.eigvalsh(X @ X.T)[-1])
    Pd = P.toarray()
    Z = Pd - A0 @ X + Delta0 / beta
    E = np.sign(Z) * np.maximum(np.abs(Z) - np.where(Z > 0, 1, w) / beta, 0)  # weighted soft
    G = -(Pd - A0 @ X - E + Delta0 / beta) @ X.T
    A1 = project_l1_ball_nonneg(A0 - tau * G)
    D1 = Delta0 + beta * (Pd - A1 @ X - E)
    np.testing.assert_allclose(o.components_, A1, atol=1e-12)
    np.testing.assert_allclose(to_dense(o.dual_), D1, atol=1e-12)
    assert np.isclose(o.violation_[-1], np.linalg.norm(Pd - A1 @ X - E))


def test_violation_average_shrinks_and_objective_decreases_on_stationary_stream() -> None:
    """Theorem 4.7 behaviour: the running average of ||P_t - A_{t+1} X_t - E_{t+1}||_F falls.

    Stationary here means every window holds the same documents in the same columns (the dual's
    columns then keep referring to the same documents, as the analysis assumes)."""
    rng = np.random.default_rng(1)
    A_true = _truth(rng)
    P = _window(rng, A_true, 100)
    o = OIADMM(dtype=np.float64).initialize(_start(rng, A_true))
    objective = []
    for _ in range(40):
        res = l1_sparse_code(P, o.components_, 0.1, tol=1e-4)
        objective.append(res.objective.mean())
        o.partial_fit(P, res.codes.T)
    v = np.asarray(o.violation_)
    avg = np.cumsum(v) / np.arange(1, v.size + 1)
    assert avg[9] < 0.7 * avg[0] and avg[39] < 0.5 * avg[9]
    assert v[-1] < 0.1 * v[0]
    assert np.mean(objective[-5:]) < np.mean(objective[:5]) - 0.05
    assert np.mean(objective[-10:]) < np.mean(objective[10:20])  # still improving late
    assert np.max(np.diff(objective)) <= 0.01 * objective[0]  # no jumps up


def test_dense_steps_follow_sparse_steps_and_the_dual_turns_dense_when_full() -> None:
    """Over a stream of windows of changing sizes, steps on dense arrays give what steps on
    sparse ones give (float64), and a dual that fills up past the threshold switches to dense."""
    rng = np.random.default_rng(5)
    A_true = _truth(rng)
    A0 = _start(rng, A_true)
    runs = {}
    for dual in ("sparse", "dense"):
        with pytest.MonkeyPatch.context() as mp:
            runs[dual] = o = _initialize(A0, dual, mp, dtype=np.float64)
            for n in (40, 70, 25, 70):
                P = _window(np.random.default_rng(n), A_true, n)
                o.partial_fit(P, l1_sparse_code(P, o.components_, 0.1).codes.T)
    s, d = runs["sparse"], runs["dense"]
    np.testing.assert_allclose(d.components_, s.components_, atol=1e-10)
    np.testing.assert_allclose(to_dense(d.dual_), to_dense(s.dual_), atol=1e-10)
    np.testing.assert_allclose(d.violation_, s.violation_, rtol=1e-9)
    assert sp.issparse(s.dual_) and s.dual_.nnz > _DENSE_DUAL_FRACTION * np.prod(s.dual_.shape)
    o = OIADMM(dtype=np.float64).initialize(A0)
    o.dual_ = s.dual_.copy()
    P = _window(rng, A_true, 70)
    o.partial_fit(P, l1_sparse_code(P, o.components_, 0.1).codes.T)
    assert isinstance(o.dual_, np.ndarray)


@pytest.mark.parametrize("dual", ["sparse", "dense"])
def test_dual_follows_window_sizes_and_vocabulary(
    dual: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(2)
    A_true = _truth(rng)
    o = _initialize(_start(rng, A_true), dual, monkeypatch)
    for n in (50, 80, 30):
        P = _window(rng, A_true, n)
        o.partial_fit(P, l1_sparse_code(P, o.components_, 0.1).codes.T)
        assert o.dual_.shape == (M, n) and o.components_.dtype == np.float32
        assert sp.issparse(o.dual_) == (dual == "sparse") and o.dual_.dtype == np.float32
    kept = np.setdiff1d(np.arange(M), [3, 7, 100])
    before = to_dense(o.dual_)[kept]
    o.remap_rows(kept, 5)
    assert o.components_.shape == (M + 2, K) and o.dual_.shape == (M + 2, 30)
    np.testing.assert_array_equal(to_dense(o.dual_)[: M - 3], before)
    assert not to_dense(o.dual_)[M - 3 :].any() and not o.components_[M - 3 :].any()
    P = sp.vstack([_window(rng, A_true, 30)[kept], sp.random(5, 30, density=0.1)]).tocsc()
    o.partial_fit(P, l1_sparse_code(P, o.components_, 0.1).codes.T)
    assert np.all(o.components_ >= 0) and np.all(o.components_.sum(axis=0) <= 1 + 1e-5)
    # an empty window takes no step and keeps the dual the last window left
    dual, A, steps = to_dense(o.dual_).copy(), to_dense(o.components_).copy(), o.n_steps_
    o.partial_fit(sp.csc_matrix((M + 2, 0)), sp.csr_matrix((K, 0)))
    np.testing.assert_array_equal(to_dense(o.dual_), dual)
    np.testing.assert_array_equal(to_dense(o.components_), A)
    assert o.n_steps_ == steps


@pytest.mark.parametrize("dual", ["sparse", "dense"])
def test_state_round_trip(dual: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    A_true = _truth(rng)
    o = _initialize(_start(rng, A_true), dual, monkeypatch)
    P = _window(rng, A_true, 60)
    o.partial_fit(P, l1_sparse_code(P, o.components_, 0.1).codes.T)
    buf = io.BytesIO()
    np.savez(buf, **o.get_state())
    buf.seek(0)
    p = OIADMM().set_state(dict(np.load(buf, allow_pickle=False)))
    Q = _window(rng, A_true, 70)
    X = l1_sparse_code(Q, o.components_, 0.1).codes.T
    o.partial_fit(Q, X)
    p.partial_fit(Q, X)
    np.testing.assert_array_equal(o.components_, p.components_)
    np.testing.assert_array_equal(to_dense(o.dual_), to_dense(p.dual_))
    assert sp.issparse(p.dual_) == (dual == "sparse")
    old = {k: v for k, v in o.get_state().items() if not k.startswith("components_")}
    old["components"] = o.components_  # the dense layout of earlier checkpoints still loads
    np.testing.assert_array_equal(OIADMM().set_state(old).components_, o.components_)


def test_batch_update_reduces_l1_loss() -> None:
    rng = np.random.default_rng(4)
    A_true = _truth(rng)
    P = _window(rng, A_true, 120)
    A0 = _start(rng, A_true)
    X = l1_sparse_code(P, A0, 0.1).codes.T
    A1 = l1_dictionary_update(P, X, A0, n_iter=100)
    loss = lambda A: np.abs(P.toarray() - A @ X.toarray()).sum()  # noqa: E731
    assert loss(A1) < loss(A0)
    assert psi_max(X) > 0 and np.all(A1 >= 0) and np.all(A1.sum(axis=0) <= 1 + 1e-9)


@pytest.mark.parametrize("k", [50, 600])
def test_psi_max_is_the_largest_eigenvalue(k: int) -> None:
    """Dense below 200 atoms, Lanczos above: both give ``eigvalsh``'s largest eigenvalue of
    ``X X^T`` (codes with a few atoms per document, some atoms unused), deterministically."""
    rng = np.random.default_rng(k)
    X = sp.random(k, 900, density=6 / k, random_state=rng, format="csr")
    X = sp.diags((np.arange(k) >= k // 10).astype(float)) @ X  # a tenth of the atoms unused
    ref = np.linalg.eigvalsh((X @ X.T).toarray())[-1]
    assert psi_max(X) == pytest.approx(ref, rel=1e-10)
    assert psi_max(X) == psi_max(X.copy())
    assert psi_max(sp.csr_matrix((k, 900))) == 0.0


@pytest.mark.parametrize("products", ["sparse", "slabs"])
@pytest.mark.parametrize("dual", ["sparse", "dense"])
def test_sparse_dictionary_layout_takes_the_same_steps(
    dual: str, products: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sparse=True`` (CSC ``A``, the novelty detector's layout) gives the dense layout's
    dictionary, dual and violations (float64) through steps on both step paths (the dense one
    with ``A X`` as sparse products or a dense slab of atoms at a time), vocabulary growth and
    eviction, atoms added and replaced, and a checkpoint round trip."""
    cost = 0.0 if products == "sparse" else np.inf
    monkeypatch.setattr("sparsewatch.models.oiadmm._SPARSE_PRODUCT_COST", cost)
    rng = np.random.default_rng(6)
    A_true = _truth(rng)
    A0 = _start(rng, A_true)
    dense = _initialize(A0, dual, monkeypatch, dtype=np.float64)
    sparse = _initialize(A0, dual, monkeypatch, dtype=np.float64, sparse=True)
    assert isinstance(dense.components_, np.ndarray) and sp.isspmatrix_csc(sparse.components_)
    new_atoms = _start(np.random.default_rng(7), A_true)[:, :3]
    kept = np.setdiff1d(np.arange(M), [5, 9])
    for step, n in enumerate((40, 70, 25, 70)):
        P = _window(np.random.default_rng(n), A_true, n)
        if step >= 2:  # the vocabulary changed: two rows evicted, three new ones
            P = sp.vstack([P[kept], sp.random(3, n, density=0.1, random_state=n)]).tocsc()
        X = l1_sparse_code(P, dense.components_, 0.1).codes.T
        for o in (dense, sparse):
            o.partial_fit(P, X)
        if step == 0:
            for o in (dense, sparse):
                o.add_atoms(new_atoms).replace_atoms(np.array([1, 4]), new_atoms[:, :2] * 0.5)
        if step == 1:
            for o in (dense, sparse):
                o.remap_rows(kept, 3)
            new_atoms = new_atoms[kept]
        assert sp.isspmatrix_csc(sparse.components_)
        np.testing.assert_allclose(sparse.components_.toarray(), dense.components_, atol=1e-10)
        np.testing.assert_allclose(to_dense(sparse.dual_), to_dense(dense.dual_), atol=1e-10)
    np.testing.assert_allclose(sparse.violation_, dense.violation_, rtol=1e-9)
    A = sparse.components_
    assert A.nnz == np.count_nonzero(A.toarray()) < 0.5 * np.prod(A.shape)  # no stored zeros
    buf = io.BytesIO()
    np.savez(buf, **sparse.get_state())
    buf.seek(0)
    back = OIADMM(dtype=np.float64, sparse=True).set_state(dict(np.load(buf, allow_pickle=False)))
    assert sp.isspmatrix_csc(back.components_)
    np.testing.assert_array_equal(back.components_.toarray(), A.toarray())


def test_batch_update_keeps_the_layout() -> None:
    rng = np.random.default_rng(8)
    A_true = _truth(rng)
    A0 = _start(rng, A_true)
    P = _window(rng, A_true, 60)
    X = l1_sparse_code(P, A0, 0.1).codes.T
    dense = l1_dictionary_update(P, X, A0, n_iter=10)
    sparse = l1_dictionary_update(P, X, sp.csc_matrix(A0), n_iter=10)
    assert sp.issparse(sparse) and isinstance(dense, np.ndarray)
    np.testing.assert_allclose(sparse.toarray(), dense, atol=1e-12)


def test_a_window_over_fewer_terms_or_other_codes_is_a_clear_error() -> None:
    """A window over fewer terms than the dictionary failed deep in the step with numpy's
    "inconsistent shapes"; codes of the wrong shape likewise."""
    rng = np.random.default_rng(0)
    A = project_l1_ball_nonneg(rng.random((40, 5)))
    P, X = sp.random(40, 12, density=0.3, random_state=0), rng.random((5, 12))
    with pytest.raises(ValueError, match=r"P has 30 rows .* the dictionary has 40"):
        OIADMM().initialize(A).partial_fit(P.tocsr()[:30], X)
    with pytest.raises(ValueError, match=r"X must be \(atoms, documents\) = \(5, 12\)"):
        OIADMM().initialize(A).partial_fit(P, X[:4])
    grown = OIADMM().initialize(A).partial_fit(sp.vstack([P, sp.random(3, 12)]), X)
    assert grown.components_.shape == (43, 5)  # more terms: the vocabulary grew, rows appended
