"""Fit edge cases of the DL-/DPL-/KDL-/KDPL-OCSVM anomaly detectors (regression tests)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import check_estimator_sparse_tag
from sparsewatch.models._ocsvm_base import OCSVMDetectorBase, maximize_on_sphere
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

MODELS = [
    DLOCSVM(n_components=4, n_iter=2, random_state=0),
    DPLOCSVM(n_components=4, n_iter=2, random_state=0),
    KDLOCSVM(n_components=4, n_iter=2, random_state=0),
    KDPLOCSVM(n_components=4, n_iter=2, random_state=0),
]


def _rows(seed: int = 0, n: int = 60, m: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, m))


def _learned(model: OCSVMDetectorBase) -> dict[str, object]:
    return {k: np.array(v, copy=True) for k, v in vars(model).items() if k.endswith("_")}


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("bad", [{"nu": 2.0}, {"init": "nope"}, {"atom_solver": "nope"}])
def test_failed_fit_leaves_the_learned_state_unchanged(
    proto: OCSVMDetectorBase, bad: dict[str, object]
) -> None:
    """A fit that raised part-way (here an invalid ``nu``, ``init`` or ``atom_solver``, checked
    only once the rows were normalised) kept the failed data's ``n_features_in_`` and
    normalisation statistics next to the old dictionary and OC-SVM: scores changed, and a
    model fitted on 5 features refused 5-feature rows after a failed fit on 3."""
    X = _rows()
    model = clone(proto).fit(X)
    before, scores = _learned(model), model.decision_function(X)
    params = model.get_params()
    model.set_params(**bad)
    for data in (3.0 * X + 1.0, X[:, :3]):
        with pytest.raises(ValueError):
            model.fit(data)
        after = _learned(model)
        assert after.keys() == before.keys()
        for name, value in before.items():
            np.testing.assert_array_equal(after[name], value, err_msg=name)
    model.set_params(**params)
    np.testing.assert_array_equal(model.decision_function(X), scores)


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
def test_failed_first_fit_leaves_the_model_unfitted(proto: OCSVMDetectorBase) -> None:
    model = clone(proto).set_params(nu=0.0)
    with pytest.raises(ValueError, match="nu"):
        model.fit(_rows())
    assert not [k for k in vars(model) if k.endswith("_")]
    with pytest.raises(NotFittedError):
        model.decision_function(_rows())


def test_sparsity_above_the_signal_dimension_is_capped_in_fit() -> None:
    """Sparsity above the signal dimension (found in ``_fit``, after normalisation) raised; the
    model now codes with at most that many atoms, as prediction already did, and leaves its
    hyper-parameter as it was."""
    X = _rows()
    model = DLOCSVM(n_components=4, n_nonzero_coefs=3, n_iter=1, normalize=None, random_state=0)
    model.fit(X[:, :2])
    assert model.n_features_in_ == 2
    assert model.n_nonzero_coefs_ == 2 and model.n_nonzero_coefs == 3
    capped = clone(model).set_params(n_nonzero_coefs=2).fit(X[:, :2])
    np.testing.assert_array_equal(
        model.decision_function(X[:, :2]), capped.decision_function(X[:, :2])
    )


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
def test_complex_input_is_refused(proto: OCSVMDetectorBase) -> None:
    """Complex rows were cast to their real part with only a ComplexWarning."""
    X = _rows()
    model = clone(proto)
    with pytest.raises(ValueError, match="Complex"):
        model.fit(X + 1j)
    model.fit(X)
    with pytest.raises(ValueError, match="Complex"):
        model.decision_function(X + 1j)


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
def test_sparse_input_tag_matches_what_fit_accepts(proto: OCSVMDetectorBase) -> None:
    """Sparse input is densified by design; the scikit-learn tag said it was not accepted."""
    assert proto.__sklearn_tags__().input_tags.sparse
    check_estimator_sparse_tag(
        type(proto).__name__, clone(proto).set_params(n_components=3, n_iter=1)
    )


def _rotated_hard_case(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``B = U S V^T`` in general position and ``g`` with no component along ``v_1`` (mostly
    outside the row space of ``B``, a little along ``v_2 .. v_m``), small enough for the
    trust-region hard case; returns ``B``, ``g`` and the closed-form maximiser ``U y`` with
    ``y_k = b_k / (s_1^2 - s_k^2)`` for ``k > 1`` and ``y_1 = sqrt(1 - sum_k y_k^2)``."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 5))
    n = m + int(rng.integers(2, 6))
    U, _ = np.linalg.qr(rng.standard_normal((m, m)))
    V, _ = np.linalg.qr(rng.standard_normal((n, m)))
    S = np.sort(rng.uniform(0.5, 2.0, m))[::-1]
    S[0] += 1.0  # a clear gap below s_1
    B = (U * S) @ V.T
    g = 10.0 * rng.standard_normal(n)
    g -= V @ (V.T @ g)
    g += V[:, 1:] @ rng.uniform(-0.3, 0.3, m - 1)
    b, s2 = S * (V.T @ g), S**2
    y = np.zeros(m)
    y[1:] = b[1:] / (s2[0] - s2[1:])
    assert y @ y < 1.0  # the hard case
    y[0] = np.sqrt(1.0 - y @ y)
    return B, g, U @ y


@pytest.mark.parametrize("seed", range(30))
def test_exact_sphere_solution_in_a_rotated_hard_case(seed: int) -> None:
    """With ``g`` orthogonal to ``v_1`` in general position, ``b``'s top part is rounding noise
    (about 1e-15 ||g||), not 0: the hard-case test failed, and the secular root, within rounding
    of ``s_1^2``, turned that noise into a wrong direction (the d-dependent part of the
    objective short by up to 4e-4 of its value; 9 of these 30 seeds by more than 1e-9)."""
    B, g, d_ref = _rotated_hard_case(seed)

    def f(d: np.ndarray) -> float:
        return float(np.sum((B.T @ d + g) ** 2)) - float(g @ g)

    exact = maximize_on_sphere(B, g, "exact")
    assert abs(np.linalg.norm(exact) - 1.0) < 1e-12
    assert f(exact) >= f(d_ref) - 1e-10 * abs(f(d_ref))
