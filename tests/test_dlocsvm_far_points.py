"""DL-OCSVM on rows with many duplicates: distinct initial atoms and bounded OMP codes.

The data initialisation picked random rows and added 0.1 % noise to separate repeated picks: on
data with many identical rows every atom was that row plus noise (coherence 0.9998), OMP coded a
unit signal outside its direction with coefficients in the hundreds, and the linear OC-SVM on
those codes scored a clear outlier as the most normal row (99 identical rows and one row of
ones: outlier score -25830 against -2.7e-6 for the others, nothing flagged), and the anomaly
worker's model flagged about half of the rows far from such data.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from sklearn.svm import OneClassSVM
from sparsewatch.consumers.anomaly_worker import build_model
from sparsewatch.models import _ocsvm_base as base
from sparsewatch.models.dl_ocsvm import DLOCSVM, init_dictionary

from sparsewatch.config import AnomalyConfig


def _coherence(D: np.ndarray) -> float:
    G = np.abs(D.T @ D)
    np.fill_diagonal(G, 0.0)
    return float(G.max())


@pytest.mark.parametrize("params", [{}, {"n_iter": 0}, {"n_components": 8}])
def test_one_outlier_among_identical_rows_is_the_most_anomalous(params: dict) -> None:
    X = np.vstack([np.zeros((99, 3)), np.ones((1, 3))])
    model = DLOCSVM(**{"n_components": 4, "n_iter": 2, "random_state": 0, **params}).fit(X)
    scores = model.decision_scores_
    assert scores[-1] > scores[:-1].max()
    np.testing.assert_array_equal(np.flatnonzero(model.labels_), [99])
    # as scikit-learn's linear OC-SVM on the same lifted rows ranks it
    Z = model._features(X)
    ref = -OneClassSVM(kernel="linear", nu=0.5).fit(Z).decision_function(Z)
    assert ref[-1] > ref[:-1].max()


@pytest.mark.parametrize("init", ["data", "random"])
def test_initial_atoms_are_unit_distinct_and_at_most_0_99_coherent(init: str) -> None:
    """Three distinct directions repeated, one negated, one nearly parallel copy and zero rows:
    one atom per direction, the rest Gaussian, no pair more coherent than 0.99."""
    rng = np.random.default_rng(0)
    distinct = rng.standard_normal((3, 6))
    rows = np.vstack(
        [
            np.repeat(distinct, 30, axis=0),
            -distinct[:1],
            distinct[1:2] + 1e-6 * rng.standard_normal((1, 6)),
            np.zeros((5, 6)),
        ]
    )
    D = init_dictionary(rows.T, 8, init, np.random.default_rng(1))
    assert D.shape == (6, 8)
    np.testing.assert_allclose(np.linalg.norm(D, axis=0), 1.0)
    assert _coherence(D) <= 0.99
    if init == "data":
        unit = distinct / np.linalg.norm(distinct, axis=1, keepdims=True)
        assert (np.abs(unit @ D).max(axis=1) > 1.0 - 1e-12).all()  # each direction is an atom


def test_more_atoms_than_a_low_dimension_holds_apart_still_initialises() -> None:
    """32 atoms in 2 dimensions cannot be 0.99 apart: the least coherent draws are kept."""
    rows = np.random.default_rng(0).standard_normal((50, 2))
    for init in ("data", "random"):
        D = init_dictionary(rows.T, 32, init, np.random.default_rng(0))
        assert D.shape == (2, 32)
        np.testing.assert_allclose(np.linalg.norm(D, axis=0), 1.0)


def test_omp_codes_are_bounded_over_nearly_parallel_atoms() -> None:
    """Atoms within 1e-3 of one direction (coherence about 0.9999) and unit signals outside
    their span: the codes stay within ``||y|| / (2 sqrt(OMP_RIDGE))`` (about 16 ||y||); plain
    OMP gave coefficients in the hundreds."""
    rng = np.random.default_rng(1)
    direction = rng.standard_normal((5, 1))
    D = direction / np.linalg.norm(direction) + 1e-3 * rng.standard_normal((5, 4))
    D /= np.linalg.norm(D, axis=0)
    assert _coherence(D) > 0.999
    Y = rng.standard_normal((5, 200))
    Y /= np.linalg.norm(Y, axis=0)
    codes = base.omp_codes(D, Y, 3)
    assert np.linalg.norm(codes, axis=0).max() <= 1.0 / (2.0 * np.sqrt(base.OMP_RIDGE)) <= 16.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_far_rows_are_flagged_at_least_as_often_as_by_the_linear_ocsvm_on_the_lifted_rows(
    seed: int,
) -> None:
    """The anomaly worker's model on standardised rows 99 % of which are identical: rows 4, 16
    and 1000 standard deviations away in random directions are flagged at least as often as
    scikit-learn's linear OC-SVM on the same lifted rows (thresholded at the same training
    quantile) flags them: all of them. About half were flagged."""
    rng = np.random.default_rng(seed)
    X = np.vstack([np.zeros((990, 4)), rng.standard_normal((10, 4))])
    Xs = (X - X.mean(axis=0)) / X.std(axis=0)
    model = build_model(AnomalyConfig(), 2).fit(Xs)
    Z = model._features(Xs)
    ref = OneClassSVM(kernel="linear", nu=0.5).fit(Z)
    ref_threshold = np.percentile(-ref.decision_function(Z), 100.0 * (1.0 - model.contamination))
    for distance in (4.0, 16.0, 1000.0):
        directions = rng.standard_normal((500, 4))
        far = distance * directions / np.linalg.norm(directions, axis=1, keepdims=True)
        linear = float((-ref.decision_function(model._features(far)) > ref_threshold).mean())
        assert model.predict(far).mean() >= linear


def test_the_state_keeps_the_ridge_and_an_older_state_scores_with_plain_omp() -> None:
    """``omp_ridge_`` round-trips through ``np.savez``/``np.load(allow_pickle=False)``; a state
    saved before it (no such key) is restored with ridge 0, the plain OMP its scores and
    ``threshold_`` came from."""
    X = np.random.default_rng(0).standard_normal((60, 4))
    model = DLOCSVM(n_components=6, n_iter=2, random_state=0).fit(X)
    buffer = io.BytesIO()
    np.savez(buffer, **model.get_state())
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as saved:
        state = dict(saved)
    assert float(state["omp_ridge_"]) == base.OMP_RIDGE
    restored = DLOCSVM(n_components=6, n_iter=2, random_state=0).set_state(state)
    np.testing.assert_array_equal(restored.decision_function(X), model.decision_function(X))
    del state["omp_ridge_"]
    older = DLOCSVM(n_components=6, n_iter=2, random_state=0).set_state(state)
    assert older.omp_ridge_ == 0.0
    plain = base.omp_codes(model.dictionary_, model._features(X).T, 3, ridge=0.0).T
    np.testing.assert_allclose(
        older.decision_function(X), -model.ocsvm_.decision(plain * model.row_scale_)
    )
