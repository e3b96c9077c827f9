"""OR-NMF, MOR-NMF and WOR-NMF: feasibility, memory, recovery, extensions, vocabulary, state."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment, minimize
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sparsewatch.models.nmf_online import MORNMF, ORNMF, WORNMF, _is_majoriser_minimum
from sparsewatch.models.robust_sa import robust_sa, robust_sa_frobenius


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


@pytest.mark.parametrize("alpha_W", [0.0, 0.7])
def test_algorithm_2_gradient_matches_finite_differences(alpha_W: float) -> None:
    """``f_t`` and its gradient (Frobenius + Tikhonov)."""
    X, _ = _planted(9, m=15, r=3, n=60)
    model = WORNMF(3, batch_size=30, alpha_W=alpha_W, random_state=0)
    model.partial_fit(X + 0.1)
    rng = np.random.default_rng(0)
    W = model.components_.T + 0.01 * rng.random((15, 3))
    grad, value = model._grad_obj(W, 60)
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


def _is_documents(seed: int = 0, m: int = 12, r: int = 3, n: int = 200) -> np.ndarray:
    """Positive documents (Itakura-Saito): a planted product with gamma noise."""
    rng = np.random.default_rng(seed)
    W0 = rng.random((m, r)) + 0.05
    W0 /= W0.sum(axis=0)
    return (rng.random((n, r)) @ W0.T) * rng.gamma(2.0, 0.5, (n, m)) + 1e-3


def _is_majoriser(model: ORNMF, W: np.ndarray) -> float:
    """``f_t`` of OR-NMF-IS at bases ``W`` (``m x r``): ``(1/n) sum(P W + Q / W)`` plus the
    Tikhonov term ``alpha_W/2 ||W||^2``."""
    P, Q, n = model.A_, model.B_, model.n_samples_seen_
    return float(np.sum(P * W + Q / W)) / n + 0.5 * model.alpha_W * float(np.sum(W * W))


def _is_reference_minimum(model: ORNMF, start: np.ndarray) -> np.ndarray:
    """The majoriser's minimum over the feasible set by SLSQP, column by column."""
    P, Q, n, a = model.A_, model.B_, model.n_samples_seen_, model.alpha_W
    lo, hi = model._w_min(), min(model.w_max, 1.0)
    m = P.shape[0]
    out = np.empty_like(start)
    for k in range(P.shape[1]):
        p, q = P[:, k], Q[:, k]
        result = minimize(
            lambda w, p=p, q=q: float(np.sum(p * w + q / w)) / n + 0.5 * a * float(w @ w),
            np.clip(start[:, k], lo, hi),
            jac=lambda w, p=p, q=q: (p - q / w**2) / n + a * w,
            method="SLSQP",
            bounds=[(lo, hi)] * m,
            constraints=[
                {"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(m)}
            ],
            options={"ftol": 1e-15, "maxiter": 1000},
        )
        assert result.success
        out[:, k] = result.x
    return out


@pytest.mark.parametrize(
    "params",
    [{}, {"alpha_W": 0.5}, {"w_max": 0.15}, {"w_min": 0.05, "w_max": 0.2, "alpha_W": 2.0}],
    ids=["simplex", "alpha_W", "w_max", "box+alpha_W"],
)
def test_itakura_saito_bases_minimise_the_majoriser(params: dict[str, float]) -> None:
    """Review 52, item 1: a step of OR-NMF-IS went along ``W^2 P - Q`` and projected Euclidean
    onto the feasible set (``alpha_W`` unscaled), whose fixed points are not KKT points of the
    majoriser ``(1/n) sum(Q / W + P W) + alpha_W/2 ||W||^2``: one step could increase it
    (23.90232 -> 23.90379; minimum 23.87979). The step now minimises it exactly: never above
    the bases it starts from, and equal to SLSQP's constrained minimum."""
    X = _is_documents()
    model = ORNMF(3, batch_size=50, beta_loss="itakura-saito", random_state=0, **params)
    model.fit(X[:150])
    before = model.components_.T.copy()
    model.partial_fit(X[150:])  # one step: the majoriser now has the statistics of 200 samples
    after = model.components_.T
    reference = _is_reference_minimum(model, before)
    lo, hi = model._w_min(), min(model.w_max, 1.0)
    np.testing.assert_allclose(after.sum(axis=0), 1.0, atol=1e-12)
    assert after.min() >= lo and after.max() <= hi
    np.testing.assert_allclose(reference.sum(axis=0), 1.0, atol=1e-9)
    assert _is_majoriser(model, after) <= _is_majoriser(model, before)
    assert _is_majoriser(model, after) == pytest.approx(_is_majoriser(model, reference), rel=1e-6)
    assert _is_majoriser(model, after) <= _is_majoriser(model, reference) * (1 + 1e-12)


def test_itakura_saito_majoriser_columns_without_statistics_stay_feasible() -> None:
    """Degenerate columns of the exact minimiser: no statistics at all (a constant objective,
    the column is kept), or ``Q = 0`` (a constant ``g`` per entry: the mass goes to the entries of
    smallest ``P``, split so the column sums to 1)."""
    W = np.full((4, 3), 0.25)
    W[:, 0] = [0.1, 0.2, 0.3, 0.4]
    P = np.zeros((4, 3))
    Q = np.zeros((4, 3))
    P[:, 1] = [1.0, 1.0, 2.0, 3.0]
    P[:, 2], Q[:, 2] = 1.0, [1.0, 4.0, 9.0, 16.0]
    out = _is_majoriser_minimum(P, Q, 0.0, 1e-9, 1.0, W)
    np.testing.assert_array_equal(out[:, 0], W[:, 0])
    np.testing.assert_allclose(out[:, 1], [0.5, 0.5, 1e-9, 1e-9], atol=1e-8)
    np.testing.assert_allclose(out.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(out[:, 2], np.array([1.0, 2.0, 3.0, 4.0]) / 10.0, rtol=1e-12)


def test_itakura_saito_is_scale_invariant_down_to_tiny_documents() -> None:
    """Review 52, item 4: documents of entries ``1e-170`` (``y^2`` underflows) gave NaN codes
    and statistics with warnings only; the IS divergence is scale-invariant, so the model of
    ``X * 1e-170`` (or ``1e150``) is the model of ``X``."""
    X = _is_documents(1, m=8, n=30)
    ref = ORNMF(3, batch_size=10, beta_loss="itakura-saito", random_state=0).fit(X)
    for scale in (1e-170, 1e150):
        model = ORNMF(3, batch_size=10, beta_loss="itakura-saito", random_state=0)
        with np.errstate(over="raise", divide="raise", invalid="raise"):
            model.fit(X * scale)
            H = model.transform(X * scale)
        assert np.isfinite(model.A_).all() and np.isfinite(model.B_).all()
        np.testing.assert_allclose(model.components_, ref.components_, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(H / scale, ref.transform(X), rtol=1e-6)
        assert model.objective(X * scale) == pytest.approx(ref.objective(X), rel=1e-6)


def test_algorithm_2_refuses_a_gradient_that_is_not_finite() -> None:
    """Review 52, item 4: ``max(M_*, nan)`` kept ``M_* = 0`` and Algorithm 2 stopped as at a
    stationary point: NaN statistics froze the bases silently."""
    W = np.full((4, 2), 0.25)

    def grad_obj(V: np.ndarray) -> tuple[np.ndarray, float]:
        return np.full_like(V, np.nan), np.nan

    with pytest.raises(ValueError, match=r"not finite|norm nan"):
        robust_sa(W, grad_obj, lambda V: V, theta=0.1, tau=0.0, max_iter=5)
    A = np.array([[1.0, np.nan], [np.nan, 1.0]])
    B = np.ones((4, 2))
    for float32 in (True, False):
        with pytest.raises(ValueError, match="norm nan"):
            robust_sa_frobenius(
                W.T.copy(),
                A,
                B,
                1.0,
                4,
                alpha_W=0.0,
                theta=0.1,
                tau=0.0,
                max_iter=5,
                project_rows=lambda V: V,
                float32=float32,
            )


def test_objective_of_sparse_documents_needs_no_dense_product() -> None:
    """Review 52, item 5: the Frobenius objective of sparse ``X`` built the dense ``n x m``
    product ``H W^T``; it is now taken from ``X W`` (same value), so a shape whose dense product
    would take 160 GB works."""
    X = sp.random(300, 500, density=0.02, format="csr", random_state=0)
    model = MORNMF(4, random_state=0).partial_fit(X)
    assert model.objective(X) == pytest.approx(model.objective(X.toarray()), rel=1e-10)
    rng = np.random.default_rng(1)
    rows, cols = rng.integers(0, 200_000, 4000), rng.integers(0, 100_000, 4000)
    big = sp.csr_matrix((rng.random(4000), (rows, cols)), shape=(200_000, 100_000))
    wide = MORNMF(3, random_state=0).partial_fit(big[:2000].tocsr())
    value = wide.objective(big)
    H = wide.transform(big)
    W = wide.components_.T
    expected = 0.5 * (
        big.multiply(big).sum() - 2 * np.sum((big @ W) * H) + np.sum((H.T @ H) * (W.T @ W))
    )
    assert value == pytest.approx(expected / big.shape[0], rel=1e-10)


@pytest.mark.parametrize("cls", [ORNMF, WORNMF, MORNMF])
def test_output_feature_names_and_set_output(cls: type[ORNMF]) -> None:
    """Review 52, item 6: no ``get_feature_names_out``, so ``set_output`` could not name the
    columns of ``transform``."""
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(0).random((20, 6))
    model = cls(n_components=2, batch_size=10, random_state=0)
    with pytest.raises(NotFittedError):
        model.get_feature_names_out()
    model.fit(X)
    names = [f"{cls.__name__.lower()}{i}" for i in range(2)]
    assert list(model.get_feature_names_out()) == names
    out = model.set_output(transform="pandas").transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == names
    np.testing.assert_allclose(out.to_numpy(), model.set_output(transform="default").transform(X))
