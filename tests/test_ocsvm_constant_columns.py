"""Constant features are accepted, as scikit-learn's ``OneClassSVM`` accepts them.

They were refused ("drop them before fitting") although every normalisation handles them: the
``"lift"`` z-score gives them the scale 1 (0 for the training rows), ``"l2"`` and ``None`` code
them as any other coordinate. Data in which every feature is constant are still refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

MODELS = [
    DLOCSVM(n_components=6, n_iter=2, random_state=0),
    DPLOCSVM(n_components=6, n_iter=2, random_state=0),
    KDLOCSVM(n_components=6, n_iter=2, random_state=0),
    KDPLOCSVM(n_components=6, n_iter=2, random_state=0),
]
IDS = [type(m).__name__ for m in MODELS]


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((80, 3))


def _with_constant(X: np.ndarray, value: float = 2.5) -> np.ndarray:
    return np.column_stack([X, np.full(len(X), value)])


@pytest.mark.parametrize("normalize", ["lift", "l2", None])
@pytest.mark.parametrize("proto", MODELS, ids=IDS)
def test_a_constant_feature_is_accepted(proto, normalize: str | None, rows: np.ndarray) -> None:
    X = _with_constant(rows)
    model = clone(proto).set_params(normalize=normalize).fit(X)
    assert np.isfinite(model.decision_scores_).all()
    np.testing.assert_array_equal(model.predict(X), model.labels_)
    assert abs(model.labels_.mean() - 0.1) <= 0.02


@pytest.mark.parametrize(
    "proto",
    [*MODELS[:2], *(clone(m).set_params(gamma=0.5) for m in MODELS[2:])],
    ids=IDS,
)
def test_a_constant_feature_changes_nothing(proto, rows: np.ndarray) -> None:
    """DL-/DPL-OCSVM under ``"lift"`` (their default): a constant feature is 0 for every
    training row, the model learned is the one without it, and rows at the constant score as
    without it. So for the kernel variants with a given ``gamma`` (distances do not change;
    the data-scaled ``gamma=None``, scikit-learn's ``"scale"``, counts the constant feature in
    the variance of all entries, as scikit-learn's does)."""
    without = clone(proto).fit(rows)
    model = clone(proto).fit(_with_constant(rows))
    # up to rounding: the products gain a zero term, which BLAS sums in another order (its
    # kernels picked for the CPU), and the OC-SVM solver, stopped at its tolerance, carries the
    # last bits into the scores; an AMD EPYC machine moved DL-OCSVM's by 4.5e-8 of their scale
    # (1.7e-7 on 0.015: an absolute 1e-9 failed). A model using the constant moves them by far more.
    atol = 1e-6 * float(np.abs(without.decision_scores_).max())
    np.testing.assert_allclose(
        model.decision_scores_, without.decision_scores_, rtol=1e-6, atol=atol
    )
    probe = np.random.default_rng(1).standard_normal((20, 3))
    np.testing.assert_allclose(
        model.decision_function(_with_constant(probe)),
        without.decision_function(probe),
        rtol=1e-6,
        atol=atol,
    )


@pytest.mark.parametrize("proto", MODELS, ids=IDS)
def test_lift_flags_a_row_off_the_constant(proto, rows: np.ndarray) -> None:
    """A row at the training centre but 40 units off the constant is an outlier."""
    model = clone(proto).fit(_with_constant(rows))
    off = np.array([[0.0, 0.0, 0.0, 2.5 + 40.0]])
    assert model.predict(off)[0] == 1
    assert model.decision_function(off)[0] > model.decision_scores_.max()


@pytest.mark.parametrize("normalize", ["lift", "l2", None])
@pytest.mark.parametrize("proto", MODELS, ids=IDS)
def test_every_feature_constant_is_a_clear_error(proto, normalize: str | None) -> None:
    model = clone(proto).set_params(normalize=normalize)
    with pytest.raises(ValueError, match="every feature is constant over the 50 training rows"):
        model.fit(np.full((50, 3), 1.5))
