"""DL-/DPL-/KDL-/KDPL-OCSVM at the ends of the float range, and exact references on small cases.

Scaling the signals by a power of two is exact in floating point, so a scale-free computation
must give the same numbers (the normalised options ``"l2"``/``"lift"``, RBF kernels at the
data-scaled width) or numbers scaled by the square of the factor (the raw linear models:
residuals, codes and the linear OC-SVM are all scale-equivariant when ``beta = 0``).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.svm import OneClassSVM
from sparsewatch.models._ocsvm_base import OMP_RIDGE, fit_linear_ocsvm, omp_codes
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
    return np.random.default_rng(0).standard_normal((40, 4))


@pytest.mark.parametrize("normalize", ["l2", "lift"])
@pytest.mark.parametrize("proto", MODELS, ids=IDS)
@pytest.mark.parametrize("exponent", [-600, 600, 1000])
def test_normalised_models_are_scale_free_beyond_the_range_of_squares(
    proto, normalize: str, exponent: int, rows: np.ndarray
) -> None:
    """Rows of size 2^600 (~4e180) or 2^1000 (~1e301) square to inf: the l2 norms became inf,
    the rows 0, and the scores arbitrary (rank correlation about 0 with the unscaled fit);
    rows of size 2^-600 lost every digit of their squares."""
    model = clone(proto).set_params(normalize=normalize)
    ref = clone(model).fit(rows).decision_scores_
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings either
        scaled = model.fit(np.ldexp(rows, exponent))
    # (normalised rows equal to rounding: KDL's narrow RBF kernel amplifies that to ~1e-7)
    atol = 1e-9 * float(np.abs(ref).max())
    np.testing.assert_allclose(scaled.decision_scores_, ref, rtol=1e-6, atol=atol)
    np.testing.assert_array_equal(scaled.labels_, (ref > np.percentile(ref, 90)).astype(int))


@pytest.mark.parametrize("normalize", ["l2", "lift"])
@pytest.mark.parametrize("proto", MODELS, ids=IDS)
def test_a_huge_row_is_scored_by_its_direction(proto, normalize: str, rows: np.ndarray) -> None:
    """Scoring a row of size ~1e210 (its squared norm overflows) on a model fitted on rows of
    size 1: ``"l2"`` scores only the direction, and ``"lift"`` at 1e30 is already at its limit
    (the lift coordinate ~1e-30). The row was scored as the zero row instead (KDPL-OCSVM called
    such a row an inlier)."""
    model = clone(proto).set_params(normalize=normalize).fit(rows)
    probe = np.array([[1.0, -2.0, 0.5, 3.0], [-1.0, 0.0, 0.0, 0.25]])
    near = model.decision_function(np.ldexp(probe, 100))
    far = model.decision_function(np.ldexp(probe, 700))
    np.testing.assert_allclose(far, near, rtol=1e-6, atol=1e-9 * float(np.abs(near).max()))
    np.testing.assert_array_equal(model.predict(np.ldexp(probe, 700)), model.predict(probe * 1e30))


@pytest.mark.parametrize(
    "proto",
    [
        DLOCSVM(n_components=6, n_iter=2, random_state=0, normalize=None),
        DLOCSVM(n_components=6, n_iter=2, random_state=0, normalize=None, omp_refresh=True),
        KDLOCSVM(n_components=6, n_iter=2, random_state=0, kernel="linear"),
    ],
    ids=["DL", "DL-omp-refresh", "KDL-linear"],
)
@pytest.mark.parametrize("exponent", [-150, -30, 70, 150])
def test_raw_linear_models_are_scale_equivariant(proto, exponent: int, rows: np.ndarray) -> None:
    """normalize=None, beta=0: scores scale with the square of the signals. Before, signals of
    size ~1e-9 (2^-30) got all-zero OMP codes (scikit-learn's OMP stops at an absolute
    correlation of 1.5e-8) and no training row was flagged; signals of size ~1e21 (2^70) failed
    in libsvm (its single-precision kernel cache overflowed: "dual coefficients ... not
    finite")."""
    ref = clone(proto).fit(rows).decision_scores_
    model = clone(proto).fit(np.ldexp(rows, exponent))
    np.testing.assert_allclose(
        np.ldexp(model.decision_scores_, -2 * exponent), ref, rtol=1e-8, atol=1e-10
    )
    assert model.labels_.sum() == 4  # contamination 0.1 of 40 rows


@pytest.mark.parametrize("proto", MODELS, ids=IDS)
@pytest.mark.parametrize("size", [1e60, 1e-60])
def test_raw_signals_out_of_range_are_refused(proto, size: float, rows: np.ndarray) -> None:
    """Raw signals (normalize=None) whose squares overflow or lose their digits: one clear
    message (it was libsvm's "dual coefficients ... not finite", a failed root finder,
    scikit-learn's "n_nonzero_coefs ... Got 0" or arbitrary scores)."""
    model = clone(proto).set_params(normalize=None)
    with pytest.raises(ValueError, match="with normalize=None the raw signals must lie within"):
        model.fit(rows * size)
    assert not hasattr(model, "ocsvm_intercept_")
    clone(proto).set_params(normalize="lift").fit(rows * size)  # the scale-free option works


# --- the OC-SVM part against scikit-learn, with its KKT conditions -----------------------------


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(6, 30),
    k=st.integers(1, 5),
    nu=st.sampled_from([0.1, 0.3, 0.5, 0.8]),
    exponent=st.sampled_from([-80, -40, 0, 40, 80]),
)
def test_linear_ocsvm_is_scikit_learns_and_scale_equivariant(seed, n, k, nu, exponent) -> None:
    rng = np.random.default_rng(seed)
    Z = np.abs(rng.standard_normal((n, k))) + 0.1 * rng.standard_normal((n, k))
    tol = 1e-9
    svm, lam = fit_linear_ocsvm(Z, nu, tol)
    ref = OneClassSVM(kernel="linear", nu=nu, tol=tol).fit(Z)
    probe = Z + 0.1 * rng.standard_normal(Z.shape)
    # libsvm's decision is sum_j alpha_j K(z_j, x) - rho with sum alpha = nu N: solvers that stop
    # within tol of the KKT conditions agree to a small multiple of it on that scale (rho is not
    # unique on a degenerate problem: 1.7e-8 apart seen). Not the decision's own
    # size, which is ~0 on a degenerate problem (k = 1, nu N = 1: w -> 0; both stopped 1e-9 apart
    # on values of 1e-9)
    scale = nu * n * float(np.abs(probe @ Z.T).max())
    np.testing.assert_allclose(svm.decision(probe), ref.decision_function(probe), atol=1e-6 * scale)
    # the same optimum: the dual objective 1/2 a^T K a (a = nu N lambda, libsvm's scaling); not the
    # same support set, which a degenerate problem (k = 1, nu N = 1) does not fix
    K = Z @ Z.T
    alpha = nu * n * lam
    alpha_ref = np.zeros(n)
    alpha_ref[ref.support_] = ref.dual_coef_.ravel()
    np.testing.assert_allclose(alpha @ K @ alpha, alpha_ref @ K @ alpha_ref, rtol=1e-6, atol=1e-12)
    # KKT of the paper's dual: 0 <= lambda <= 1/(nu N), sum lambda = 1, w = sum lambda_j z_j
    assert lam.min() >= 0.0 and lam.max() <= 1.0 / (nu * n) * (1 + 1e-12)
    assert np.isclose(lam.sum(), 1.0, rtol=1e-10)
    np.testing.assert_allclose(svm.w, nu * n * (lam @ Z), rtol=1e-9, atol=1e-12)
    # the same problem on the rows times 2^exponent (libsvm caches kernel values in float32)
    big, lam_big = fit_linear_ocsvm(np.ldexp(Z, exponent), nu, np.ldexp(tol, 2 * exponent))
    np.testing.assert_allclose(lam_big, lam, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        np.ldexp(big.decision(np.ldexp(probe, exponent)), -2 * exponent),
        svm.decision(probe),
        atol=1e-9 * scale,
    )


# --- OMP against references on tiny dictionaries ----------------------------------------------


def _greedy_reference(D: np.ndarray, y: np.ndarray, s: int) -> np.ndarray:
    """Textbook OMP: pick the atom most correlated with the residual, least squares on the
    picked atoms (with omp_codes' ridge ``OMP_RIDGE``), repeat ``s`` times (or until the
    residual vanishes)."""
    chosen: list[int] = []
    code = np.zeros(D.shape[1])
    residual = y.copy()
    for _ in range(s):
        corr = np.abs(D.T @ residual)
        corr[chosen] = 0.0
        if corr.max() <= 1e-12 * np.linalg.norm(y):
            break
        chosen.append(int(np.argmax(corr)))
        Dc = D[:, chosen]
        coef = np.linalg.solve(Dc.T @ Dc + OMP_RIDGE * np.eye(len(chosen)), Dc.T @ y)
        residual = y - D[:, chosen] @ coef
        code[:] = 0.0
        code[chosen] = coef
    return code


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.integers(2, 5),
    k=st.integers(1, 6),
    s=st.integers(1, 2),
    exponent=st.sampled_from([-120, -40, -20, 0, 20, 120]),
)
def test_omp_codes_match_the_greedy_reference_at_any_scale(seed, m, k, s, exponent) -> None:
    """OMP codes equal textbook OMP (with the ridge); with ``s = 1`` the atom chosen gives the
    best ``s``-term approximation by brute force over the supports. A signal times
    2^exponent gets its code times 2^exponent (at 2^-20 and below scikit-learn's absolute stop
    gave zero or truncated codes)."""
    rng = np.random.default_rng(seed)
    D = rng.standard_normal((m, k))
    D /= np.linalg.norm(D, axis=0)
    y = rng.standard_normal(m)
    code = omp_codes(D, y[:, None], s)[:, 0]
    s_eff = min(s, k, m)
    np.testing.assert_allclose(code, _greedy_reference(D, y, s_eff), rtol=1e-8, atol=1e-10)
    assert np.count_nonzero(code) <= s_eff
    if s_eff == 1:
        best = min(
            np.linalg.norm(y - D[:, list(S)] @ np.linalg.lstsq(D[:, list(S)], y, rcond=None)[0])
            for S in itertools.combinations(range(k), s_eff)
        )
        S = np.flatnonzero(code)  # (the ridge shrinks the code: its plain fit is the best)
        fit = D[:, S] @ np.linalg.lstsq(D[:, S], y, rcond=None)[0]
        assert np.linalg.norm(y - fit) <= best + 1e-10
    scaled = omp_codes(D, np.ldexp(y, exponent)[:, None], s)[:, 0]
    np.testing.assert_allclose(np.ldexp(scaled, -exponent), code, rtol=1e-9, atol=1e-12)


# --- kernel variants with the linear kernel: an explicit feature map -----------------------------


def test_linear_kernel_map_is_an_isometry_and_kdl_is_dl_on_it(rows: np.ndarray) -> None:
    """With the linear kernel and every row a landmark, ``psi`` preserves inner products (an
    explicit feature map of ``k(x, y) = x^T y``), and KDL-OCSVM's codes and scores are those of
    DL-OCSVM's coding on ``psi`` with the learned dictionary and OC-SVM."""
    model = KDLOCSVM(
        n_components=6, n_iter=2, kernel="linear", n_landmarks=None, random_state=0
    ).fit(rows)
    new = rows[:7] + 0.3
    psi = model._features(new)
    np.testing.assert_allclose(psi @ psi.T, new @ new.T, rtol=1e-9, atol=1e-9)
    dl = DLOCSVM(n_components=6, normalize=None)
    versioned = tuple(k for k, _ in dl._versioned_state_defaults)  # (omp_ridge_)
    for key, value in model.get_state().items():
        if key in dl._common_state_keys + dl._state_keys + versioned:
            setattr(dl, key, value.item() if value.ndim == 0 else value)
    dl.n_features_in_ = psi.shape[1]
    np.testing.assert_array_equal(dl.decision_function(psi), model.decision_function(new))


# --- estimator conventions agree across the four variants --------------------------------------


@pytest.mark.parametrize("proto", MODELS, ids=IDS)
def test_output_conventions_agree_across_variants(proto, rows: np.ndarray) -> None:
    """PyOD's conventions (README): decision_function higher = more anomalous, predict 1 =
    outlier by ``threshold_``, score_samples = -decision_function (scikit-learn: higher = more
    normal); a far row is an outlier; contamination sets the training flag rate."""
    model = clone(proto)
    with pytest.raises(NotFittedError):
        model.predict(rows)
    assert model.fit(rows) is model
    far = np.vstack([rows[:3], np.full((1, 4), 50.0)])
    d = model.decision_function(far)
    np.testing.assert_array_equal(model.score_samples(far), -d)
    np.testing.assert_array_equal(model.predict(far), (d > model.threshold_).astype(int))
    assert model.predict(far)[-1] == 1 and d[-1] == d.max()
    for contamination in (0.05, 0.2, 0.3):
        fitted = clone(proto).set_params(contamination=contamination).fit(rows)
        assert fitted.labels_.mean() == pytest.approx(contamination, abs=1.0 / len(rows))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clone(proto).fit(rows.astype(np.float32))
