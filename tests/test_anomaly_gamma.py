"""Kernel width of KDL-/KDPL-OCSVM (``gamma_scale`` times scikit-learn's ``"scale"``) and
KDL-OCSVM's dictionary size.

KDL-OCSVM defaults to ``KDL_GAMMA_SCALE`` (10) x ``"scale"`` and ``KDL_N_COMPONENTS`` (8) atoms,
KDPL-OCSVM to ``"scale"`` itself and 32 atom pairs; an explicit ``gamma`` overrides the scale
factor. The reason for KDL-OCSVM's narrower kernel is the coherence of its kernel atoms
(``D^T D = A^T K A``, Section 5.1): tested below.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sparsewatch.models.dl_ocsvm import init_dictionary
from sparsewatch.models.kernel_dl_ocsvm import (
    KDL_GAMMA_SCALE,
    KDL_N_COMPONENTS,
    KDLOCSVM,
    KDPLOCSVM,
)

MODELS = [
    KDLOCSVM(n_components=8, n_nonzero_coefs=2, n_landmarks=60),
    KDPLOCSVM(n_components=8, n_landmarks=60),
]


def data(seed: int, n: int = 120, m: int = 6) -> np.ndarray:
    """Non-negative rows in [0, 1] (min-max scaled, as in the benchmark) around a few centres."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(size=(4, m))
    X = centres[rng.integers(0, 4, n)] + 0.15 * rng.standard_normal((n, m))
    return (X - X.min(axis=0)) / np.ptp(X, axis=0)


def test_defaults() -> None:
    assert KDL_GAMMA_SCALE == 10.0 and KDL_N_COMPONENTS == 8
    assert KDLOCSVM().get_params()["gamma_scale"] == KDL_GAMMA_SCALE
    assert KDLOCSVM().get_params()["n_components"] == KDL_N_COMPONENTS
    assert KDPLOCSVM().get_params()["gamma_scale"] == 1.0
    assert KDPLOCSVM().get_params()["n_components"] == 32
    assert KDLOCSVM().gamma is None and KDPLOCSVM().gamma is None
    model = KDLOCSVM(n_landmarks=60, random_state=0).fit(data(3))
    assert model.dictionary_.shape[1] == KDL_N_COMPONENTS
    assert np.count_nonzero(model._codes(data(4)[:10]), axis=1).max() <= 3


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("scale", [1.0, 3.0, 10.0])
def test_gamma_scale_multiplies_sklearn_scale_and_equals_explicit_gamma(proto, scale) -> None:
    """``gamma=None`` fits ``gamma_scale / (n_features * X.var())``, and fits exactly what that
    number passed as ``gamma`` fits (which then ignores ``gamma_scale``)."""
    X = data(0)
    expected = scale / (X.shape[1] * X.var())
    auto = clone(proto).set_params(gamma_scale=scale, random_state=0).fit(X)
    assert float(auto.gamma_) == pytest.approx(expected)
    fixed = clone(proto).set_params(gamma=expected, gamma_scale=123.0, random_state=0).fit(X)
    assert float(fixed.gamma_) == pytest.approx(expected)
    np.testing.assert_allclose(auto.decision_scores_, fixed.decision_scores_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("scale", [0.0, -1.0])
def test_invalid_gamma_scale_rejected(scale) -> None:
    with pytest.raises(ValueError, match="gamma_scale must be > 0"):
        KDLOCSVM(n_components=4, gamma_scale=scale).fit(data(1))


def mean_atom_coherence(model: KDLOCSVM, X: np.ndarray) -> float:
    """Mean |<d_i, d_j>| (i != j) of data-initialised kernel atoms, ``D^T D = Z^T Z``."""
    Y = model._features(X).T
    Z = init_dictionary(Y, 16, "data", np.random.default_rng(0))
    G = np.abs(Z.T @ Z)
    return float(G[~np.eye(G.shape[0], dtype=bool)].mean())


def test_default_kdl_kernel_gives_much_less_coherent_atoms() -> None:
    """At ``"scale"`` the RBF values between rows are large and positive, so kernel atoms picked
    from the data are coherent; the default 10 x ``"scale"`` makes them nearly orthogonal."""
    X = data(2, n=200)
    wide = KDLOCSVM(n_components=8, gamma_scale=1.0, n_iter=0, random_state=0).fit(X)
    narrow = KDLOCSVM(n_components=8, n_iter=0, random_state=0).fit(X)
    coh_wide, coh_narrow = mean_atom_coherence(wide, X), mean_atom_coherence(narrow, X)
    assert coh_wide > 0.15
    assert coh_narrow < 0.25 * coh_wide
