"""OR-NMF, MOR-NMF and WOR-NMF: feasibility, memory, recovery, extensions, vocabulary, state."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sparsewatch.models.nmf_online import MORNMF, ORNMF, WORNMF


def _planted(
    seed: int = 0, m: int = 120, r: int = 4, n: int = 1500
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    W0 = rng.random((m, r)) ** 4
    W0 /= W0.sum(axis=0)
    H0 = rng.random((n, r)) * (rng.random((n, r)) < 0.5) * 10.0
    return H0 @ W0.T + 1e-3 * rng.random((n, m)), W0


def _matched_cosines(W: np.ndarray, W0: np.ndarray) -> np.ndarray:
    C = (W0 / np.linalg.norm(W0, axis=0)).T @ (W / np.linalg.norm(W, axis=0))
    rows, cols = linear_sum_assignment(-C)
    return C[rows, cols]


@pytest.mark.parametrize(
    ("model", "n_samples"),
    [
        (ORNMF(4, batch_size=1, random_state=0), 600),
        (WORNMF(4, batch_size=50, random_state=0), 1500),
        (MORNMF(4, batch_size=50, buffer_size=8, random_state=0), 1500),
    ],
)
def test_planted_bases_are_recovered(model: ORNMF, n_samples: int) -> None:
    X, W0 = _planted()
    model.partial_fit(X[:n_samples])
    assert _matched_cosines(model.components_.T, W0).min() > 0.9


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"w_max": 0.05},
        {"w_min": 1e-4, "w_max": 0.2, "alpha_W": 0.5},
        {"alpha_h_l1": 0.1, "h_max": 3.0},
    ],
)
def test_averaged_iterates_stay_feasible(params: dict[str, float]) -> None:
    X, _ = _planted(1)
    model = WORNMF(4, batch_size=100, random_state=0, **params)
    lo, hi = params.get("w_min", 0.0), params.get("w_max", 1.0)
    for start in range(0, 800, 100):
        model.partial_fit(X[start : start + 100])
        W = model.components_
        np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-9)
        assert W.min() >= lo - 1e-12
        assert W.max() <= hi + 1e-12
    H = model.transform(X[:200])
    assert H.min() >= 0.0
    if "h_max" in params:
        assert H.max() <= params["h_max"] + 1e-12


def test_mor_nmf_memory_is_constant() -> None:
    X, _ = _planted(2)
    model = MORNMF(4, batch_size=20, buffer_size=5, random_state=0)
    model.partial_fit(X[:100])
    sizes = {k: v.nbytes for k, v in model.get_state().items()}
    model.partial_fit(X[100:1500])
    assert {k: v.nbytes for k, v in model.get_state().items()} == sizes
    assert model.ring_n_.sum() == 5 * 20
    np.testing.assert_array_equal(model.A_, model.ring_A_.sum(axis=0))


def test_mor_nmf_with_a_buffer_longer_than_the_stream_is_or_nmf() -> None:
    X, _ = _planted(3)
    common = {"batch_size": 30, "random_state": 0}
    mor = MORNMF(4, buffer_size=100, **common).partial_fit(X[:600])
    orn = ORNMF(4, **common).partial_fit(X[:600])
    np.testing.assert_allclose(mor.components_, orn.components_, rtol=1e-10, atol=1e-12)


def test_mor_nmf_forgets_an_old_regime() -> None:
    """After a switch of planted bases, the buffered model follows the new ones."""
    X1, _ = _planted(4)
    X2, W2 = _planted(5)
    mor = MORNMF(4, batch_size=50, buffer_size=4, random_state=0)
    mor.partial_fit(X1).partial_fit(X2)
    assert _matched_cosines(mor.components_.T, W2).min() > 0.9


def test_itakura_saito_recovers_planted_bases() -> None:
    rng = np.random.default_rng(6)
    m, r, n = 60, 3, 1200
    W0 = rng.random((m, r)) ** 3 + 1e-3
    W0 /= W0.sum(axis=0)
    H0 = rng.gamma(1.0, 10.0, (n, r))
    X = (H0 @ W0.T) * rng.gamma(50.0, 1.0 / 50.0, (n, m))
    model = WORNMF(r, batch_size=100, beta_loss="itakura-saito", random_state=0)
    first = clone(model).partial_fit(X[:100]).objective(X)
    model.partial_fit(X)
    assert model.objective(X) < first
    assert _matched_cosines(model.components_.T, W0).min() > 0.9
    with pytest.raises(ValueError, match="positive"):
        model.partial_fit(np.zeros((2, m)))


def test_sparse_input_grows_and_evicts_vocabulary() -> None:
    X, _ = _planted(7)
    Xs = sp.csr_matrix(X)
    model = MORNMF(4, random_state=0).partial_fit(Xs[:300])
    H = model.transform(Xs[300:400])
    wider = sp.hstack([Xs[300:400], sp.csr_matrix((100, 5))]).tocsr()
    np.testing.assert_allclose(model.transform(wider), H)
    model.partial_fit(sp.hstack([Xs[400:700], sp.csr_matrix((300, 5))]).tocsr())
    assert model.n_features_in_ == 125
    assert model.components_.shape == (4, 125)
    assert model.ring_B_.shape[1] == 125
    keep = np.arange(0, 125, 2)
    before = model.components_[:, keep].copy()
    model.resize_features(80, keep_index=keep)
    assert model.components_.shape == (4, 80)
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
    ratio = model.components_[:, : keep.size] / np.maximum(before, 1e-300)
    np.testing.assert_allclose(
        ratio[before > 1e-12],
        np.repeat(1.0 / before.sum(axis=1), (before > 1e-12).sum(axis=1)),
        rtol=1e-9,
    )
    assert np.all(model.components_[:, keep.size :] == 0)
    labels = model.predict(sp.csr_matrix(np.ones((3, 80))))
    assert labels.shape == (3,)


@pytest.mark.parametrize(
    "model",
    [
        ORNMF(4, batch_size=25, random_state=0),
        MORNMF(4, batch_size=25, buffer_size=3, random_state=0),
        WORNMF(4, batch_size=40, beta_loss="itakura-saito", random_state=0),
    ],
)
def test_state_round_trip_is_bit_identical(model: ORNMF) -> None:
    X, _ = _planted(8)
    X = X + 1e-2
    model.partial_fit(X[:300])
    buffer = io.BytesIO()
    np.savez(buffer, **model.get_state())
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as data:
        restored = clone(model).set_state(dict(data))
    for m in (model, restored):
        m.partial_fit(X[300:500])
    np.testing.assert_array_equal(restored.components_, model.components_)
    np.testing.assert_array_equal(restored.transform(X[500:600]), model.transform(X[500:600]))
    assert restored.get_params() == model.get_params()


def test_horizon_schedule_restarts() -> None:
    model = ORNMF(2, horizon=4)
    thetas = []
    for t in range(1, 10):
        model.n_steps_ = t
        thetas.append(model._theta())
    assert thetas[0] == pytest.approx(0.1)
    assert thetas[4] == pytest.approx(0.1)
    assert thetas[3] == pytest.approx(0.1 * np.cos(3 * np.pi / 8))
    assert all(x > 0 for x in thetas)


@pytest.mark.parametrize(
    ("loss", "alpha_W"), [("frobenius", 0.0), ("frobenius", 0.7), ("itakura-saito", 0.0)]
)
def test_algorithm_2_gradient_matches_finite_differences(loss: str, alpha_W: float) -> None:
    """``f_t`` and its gradient (Frobenius + Tikhonov; majorised IS, preconditioned by W^2)."""
    X, _ = _planted(9, m=15, r=3, n=60)
    model = WORNMF(3, batch_size=30, beta_loss=loss, alpha_W=alpha_W, random_state=0)
    model.partial_fit(X + 0.1)
    rng = np.random.default_rng(0)
    W = model.components_.T + 0.01 * rng.random((15, 3))
    grad, value = model._grad_obj(W, 60)
    if loss == "itakura-saito":
        grad = grad / W**2
    E = rng.standard_normal(W.shape)
    step = 1e-6
    numeric = (model._grad_obj(W + step * E, 60)[1] - model._grad_obj(W - step * E, 60)[1]) / (
        2 * step
    )
    assert numeric == pytest.approx(float(np.sum(grad * E)), rel=1e-5, abs=1e-9)
    assert np.isfinite(value)


@pytest.mark.parametrize(
    ("params", "atol"),
    [({}, 2e-6), ({"w_max": 0.1}, 1e-12), ({"alpha_W": 0.3}, 2e-6)],
)
def test_fast_algorithm_2_matches_the_reference_loop(params: dict[str, float], atol: float) -> None:
    """The Frobenius fast path (W^T layout, objective tracked by linearity; float32 on the plain
    simplex) takes the same robust SA steps as the plain float64 loop of Algorithm 2."""
    X, _ = _planted(10)
    model = WORNMF(4, batch_size=100, tau=0.0, max_inner_iter=6, random_state=0, **params)
    model.partial_fit(X[:500])
    W = model.components_.T.copy()
    reference = model._update_bases(W)
    fast = model._update_bases_frobenius()
    np.testing.assert_allclose(fast, reference.T, atol=atol)
    np.testing.assert_allclose(fast.sum(axis=1), 1.0, atol=1e-12)


def test_stopping_rule_9_stops_both_paths_at_the_same_iteration() -> None:
    X, _ = _planted(11)
    model = WORNMF(4, batch_size=100, random_state=0).partial_fit(X[:400])
    W = model.components_.T.copy()
    np.testing.assert_allclose(model._update_bases_frobenius(), model._update_bases(W).T, atol=2e-6)


def test_mor_nmf_incremental_statistics_equal_the_ring_sums() -> None:
    """``B_`` is updated by differences between turns of the ring and re-summed at each turn."""
    X, _ = _planted(12)
    model = MORNMF(4, batch_size=20, buffer_size=6, random_state=0)
    model.partial_fit(X[:400])  # 20 steps: mid-turn
    assert model.ring_pos_ == 2
    np.testing.assert_allclose(model.B_, model.ring_B_.sum(axis=0), rtol=1e-12, atol=1e-14)
    model.partial_fit(X[400:720])  # 36 steps: the ring just turned
    assert model.ring_pos_ == 0
    np.testing.assert_array_equal(model.B_, model.ring_B_.sum(axis=0))


def test_sparse_and_dense_input_learn_the_same_bases() -> None:
    X, _ = _planted(13)
    cut = np.quantile(X, 0.7)
    X[np.less(X, cut)] = 0.0
    dense = MORNMF(4, batch_size=50, random_state=0).partial_fit(X[:600])
    sparse = MORNMF(4, batch_size=50, random_state=0).partial_fit(sp.csr_matrix(X[:600]))
    np.testing.assert_allclose(sparse.components_, dense.components_, atol=1e-10)
    np.testing.assert_allclose(
        sparse.transform(sp.csr_matrix(X[600:700])), dense.transform(X[600:700]), atol=1e-9
    )


@pytest.mark.parametrize("model", [ORNMF(3), WORNMF(3), MORNMF(3)])
def test_nothing_is_learned_before_samples_with_features(model: ORNMF) -> None:
    """An empty vocabulary (0 features) or no samples: no bases can be built (0.01 / m raised
    ZeroDivisionError), so the model stays unfitted until a usable batch arrives."""
    model = clone(model)
    for shape in ((5, 0), (0, 0), (0, 12)):
        assert model.partial_fit(sp.csr_matrix(shape)) is model
        assert not hasattr(model, "components_")
    X, _ = _planted(m=12, r=3, n=40)
    model.partial_fit(X)
    assert model.components_.shape == (3, 12) and model.n_features_in_ == 12
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)


@pytest.mark.parametrize(
    "model",
    [ORNMF(3, batch_size=None, random_state=0), MORNMF(3, buffer_size=3, random_state=0)],
    ids=["ORNMF", "MORNMF"],
)
def test_non_finite_input_is_rejected_before_any_state_changes(model: ORNMF) -> None:
    """NaN/inf (dense or stored sparse entries) raise ``ValueError`` and change nothing: they
    were accumulated into ``B_``/``sq_`` and froze the bases for good. ``fit`` on bad data keeps
    the fitted state it would have reset."""
    rng = np.random.default_rng(0)
    X = rng.random((30, 12))
    fitted, twin = clone(model).fit(X), clone(model).fit(X)
    before = {k: v.copy() for k, v in fitted.get_state().items()}
    nan_dense = X[:4].copy()
    nan_dense[0, 3] = np.nan
    inf_sparse = sp.csr_matrix(np.hstack([X[:4], X[:4, :2]]))  # wider: would grow the terms
    inf_sparse.data[5] = -np.inf
    for bad in (nan_dense, inf_sparse):
        for call in (fitted.partial_fit, fitted.fit, fitted.transform):
            with pytest.raises(ValueError, match=r"NaN|infinity"):
                call(bad)
        after = fitted.get_state()
        assert after.keys() == before.keys()
        for name, value in before.items():
            np.testing.assert_array_equal(after[name], value, err_msg=name)
    batch = rng.random((30, 12))
    fitted.partial_fit(batch)
    twin.partial_fit(batch)
    np.testing.assert_array_equal(fitted.components_, twin.components_)
    assert np.isfinite(fitted.B_).all()
    with pytest.raises(ValueError, match=r"NaN|infinity"):
        clone(model).partial_fit(nan_dense)


@pytest.mark.parametrize("model", [ORNMF(2), WORNMF(2), MORNMF(2)], ids=lambda m: type(m).__name__)
def test_transform_before_fit_raises_not_fitted(model: ORNMF) -> None:
    X = np.random.default_rng(0).random((5, 4))
    for call in (model.transform, model.predict, model.objective):
        with pytest.raises(NotFittedError):
            call(X)
