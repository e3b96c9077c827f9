"""``contamination=None``: the share of training rows flagged follows ``nu``.

KDL-OCSVM's narrow default kernel gives most training rows codes of norm 1e-4 or less next to a
few of norm 1; libsvm's tolerance, scaled to the mean squared code norm, was larger than the
decision values of the short rows that decide the boundary, and decided the signs of the training
scores: ``nu = 0.05`` flagged 42 % of the training rows and ``nu = 0.3`` 20 % (74 % and 33 % at
``n_iter=0``). The tolerance is now refined on the support vectors' squared norms.
"""

from __future__ import annotations

import numpy as np
import pytest
from sparsewatch.models._ocsvm_base import fit_linear_ocsvm
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

NUS = [0.05, 0.1, 0.3]


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((300, 5))


@pytest.mark.parametrize("nu", NUS)
@pytest.mark.parametrize("n_iter", [0, None], ids=["n_iter=0", "default"])
@pytest.mark.parametrize("cls", [KDLOCSVM, DPLOCSVM, KDPLOCSVM])
def test_flagged_training_share_is_close_to_nu(
    cls: type, n_iter: int | None, nu: float, rows: np.ndarray
) -> None:
    params = {} if n_iter is None else {"n_iter": n_iter}
    model = cls(random_state=0, nu=nu, contamination=None, **params).fit(rows)
    assert abs(model.labels_.mean() - nu) <= 0.05


@pytest.mark.parametrize("nu", NUS)
def test_dl_flagged_training_share_is_close_to_nu_on_its_initial_codes(
    nu: float, rows: np.ndarray
) -> None:
    """DL-OCSVM at ``n_iter=0`` (after sweeps its OC-SVM is fitted on the sweep's codes and the
    rows are scored on their OMP codes, which differ: see DLOCSVM's ``contamination``)."""
    model = DLOCSVM(random_state=0, nu=nu, contamination=None, n_iter=0).fit(rows)
    assert abs(model.labels_.mean() - nu) <= 0.05


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("nu", NUS)
def test_linear_ocsvm_on_rows_of_very_different_lengths_keeps_the_nu_property(
    seed: int, nu: float
) -> None:
    """290 short rows (norm ~1e-4) decide the boundary next to 10 rows of norm ~1: the share of
    rows outside it is ``nu`` (it was 0.09 to 0.96, by the tolerance)."""
    rng = np.random.default_rng(seed)
    Z = np.vstack(
        [1e-4 * np.abs(rng.standard_normal((290, 8))), np.abs(rng.standard_normal((10, 8)))]
    )
    svm, lam = fit_linear_ocsvm(Z, nu, None)
    assert abs(float((svm.decision(Z) < 0.0).mean()) - nu) <= 0.02
    np.testing.assert_allclose(lam.sum(), 1.0)
