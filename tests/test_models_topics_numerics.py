"""Numerics of the topic models, projections and OIADMM: keep_index validation, the stopping-rule
mass after a vocabulary eviction, zero-length projections, OIADMM's checkpointed diagnostic and
input checks."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sparsewatch.models.dynamic_nmf import DynamicNMF
from sparsewatch.models.nmf_online import MORNMF, ORNMF, WORNMF
from sparsewatch.models.oiadmm import OIADMM
from sparsewatch.models.projections import (
    project_l1_ball_nonneg,
    project_simplex,
    project_simplex_box,
    simplex_box_threshold,
)

N_TERMS = 6


def _data(n: int = 40, m: int = N_TERMS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.random((n, m)) * (rng.random((n, m)) < 0.7)


def _fitted(cls: type) -> ORNMF | DynamicNMF:
    if cls is DynamicNMF:
        return DynamicNMF(n_initial_topics=2).fit(_data())
    return cls(2, batch_size=10, random_state=0).fit(_data())


def _state_copy(model: ORNMF | DynamicNMF) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in model.get_state().items()}


TOPIC_MODELS = [ORNMF, MORNMF, WORNMF, DynamicNMF]


# ---------------------------------------------------------------- 1. keep_index validation
@pytest.mark.parametrize("cls", TOPIC_MODELS)
@pytest.mark.parametrize(
    ("keep", "n_features", "match"),
    [
        ([0, 1, 9], N_TERMS, "outside 0..5"),  # IndexError
        ([-1, 0], N_TERMS, "outside 0..5"),  # wrapped onto the last term silently
        ([0, 0, 1], N_TERMS, "duplicate"),  # one term copied into two rows silently
        (np.array([0.0, 1.0]), N_TERMS, "integers"),  # IndexError
        ([True, False, True, True, False, True], N_TERMS, "boolean mask"),  # broadcast error
        ([[0, 1]], N_TERMS, "1-D"),  # accepted by OR-NMF, broadcast error in DynamicNMF
        ([0, 1, 2, 3], 3, "more than n_features"),  # broadcast error in DynamicNMF
        (None, 4, "below the model's 6 terms"),  # broadcast error in DynamicNMF
        ([], 0, "n_features must be >= 1"),  # 1 / 0 in the rescaling
        ([0], 2.5, "n_features must be an integer"),
    ],
)
def test_resize_features_refuses_invalid_keep_index_before_changing(
    cls: type, keep: object, n_features: object, match: str
) -> None:
    model = _fitted(cls)
    before = _state_copy(model)
    with pytest.raises(ValueError, match=match):
        model.resize_features(n_features, keep)
    after = model.get_state()
    assert after.keys() == before.keys()
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)


@pytest.mark.parametrize("cls", TOPIC_MODELS)
def test_resize_features_accepts_any_order_of_distinct_terms(cls: type) -> None:
    """A permutation is valid: term ``keep[j]`` moves to position ``j`` (and mass is kept)."""
    model = _fitted(cls)
    old = np.array(model.components_, copy=True)
    keep = np.array([5, 3, 1, 0, 2, 4], dtype=np.int32)
    model.resize_features(N_TERMS + 2, keep)
    np.testing.assert_allclose(model.components_[:, :N_TERMS], old[:, keep], atol=1e-12)
    np.testing.assert_array_equal(model.components_[:, N_TERMS:], 0.0)
    assert model.n_features_in_ == N_TERMS + 2


# ---------------------------------------------------------------- 3. sq_ after an eviction
def _half_sq(X: np.ndarray) -> float:
    return 0.5 * float(np.sum(X * X))


@pytest.mark.parametrize("sparse", [False, True])
def test_mor_nmf_sq_drops_the_evicted_terms_mass(sparse: bool) -> None:
    """``sq_`` (``1/2 sum ||v||^2`` of the ring, in stopping rule (9)) kept the mass of evicted
    terms: after evicting half the vocabulary it was about twice the ring documents' mass on the
    terms the model still has."""
    rng = np.random.default_rng(1)
    m = 40
    windows = [rng.random((15, m)) * (rng.random((15, m)) < 0.3) for _ in range(6)]
    model = MORNMF(3, buffer_size=4, random_state=0)
    for X in windows:
        model.partial_fit(sp.csr_matrix(X) if sparse else X)
    keep = np.sort(rng.choice(m, m // 2, replace=False))
    model.resize_features(m + 3, keep)
    ring = np.vstack(windows[-4:])[:, keep]
    assert model.sq_ == pytest.approx(_half_sq(ring), rel=1e-12)
    # the next window (over the new vocabulary) evicts the oldest slot
    new = np.hstack([windows[0][:, keep], rng.random((15, m + 3 - keep.size))])
    model.partial_fit(new)
    expected = _half_sq(np.vstack([w[:, keep] for w in windows[-3:]])) + _half_sq(new)
    assert model.sq_ == pytest.approx(expected, rel=1e-12)


def test_or_nmf_sq_drops_the_evicted_terms_mass() -> None:
    X = _data(60, 20, seed=2)
    model = ORNMF(3, batch_size=20, random_state=0).fit(X)
    keep = np.array([0, 3, 7, 11, 19])
    model.resize_features(8, keep)
    assert model.sq_ == pytest.approx(_half_sq(X[:, keep]), rel=1e-12)


@pytest.mark.parametrize("cls", [ORNMF, MORNMF])
def test_sq_is_unchanged_by_growth_and_reordering(cls: type) -> None:
    model = cls(3, batch_size=20, random_state=0).fit(_data(60, 10, seed=3))
    sq = model.sq_
    model.resize_features(14)
    assert model.sq_ == sq
    model.resize_features(14, np.arange(14)[::-1])
    assert model.sq_ == sq


@pytest.mark.parametrize("cls", [ORNMF, MORNMF])
def test_state_without_per_term_mass_still_restores(cls: type) -> None:
    """A checkpoint written before the per-term record of ``sq_`` restores; an eviction then
    leaves its ``sq_`` as it was (the old behaviour), and the round trip keeps the record."""
    model = cls(3, batch_size=20, random_state=0).fit(_data(60, 10, seed=4))
    state = model.get_state()
    restored = clone(model).set_state(state)
    np.testing.assert_array_equal(restored.transform(_data(5, 10)), model.transform(_data(5, 10)))
    legacy = {k: v for k, v in state.items() if k not in ("sq_terms_", "ring_sq_terms_")}
    old = clone(model).set_state(legacy)
    old.resize_features(10, np.arange(5))
    assert old.sq_ == pytest.approx(model.sq_, rel=1e-15)
    buffer = io.BytesIO()
    np.savez(buffer, **old.get_state())
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as saved:
        assert clone(model).set_state(dict(saved)).sq_ == old.sq_


# ---------------------------------------------------------------- 4. zero-length projections
@pytest.mark.parametrize("method", ["sort", "pivot"])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 3)])
def test_l1_ball_projection_of_zero_length_slices_is_empty(
    shape: tuple[int, ...], method: str
) -> None:
    out = project_l1_ball_nonneg(np.zeros(shape, dtype=np.float32), method=method)
    assert out.shape == shape and out.dtype == np.float32


@pytest.mark.parametrize("method", ["sort", "pivot"])
@pytest.mark.parametrize("shape", [(0,), (0, 3)])
def test_simplex_projection_of_zero_length_slices(shape: tuple[int, ...], method: str) -> None:
    """Mass 0: the empty result; mass > 0: the set is empty, said plainly (numpy raised "cannot
    reshape" or "argmax of an empty sequence")."""
    assert project_simplex(np.zeros(shape), z=0.0, method=method).shape == shape
    with pytest.raises(ValueError, match="length 0"):
        project_simplex(np.zeros(shape), method=method)


@pytest.mark.parametrize("shape", [(0,), (0, 3)])
def test_simplex_box_projection_of_zero_length_slices(shape: tuple[int, ...]) -> None:
    assert project_simplex_box(np.zeros(shape), 0.0, 1.0, z=0.0).shape == shape
    with pytest.raises(ValueError, match=r"length 0|empty set"):
        project_simplex_box(np.zeros(shape), 0.0, 1.0)
    assert simplex_box_threshold(np.zeros(0), np.zeros(0), np.zeros(0), z=0.0) == 0.0


def test_zero_slices_of_positive_length_still_project() -> None:
    """No slice at all (the other axis is empty) stays a no-op, as before."""
    assert project_simplex(np.zeros((3, 0))).shape == (3, 0)
    assert project_simplex_box(np.zeros((3, 0)), 0.0, 1.0).shape == (3, 0)


# ---------------------------------------------------------------- 5. OIADMM
def _oiadmm_window(seed: int = 0) -> tuple[np.ndarray, sp.csc_matrix, sp.csc_matrix]:
    rng = np.random.default_rng(seed)
    A0 = rng.random((20, 4))
    P = sp.random(20, 12, density=0.3, random_state=seed + 1, format="csc")
    X = sp.random(4, 12, density=0.5, random_state=seed + 2, format="csc")
    return A0, P, X


@pytest.mark.parametrize("sparse", [False, True])
def test_oiadmm_violation_survives_a_checkpoint(sparse: bool) -> None:
    A0, P, X = _oiadmm_window()
    model = OIADMM(sparse=sparse).initialize(A0)
    for _ in range(3):
        model.partial_fit(P, X)
    buffer = io.BytesIO()
    np.savez(buffer, **model.get_state())
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as saved:
        restored = OIADMM(sparse=sparse).set_state(dict(saved))
    assert restored.violation_ == model.violation_
    assert len(restored.violation_) == 3
    restored.partial_fit(P, X)
    model.partial_fit(P, X)
    assert restored.violation_ == model.violation_


def test_oiadmm_state_without_violation_restores_empty() -> None:
    A0, P, X = _oiadmm_window()
    model = OIADMM().initialize(A0).partial_fit(P, X)
    state = {k: v for k, v in model.get_state().items() if k != "violation"}
    assert OIADMM().set_state(state).violation_ == []


@pytest.mark.parametrize("bad", ["P", "X"])
def test_oiadmm_refuses_non_finite_input_before_changing(bad: str) -> None:
    """A NaN in the window made the dictionary NaN for good, without an error."""
    A0, P, X = _oiadmm_window()
    model = OIADMM().initialize(A0).partial_fit(P, X)
    before = {k: np.array(v, copy=True) for k, v in model.get_state().items()}
    P2, X2 = P.copy(), X.copy()
    (P2 if bad == "P" else X2).data[0] = np.nan
    with pytest.raises(ValueError, match=f"{bad} has NaN"):
        model.partial_fit(P2, X2)
    for name, value in model.get_state().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_oiadmm_get_state_before_initialize_is_not_fitted() -> None:
    with pytest.raises(NotFittedError):
        OIADMM().get_state()


# ---------------------------------------------------------------- replace_components
def test_replace_no_components_is_a_no_op() -> None:
    model = _fitted(MORNMF)
    before = _state_copy(model)
    model.replace_components([], np.zeros((0, N_TERMS)))
    for name, value in model.get_state().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
    with pytest.raises(ValueError, match="no topic index"):
        model.replace_components([], np.ones((1, N_TERMS)))
