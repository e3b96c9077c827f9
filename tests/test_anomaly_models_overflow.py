"""Scores of finite rows whose arithmetic overflows in the DL-OCSVM family.

Rows far beyond the training data (raw signals, ``normalize=None``, the kernel variants' default)
overflowed inside the models: the RBF kernel's ``||a||^2 + ||b||^2 - 2 a^T b`` became
``inf - inf``, the polynomial kernel's cube and the linear models' code products became
infinities of both signs, and ``decision_function`` returned NaN, which ``predict`` labels an
inlier (``NaN > threshold_`` is false) and which ranking tools refuse.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow notes

# Finite rows at the top of the float range, with entries of both signs.
SIGNS = np.array([[1.0, 1.0, -1.0, 1.0], [-1.7, 1.0, 1.0, 1.0]])
HUGE = 1e308 * SIGNS


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((60, 4))


@pytest.mark.parametrize("model_cls", [KDLOCSVM, KDPLOCSVM], ids=["KDL", "KDPL"])
def test_rbf_rows_beyond_the_range_of_squares_score_as_the_far_limit(model_cls, rows) -> None:
    """RBF kernel values of a row whose squared norm overflows are 0, as for any row far from
    every landmark: the row scores exactly as a far row of representable squared norm."""
    model = model_cls(n_components=8, n_iter=2, random_state=0).fit(rows)
    far = model.decision_function(np.array([[1e200, -1e200, 1e200, 5e199]]))
    np.testing.assert_array_equal(model.decision_function(HUGE), np.repeat(far, 2))


@pytest.mark.parametrize(
    ("proto", "huge"),
    [
        (KDLOCSVM(kernel="poly", n_components=8, n_iter=2, random_state=0), 1e120 * SIGNS),
        (KDPLOCSVM(kernel="poly", n_components=8, n_iter=2, random_state=0), 1e120 * SIGNS),
    ],
    ids=["KDL-poly", "KDPL-poly"],
)
def test_a_row_whose_score_overflows_is_an_outlier_not_nan(proto, huge, rows) -> None:
    """A finite row whose score overflows to ``inf - inf`` scores ``+inf`` (outside every
    boundary) and is predicted an outlier; the other rows of its batch keep their scores."""
    model = clone(proto).fit(rows)
    scores = model.decision_function(np.vstack([rows[:5], huge]))
    # (equal up to rounding: the products of a batch of another size round differently)
    np.testing.assert_allclose(scores[:5], model.decision_scores_[:5], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(scores[5:], np.inf)
    np.testing.assert_array_equal(model.predict(huge), 1)


@pytest.mark.parametrize("model_cls", [DLOCSVM, DPLOCSVM], ids=["DL-raw", "DPL-raw"])
def test_a_linear_model_scores_a_huge_row_without_nan(model_cls, rows) -> None:
    """The linear models score a row through the normal vector ``w`` (``z^T w``, no longer
    ``(z^T SV^T) lambda``, whose partial products overflowed to ``inf - inf``, which this test
    caught as ``+inf``): a finite row at the top of the float range scores a number or an
    infinity, never NaN, and the other rows of its batch keep their scores."""
    model = model_cls(n_components=8, n_iter=2, random_state=0, normalize=None).fit(rows)
    scores = model.decision_function(np.vstack([rows[:5], HUGE]))
    assert not np.isnan(scores).any()
    np.testing.assert_allclose(scores[:5], model.decision_scores_[:5], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(model.predict(HUGE), (scores[5:] > model.threshold_).astype(int))


@pytest.mark.parametrize("model_cls", [KDLOCSVM, KDPLOCSVM], ids=["KDL", "KDPL"])
def test_a_polynomial_gram_that_overflows_at_fit_is_a_clear_error(model_cls, rows) -> None:
    """Finite training rows whose polynomial Gram overflows: NaN eigenvalues kept no column of
    the kernel map, and the fit failed with an IndexError (KDPL) or OMP's parameter error (KDL)."""
    model = model_cls(kernel="poly", degree=4, gamma=1.0, n_components=8, random_state=0)
    with pytest.raises(ValueError, match="kernel Gram matrix of the training rows is not finite"):
        model.fit(rows * 1e40)
