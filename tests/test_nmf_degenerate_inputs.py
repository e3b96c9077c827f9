"""The topic models and their solvers on degenerate and extreme inputs: regressions."""

from __future__ import annotations

import numpy as np
import pytest
from sparsewatch.models.dynamic_nmf import DynamicNMF
from sparsewatch.models.nmf_online import MORNMF, ORNMF, WORNMF
from sparsewatch.models.projections import project_simplex_box


def _planted(seed: int = 0) -> np.ndarray:
    """Two planted topics on terms 0-2 and 3-5, 20 documents each."""
    planted = np.repeat([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], 20, axis=0)
    return np.random.default_rng(seed).random((40, 6)) * planted


def _fit(cls: type[ORNMF], X: np.ndarray, params: dict) -> np.ndarray:
    batch = {} if cls is MORNMF else {"batch_size": 10}
    return cls(2, random_state=0, **batch, **params).fit(X).components_


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("cls", [ORNMF, WORNMF, MORNMF])
@pytest.mark.parametrize("scale", [1e-30, 1e-15, 1e15, 1e30])
def test_online_nmf_bases_do_not_depend_on_the_scale_of_the_documents(cls, scale: float) -> None:
    """Algorithm 2's iterates do not depend on the scale of ``f_t`` (the step is the gradient
    over its running maximum norm, rule (9) is relative), but its float32 loop on the plain
    simplex overflowed or underflowed: the bases stayed at their initialisation (0.29 away from
    those learned from the same documents at scale 1), and ``1e20`` warned of NaN."""
    X = _planted()
    np.testing.assert_allclose(_fit(cls, X * scale, {}), _fit(cls, X, {}), atol=1e-6)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("scale", [1e-100, 1e100])
def test_online_nmf_bases_in_a_box_do_not_depend_on_the_scale_of_the_documents(
    scale: float,
) -> None:
    """The float64 loop of the box-constrained bases (``w_max < 1``) with Tikhonov's term: at
    ``1e100`` the squared gradient norm overflowed and the bases froze."""
    X = _planted()
    params = {"w_max": 0.9, "alpha_W": 1e-3 * scale**2}  # alpha_W prices W as X^2 does
    np.testing.assert_allclose(
        _fit(ORNMF, X * scale, params), _fit(ORNMF, X, {**params, "alpha_W": 1e-3}), atol=1e-9
    )


@pytest.mark.parametrize(
    ("dtype", "offset"),
    [(np.float32, 1e4), (np.float32, 1e30), (np.float64, 1e13), (np.float64, 1e300)],
)
@pytest.mark.parametrize(("lower", "upper"), [(0.0, 1.0), (0.01, 0.6), (0.05, np.inf)])
def test_simplex_box_projection_of_large_entries(
    dtype: type, offset: float, lower: float, upper: float
) -> None:
    """The projection depends only on the differences of a slice's entries, but ``v - theta``
    on the raw entries cancelled: entries near ``1e13`` (float64) or ``1e4`` (float32) came
    back off the set (sums of 0.49 or 1.2 for 1, entries over ``upper``). Against the same
    projection of the entries less their offset, one vector and the batched rows."""
    rng = np.random.default_rng(0)
    spread = np.round(rng.random(6) * 64) / 128  # exact differences at these offsets
    v = (dtype(offset) + spread.astype(dtype)).astype(dtype)
    expected = project_simplex_box(v.astype(np.float64) - float(v.max()), lower, upper)
    for got in (
        project_simplex_box(v, lower, upper),
        project_simplex_box(np.stack([v, v]), lower, upper, axis=1)[1],
    ):
        assert got.dtype == dtype
        tol = 1e-6 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, expected, atol=tol)
        assert abs(float(got.sum(dtype=np.float64)) - 1.0) <= tol


def test_simplex_box_projection_of_float32_entries_of_a_million() -> None:
    """float32 entries of ``1e6``: the threshold was cast to float32 before ``v - theta``
    (spacing 0.125 there), which gave ``[0, 0.6, 0.5, 0]``, summing to 1.1."""
    v = np.array([-1.2605454e6, 1.688657e6, 1.2878575e6, -3.4872716e5], dtype=np.float32)
    exact = np.array([0.0, 0.6, 0.4, 0.0])
    np.testing.assert_allclose(project_simplex_box(v, 0.0, 0.6), exact, atol=1e-6)
    np.testing.assert_allclose(
        project_simplex_box(v[:, None], 0.0, 0.6, axis=0)[:, 0], exact, atol=1e-6
    )


@pytest.mark.filterwarnings("error")
def test_dynamic_nmf_first_window_of_rank_below_the_topics_has_finite_topics() -> None:
    """Three documents, two of them empty, three initial topics: scikit-learn's NNDSVDa start
    divided by a zero norm and returned NaN factors (with a RuntimeWarning), so every topic was
    NaN at this and every later time point (events with NaN trends, no labels)."""
    X = np.zeros((3, 7))
    X[2, 6] = 0.16339592
    model = DynamicNMF(3).fit(X)
    for _ in range(2):
        assert np.isfinite(model.components_).all() and np.isfinite(model.weights_).all()
        np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
        assert model.labels_.tolist()[:2] == [-1, -1] and model.labels_[2] >= 0
        assert model.components_[model.labels_[2] == model.topic_ids_, 6] > 0.9
        model.partial_fit(X)
    assert all(np.isfinite(event.trend).all() for event in model.events_)
