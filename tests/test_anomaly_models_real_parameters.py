"""The DL-OCSVM family: inputs and parameters that crashed or were fitted silently."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

from tests.support.ocsvm_cycling import CYCLING_CODES


def _data(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((40, 4))


@pytest.mark.parametrize("cls", [KDLOCSVM, KDPLOCSVM])
@pytest.mark.parametrize("kernel", ["rbf", "poly", "linear"])
def test_kernel_width_when_the_normalised_rows_do_not_vary(cls, kernel) -> None:
    """``normalize="l2"`` maps every row of one positive feature to 1: ``gamma=None`` divided
    by ``X.var() = 0`` (ZeroDivisionError). scikit-learn's "scale" is then 1."""
    X = np.arange(1.0, 21.0).reshape(-1, 1)
    model = cls(n_components=4, n_iter=1, kernel=kernel, normalize="l2", random_state=0).fit(X)
    assert model.gamma_ == pytest.approx(model.gamma_scale)
    assert np.isfinite(model.decision_function(X)).all()


@pytest.mark.parametrize(
    ("cls", "params", "message"),
    [
        (DLOCSVM, {"beta": -1.0}, r"beta must be in \[0, inf\), got -1.0"),  # fitted silently
        (DLOCSVM, {"beta": float("nan")}, "beta must be"),  # "SVD did not converge"
        (KDLOCSVM, {"beta": -0.5}, "beta must be"),
        (DLOCSVM, {"alpha": -1.0}, r"alpha must be in \[0, inf\)"),  # fitted silently
        (DPLOCSVM, {"alpha": float("nan")}, "alpha must be"),
        (KDPLOCSVM, {"alpha": -2.0}, "alpha must be"),
        (DPLOCSVM, {"tau": float("nan")}, "tau must be"),  # libsvm: "'tol' ... Got nan"
        (DPLOCSVM, {"tau": float("inf")}, "tau must be"),
        (KDLOCSVM, {"gamma_scale": float("nan")}, "gamma_scale must be > 0"),  # OMP: 0 atoms
        (KDLOCSVM, {"gamma": 0.0}, r"gamma must be None or in \(0, inf\)"),  # K = 1
        (KDPLOCSVM, {"gamma": -1.0}, "gamma must be"),  # fitted silently
        (KDLOCSVM, {"gamma": float("inf")}, "gamma must be"),  # OMP: 0 atoms
        (KDLOCSVM, {"eig_floor": 1.0}, r"eig_floor must be in \[0, 1\)"),  # OMP: 0 atoms
        (KDPLOCSVM, {"eig_floor": float("nan")}, "eig_floor must be"),
        (KDLOCSVM, {"eig_floor": -0.1}, "eig_floor must be"),
    ],
)
def test_real_parameters_out_of_range_are_refused_by_name(cls, params, message) -> None:
    with pytest.raises(ValueError, match=message):
        cls(n_components=4, n_iter=1, random_state=0, **params).fit(_data())


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (DLOCSVM, {"beta": 0.0, "alpha": 0.0}),
        (DPLOCSVM, {"alpha": 0.0, "tau": 1e-6}),
        (KDLOCSVM, {"gamma": 0.5, "eig_floor": 0.0}),
        (KDPLOCSVM, {"gamma": np.float64(2.0), "eig_floor": 1e-3}),
    ],
)
def test_boundary_values_of_the_real_parameters_are_accepted(cls, params) -> None:
    model = cls(n_components=4, n_iter=1, random_state=0, **params).fit(_data())
    assert np.isfinite(model.decision_scores_).all()


def test_the_ocsvm_fit_returns_on_rows_where_libsvm_cycles() -> None:
    """libsvm's solver cycled for ever on these rows (``max_iter=-1``): the anomaly worker's
    refit never returned, and again after every restart. Run in a child process so that the
    unbounded solver fails the test instead of hanging it."""
    code = (
        "import warnings, numpy as np\n"
        "from sparsewatch.models._ocsvm_base import fit_linear_ocsvm\n"
        f"Z = {CYCLING_CODES}\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    svm, lam = fit_linear_ocsvm(Z, 0.5, 1e-3)\n"
        "assert np.isfinite(svm.decision(Z)).all() and abs(lam.sum() - 1.0) < 1e-6\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=120, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
