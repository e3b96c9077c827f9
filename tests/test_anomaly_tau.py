"""``tau`` of DPL-/KDPL-OCSVM: default ``"auto"`` (``0.02 N``); a number is the paper's weight."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sparsewatch.models.dpl_ocsvm import DPLOCSVM, TAU_PER_SAMPLE
from sparsewatch.models.kernel_dl_ocsvm import KDPLOCSVM

MODELS = [DPLOCSVM(n_components=6), KDPLOCSVM(n_components=6, n_landmarks=40)]


def data(seed: int, n: int = 90, m: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, m)) @ rng.standard_normal((m, m))


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
def test_auto_tau_is_per_sample_and_equals_the_explicit_value(proto) -> None:
    """``"auto"`` is the default and fits exactly what ``tau = 0.02 N`` fits, for any ``N``."""
    assert proto.get_params()["tau"] == "auto"
    for n in (60, 120):
        X = data(n, n=n)
        auto = clone(proto).set_params(random_state=0).fit(X)
        assert auto.tau_ == pytest.approx(TAU_PER_SAMPLE * n)
        fixed = clone(proto).set_params(tau=TAU_PER_SAMPLE * n, random_state=0).fit(X)
        assert fixed.tau_ == pytest.approx(TAU_PER_SAMPLE * n)
        np.testing.assert_allclose(auto.analysis_, fixed.analysis_)
        np.testing.assert_allclose(auto.decision_scores_, fixed.decision_scores_)


def test_numeric_tau_is_the_papers_absolute_weight() -> None:
    X = data(1)
    model = DPLOCSVM(n_components=6, tau=0.5, random_state=0).fit(X)
    assert model.tau_ == 0.5


@pytest.mark.parametrize("tau", ["scale", 0.0, -1.0])
def test_invalid_tau_rejected(tau) -> None:
    with pytest.raises(ValueError, match="tau must be"):
        DPLOCSVM(n_components=4, tau=tau).fit(data(2))


def test_ridge_keeps_the_analysis_rows_well_conditioned() -> None:
    """The reason for the per-sample default: with the paper's small absolute ``tau`` on many
    signals, ``P`` tends to the pseudo-inverse of coherent data-initialised atoms and its rows are
    far from orthonormal (the OC-SVM on ``P y`` then works in a distorted metric); the per-sample
    ridge keeps ``P P^T`` better conditioned."""
    rng = np.random.default_rng(5)
    X = np.abs(rng.standard_normal((400, 12))) + 0.5  # positive rows: coherent data atoms
    weak = DPLOCSVM(n_components=8, tau=1e-3, normalize=None, random_state=0).fit(X)
    auto = DPLOCSVM(n_components=8, normalize=None, random_state=0).fit(X)
    assert np.linalg.cond(auto.analysis_ @ auto.analysis_.T) < np.linalg.cond(
        weak.analysis_ @ weak.analysis_.T
    )
