"""The ``normalize`` option of the DL-OCSVM family: invariances, geometry, checkpoints, effect."""

from __future__ import annotations

import io

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import roc_auc_score
from sparsewatch.models._ocsvm_base import apply_normalizer, fit_normalizer
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM


def blobs(seed: int, n_in: int = 200, n_out: int = 12, m: int = 10) -> tuple:
    """Non-negative data (like min-max scaled ODDS sets): an inlier blob and outliers with
    larger feature values, the case where the raw linear OC-SVM on the codes is inverted."""
    rng = np.random.default_rng(seed)
    inliers = 0.3 + 0.05 * rng.standard_normal((n_in, m))
    outliers = 0.7 + 0.1 * rng.standard_normal((n_out, m))
    X = np.clip(np.vstack([inliers, outliers]), 0.0, None)
    y = np.r_[np.zeros(n_in), np.ones(n_out)]
    return X, y


MODELS = [
    DLOCSVM(n_components=8, n_nonzero_coefs=2),
    DPLOCSVM(n_components=8),
    KDLOCSVM(n_components=8, n_nonzero_coefs=2, n_landmarks=60),
    KDPLOCSVM(n_components=8, n_landmarks=60),
]


def test_defaults() -> None:
    assert DLOCSVM().normalize == "lift" and DPLOCSVM().normalize == "lift"
    assert KDLOCSVM().normalize is None and KDPLOCSVM().normalize is None


@pytest.mark.parametrize("cls", [DLOCSVM, DPLOCSVM])
def test_unknown_option_rejected(cls) -> None:
    X, _ = blobs(0)
    with pytest.raises(ValueError, match="normalize"):
        cls(normalize="zscore").fit(X)


def test_lift_geometry() -> None:
    """Unit rows; the extra coordinate is ``l / sqrt(||z||^2 + l^2)``, largest at the centre."""
    X, _ = blobs(1)
    mean, scale, lift = fit_normalizer(X, "lift")
    np.testing.assert_allclose(mean, X.mean(axis=0))
    Z = apply_normalizer(X, "lift", mean, scale, lift)
    assert Z.shape == (X.shape[0], X.shape[1] + 1)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, rtol=1e-12)
    dist = np.linalg.norm((X - mean) / scale, axis=1)
    np.testing.assert_allclose(Z[:, -1], lift / np.sqrt(dist**2 + lift**2), rtol=1e-12)
    assert np.isclose(np.median(dist), lift)
    centre = apply_normalizer(mean[None, :], "lift", mean, scale, lift)
    np.testing.assert_allclose(centre[0], np.eye(X.shape[1] + 1)[-1], atol=1e-12)


@pytest.mark.parametrize("cls", [DLOCSVM, DPLOCSVM])
def test_l2_is_invariant_to_row_scaling(cls) -> None:
    """With ``normalize="l2"`` only directions matter: rows rescaled by powers of two (exact in
    floating point) give bit-identical scores, both at training and at scoring time."""
    X, _ = blobs(2)
    rng = np.random.default_rng(0)
    k = 2.0 ** rng.integers(-3, 4, size=(X.shape[0], 1))
    a = cls(n_components=8, normalize="l2", random_state=0, contamination=0.1).fit(X)
    b = cls(n_components=8, normalize="l2", random_state=0, contamination=0.1).fit(X * k)
    np.testing.assert_array_equal(a.decision_scores_, b.decision_scores_)
    np.testing.assert_array_equal(a.decision_function(X * k[::-1]), a.decision_function(X))


@pytest.mark.parametrize("cls", [DLOCSVM, DPLOCSVM])
def test_lift_is_invariant_to_feature_affine_maps(cls) -> None:
    """With ``"lift"`` (z-score first) a positive per-feature affine map of the data leaves the
    scores unchanged up to rounding; without normalisation it does not."""
    X, _ = blobs(3)
    rng = np.random.default_rng(1)
    gain, shift = rng.uniform(0.5, 3.0, X.shape[1]), rng.uniform(-1.0, 1.0, X.shape[1])
    params = {"n_components": 8, "random_state": 0, "contamination": 0.1, "ocsvm_tol": 1e-12}
    a = cls(normalize="lift", **params).fit(X)
    b = cls(normalize="lift", **params).fit(X * gain + shift)
    # rounding: the z-scored features differ in their last bits, which the OC-SVM solution
    # carries into scores near 0 (the margin's support vectors) as absolute errors of about
    # 1e-9 of the scores' scale (2e-8 at a scale of 8 in a CI run: an atol of 1e-9 failed)
    scale = float(np.abs(a.decision_scores_).max())
    np.testing.assert_allclose(a.decision_scores_, b.decision_scores_, rtol=1e-6, atol=1e-7 * scale)
    raw_a = cls(normalize=None, **params).fit(X)
    raw_b = cls(normalize=None, **params).fit(X * gain + shift)
    assert not np.allclose(raw_a.decision_scores_, raw_b.decision_scores_, rtol=1e-3)


@pytest.mark.parametrize("cls", [DLOCSVM, DPLOCSVM])
@pytest.mark.parametrize("seed", [0, 1])
def test_lift_fixes_the_inverted_linear_ocsvm(cls, seed: int) -> None:
    """Outliers with larger (non-negative) features: raw codes rank them as the most normal
    rows (AUC < 0.5); the lifted signals rank them as anomalous."""
    X, y = blobs(seed)
    raw = cls(n_components=8, normalize=None, random_state=seed, contamination=0.05).fit(X)
    lifted = cls(n_components=8, normalize="lift", random_state=seed, contamination=0.05).fit(X)
    assert roc_auc_score(y, raw.decision_scores_) < 0.5
    assert roc_auc_score(y, lifted.decision_scores_) > 0.9


@pytest.mark.parametrize("normalize", [None, "l2", "lift"])
@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
def test_state_round_trip_with_normalisation(proto, normalize: str | None) -> None:
    X, _ = blobs(4)
    model = clone(proto).set_params(normalize=normalize, random_state=3).fit(X)
    state = model.get_state()
    assert {"normalize_mean_", "normalize_scale_", "normalize_lift_"} <= set(state)
    buf = io.BytesIO()
    np.savez(buf, **state)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as npz:
        restored = clone(proto).set_params(normalize=normalize, random_state=3)
        restored.set_state({k: npz[k] for k in npz.files})
    rows = X[::2] * 1.1 + 0.02
    np.testing.assert_array_equal(restored.decision_function(rows), model.decision_function(rows))
