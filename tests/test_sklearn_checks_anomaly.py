"""scikit-learn's ``check_estimator`` suite on the DL-/DPL-/KDL-/KDPL-OCSVM anomaly detectors.

The detectors keep PyOD's output convention (``predict``: 1 = outlier, 0 = inlier;
``decision_function``: higher = more anomalous), which the benchmarks and the pipeline read; the
two checks that hard-code scikit-learn's ``-1``/``+1`` labels are expected to fail for that
reason only, which ``test_outlier_checks_pass_in_scikit_learn_convention`` shows by running them
on a thin adapter to scikit-learn's convention.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, OutlierMixin, clone
from sklearn.utils.estimator_checks import (
    check_outliers_fit_predict,
    check_outliers_train,
    parametrize_with_checks,
)
from sparsewatch.models._ocsvm_base import OCSVMDetectorBase
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

ESTIMATORS = [
    DLOCSVM(n_components=4, n_iter=2, random_state=0),
    DPLOCSVM(n_components=4, n_iter=2, random_state=0),
    KDLOCSVM(n_components=4, n_iter=2, n_landmarks=30, random_state=0),
    KDPLOCSVM(n_components=4, n_iter=2, n_landmarks=30, random_state=0),
]

PYOD_LABELS = (
    "predict/fit_predict return 1 for outliers and 0 for inliers and decision_function is "
    "higher = more anomalous (PyOD convention, read by the benchmarks and the pipeline); the "
    "check requires scikit-learn's -1/+1 labels and decision_function >= 0 for inliers"
)


def _expected_failed_checks(estimator: OCSVMDetectorBase) -> dict[str, str]:
    return {"check_outliers_fit_predict": PYOD_LABELS, "check_outliers_train": PYOD_LABELS}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check, monkeypatch: pytest.MonkeyPatch) -> None:
    # check_array_api_input (numpy namespace) runs only with SciPy's array API switch on
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    check(estimator)


class _SklearnConvention(OutlierMixin, BaseEstimator):
    """A detector seen through scikit-learn's convention: ``-1`` = outlier, ``decision_function``
    = ``threshold_ - ours`` (negative = outlier), ``score_samples`` = ``-ours``."""

    def __init__(self, detector: OCSVMDetectorBase, contamination: float = 0.1) -> None:
        self.detector = detector
        self.contamination = contamination

    def fit(self, X: np.ndarray, y: object = None) -> _SklearnConvention:
        self.detector_ = clone(self.detector).set_params(contamination=self.contamination)
        self.detector_.fit(X)
        self.offset_ = -float(self.detector_.threshold_)
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.score_samples(X) - self.offset_

    def score_samples(self, X: np.ndarray) -> np.ndarray:
        return self.detector_.score_samples(X)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return 1 - 2 * self.detector_.predict(X)


@pytest.mark.parametrize("detector", ESTIMATORS, ids=lambda m: type(m).__name__)
def test_outlier_checks_pass_in_scikit_learn_convention(detector: OCSVMDetectorBase) -> None:
    """The two expected failures are the label convention only: mapped to scikit-learn's
    convention, the thresholds, contamination fractions and fit_predict agree with the checks."""
    adapted = _SklearnConvention(detector)
    check_outliers_train("adapted", adapted)
    check_outliers_fit_predict("adapted", adapted)


def _rows(n: int = 40, m: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, m))


@pytest.mark.parametrize("cls", [DLOCSVM, KDLOCSVM])
def test_sparsity_above_the_atoms_is_the_bound_at_the_atoms(cls: type[DLOCSVM]) -> None:
    """``n_nonzero_coefs`` bounds the atoms per signal: above ``n_components`` it constrains
    nothing, so the fit equals the fit with ``s = n_components`` (it raised before), and fit
    leaves the hyper-parameter as given."""
    X = _rows()
    wide = cls(n_components=2, n_nonzero_coefs=3, n_iter=2, random_state=0).fit(X)
    exact = cls(n_components=2, n_nonzero_coefs=2, n_iter=2, random_state=0).fit(X)
    assert wide.get_params()["n_nonzero_coefs"] == 3
    assert wide.n_nonzero_coefs_ == 2
    np.testing.assert_array_equal(wide.decision_function(X), exact.decision_function(X))
    np.testing.assert_array_equal(wide.dictionary_, exact.dictionary_)


@pytest.mark.parametrize(
    ("cls", "params"),
    [(DLOCSVM, {"normalize": None}), (KDLOCSVM, {"kernel": "linear"})],
    ids=["DLOCSVM", "KDLOCSVM-linear"],
)
def test_sparsity_above_the_signal_dimension_is_capped(cls: type[DLOCSVM], params: dict) -> None:
    """Two-feature signals (raw rows; a linear kernel's map has rank 2) are represented exactly by
    two atoms: ``s = 3`` fits as ``s = 2`` (a small reference period no longer raises)."""
    X = _rows(m=2)
    wide = cls(n_components=4, n_nonzero_coefs=3, n_iter=2, random_state=0, **params).fit(X)
    exact = cls(n_components=4, n_nonzero_coefs=2, n_iter=2, random_state=0, **params).fit(X)
    assert wide.n_nonzero_coefs_ == 2
    np.testing.assert_array_equal(wide.decision_function(X), exact.decision_function(X))


@pytest.mark.parametrize("proto", ESTIMATORS, ids=lambda m: type(m).__name__)
def test_messages_name_the_problem(proto: OCSVMDetectorBase) -> None:
    X = _rows()
    with pytest.raises(ValueError, match=r"found 2 sample\(s\).*needs at least"):
        clone(proto).fit(X[:2])
    with pytest.raises(ValueError, match="Reshape your data"):
        clone(proto).fit(X[:, 0])
    model = clone(proto).fit(X)
    name = type(proto).__name__
    with pytest.raises(ValueError, match=f"X has 3 features, but {name} is expecting 5 features"):
        model.predict(X[:, :3])


@pytest.mark.parametrize("proto", ESTIMATORS, ids=lambda m: type(m).__name__)
def test_fit_predict_is_the_training_labels(proto: OCSVMDetectorBase) -> None:
    """``fit_predict`` (scikit-learn's outlier API) returns the PyOD labels ``labels_``."""
    model = clone(proto)
    labels = model.fit_predict(_rows())
    np.testing.assert_array_equal(labels, model.labels_)
    assert set(np.unique(labels)) == {0, 1}
    assert model.__sklearn_tags__().estimator_type == "outlier_detector"
