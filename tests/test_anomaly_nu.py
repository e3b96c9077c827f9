"""``nu`` of the DL-OCSVM family: default 0.5, decoupled from ``contamination`` (the threshold)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

MODELS = [
    DLOCSVM(n_components=8, n_nonzero_coefs=2),
    DPLOCSVM(n_components=8),
    KDLOCSVM(n_components=8, n_nonzero_coefs=2, n_landmarks=60),
    KDPLOCSVM(n_components=8, n_landmarks=60),
]


def data(seed: int, n: int = 150, m: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, m)) @ rng.standard_normal((m, m))


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize(("nu", "used"), [(0.5, 0.5), (0.3, 0.3), (None, 0.04)])
def test_nu_shapes_the_svm_and_contamination_sets_the_threshold(proto, nu, used) -> None:
    """libsvm's dual coefficients sum to ``nu N`` and at least ``nu N`` rows are support vectors,
    so they reveal the ``nu`` that was fitted; ``None`` falls back to ``contamination`` (the seed
    paper's choice). Whatever ``nu``, the training labels flag the ``contamination`` fraction."""
    X = data(0)
    c = 0.04
    model = clone(proto).set_params(nu=nu, contamination=c, random_state=0).fit(X)
    n = X.shape[0]
    assert proto.get_params()["nu"] == 0.5
    np.testing.assert_allclose(model.ocsvm_dual_coef_.sum(), used * n, rtol=1e-6)
    assert model.ocsvm_dual_coef_.size >= np.floor(used * n)
    assert abs(model.labels_.mean() - c) <= 1.0 / n + 1e-12


@pytest.mark.parametrize("cls", [DLOCSVM, DPLOCSVM])
def test_invalid_nu_rejected(cls) -> None:
    with pytest.raises(ValueError, match="nu must be in"):
        cls(n_components=4, nu=1.5).fit(data(1))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"nu": 1.0}, r"nu must be in \(0, 1\), got 1.0"),  # libsvm: dual coefficients not finite
        ({"n_iter": -1}, "n_iter must be an integer >= 0, got -1"),  # was 0 sweeps, silently
        ({"n_components": 0}, "n_components must be an integer >= 1, got 0"),
        ({"power_iter": 0}, "power_iter must be an integer >= 1"),
    ],
)
@pytest.mark.parametrize("cls", [DLOCSVM, DPLOCSVM, KDLOCSVM])
def test_out_of_range_parameters_are_refused_by_name(cls, params, message) -> None:
    with pytest.raises(ValueError, match=message):
        cls(**{"n_components": 4, **params}).fit(data(1))


def test_zero_landmarks_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="n_landmarks must be an integer >= 1, got 0"):
        KDLOCSVM(n_components=4, n_landmarks=0).fit(data(1))
