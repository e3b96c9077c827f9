"""DL-/DPL-/KDL-/KDPL-OCSVM: objective monotonicity, OC-SVM part, planted data, API, checkpoints."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.io import loadmat
from sklearn.base import clone
from sklearn.linear_model import orthogonal_mp_gram
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import OneClassSVM
from sparsewatch.models._ocsvm_base import OMP_RIDGE, fit_linear_ocsvm, ocsvm_primal
from sparsewatch.models.dl_ocsvm import DLOCSVM, train_dl_ocsvm
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM, kernel_matrix

ALL_MODELS = [
    DLOCSVM(n_components=8, n_nonzero_coefs=2, beta=0.3),
    DPLOCSVM(n_components=8),
    KDLOCSVM(n_components=8, n_nonzero_coefs=2, n_landmarks=60),
    KDPLOCSVM(n_components=8, n_landmarks=60),
]


def planted(seed: int, n_in: int = 400, n_out: int = 30, m: int = 60) -> tuple:
    """Unit-norm inliers on a union of 4 planes (non-negative bases and coefficients) plus
    unit-norm outliers in random directions."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(4):
        Q = np.linalg.qr(np.abs(rng.standard_normal((m, 2))))[0]
        Q *= np.sign(Q.sum(axis=0))
        A = np.abs(rng.standard_normal((2, n_in // 4)))
        parts.append((Q @ (A / np.linalg.norm(A, axis=0))).T)
    inliers = np.vstack(parts) + 0.01 * rng.standard_normal((n_in, m))
    outliers = rng.standard_normal((n_out, m))
    outliers /= np.linalg.norm(outliers, axis=1, keepdims=True)
    X = np.vstack([inliers, outliers])
    y = np.r_[np.zeros(n_in), np.ones(n_out)]
    order = rng.permutation(y.size)
    return X[order], y[order]


@pytest.fixture(scope="module")
def small() -> np.ndarray:
    return planted(0, n_in=120, n_out=8, m=12)[0]


@pytest.mark.parametrize("solver", ["exact", "power"])
@pytest.mark.parametrize("beta", [0.0, 0.4])
@pytest.mark.parametrize("seed", [0, 1])
def test_dl_objective_never_increases(small: np.ndarray, solver: str, beta: float, seed: int):
    model = DLOCSVM(
        n_components=10,
        n_nonzero_coefs=3,
        beta=beta,
        n_iter=6,
        atom_solver=solver,
        contamination=0.1,
        ocsvm_tol=1e-10,
        random_state=seed,
    ).fit(small)
    obj = model.objective_
    assert obj.size == 7
    assert np.all(np.diff(obj) <= 1e-7 * np.abs(obj[:-1]))
    assert obj[-1] < obj[0]  # and it does move


@pytest.mark.parametrize("alpha", [1.0, 50.0])
def test_dpl_objective_never_increases(small: np.ndarray, alpha: float) -> None:
    model = DPLOCSVM(
        n_components=10,
        tau=0.5,
        alpha=alpha,
        contamination=0.1,
        ocsvm_tol=1e-10,
        random_state=3,
    ).fit(small)
    obj = model.objective_
    assert np.all(np.diff(obj) <= 1e-7 * np.abs(obj[:-1]))
    assert obj[-1] < obj[0]


@pytest.mark.parametrize("model", [DLOCSVM, DPLOCSVM])
@pytest.mark.parametrize("seed", range(3))
def test_objective_never_increases_with_the_default_tolerance_and_a_small_nu(model, seed):
    """``nu N = 0.05``: libsvm's multipliers (summing to ``nu N``) shrank its stopping gap, and
    the default tolerance let a refit stop worse than the OC-SVM it replaced: DL-OCSVM's
    objective rose by up to 20% between outer iterations."""
    X = np.random.default_rng(seed).standard_normal((50, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (libsvm's iteration bound on such tiny problems)
        obj = model(nu=0.001, random_state=seed).fit(X).objective_
    assert np.all(np.diff(obj) <= 1e-9 * np.abs(obj[:-1])), obj


def test_ocsvm_part_matches_scikit_learn(small: np.ndarray) -> None:
    """The stored support vectors / dual coefficients / intercept give scikit-learn's decision
    function on the same codes, and the model's scores are exactly that decision, negated."""
    model = DLOCSVM(n_components=10, n_nonzero_coefs=3, contamination=0.1, random_state=0)
    model.fit(small)
    rng = np.random.default_rng(1)
    new_rows = small[:40] + 0.1 * rng.standard_normal((40, small.shape[1]))
    codes_train = model._codes(small)
    codes_new = model._codes(new_rows)
    ours, _ = fit_linear_ocsvm(codes_train, 0.1, 1e-6)
    ref = OneClassSVM(kernel="linear", nu=0.1, tol=1e-6).fit(codes_train)
    np.testing.assert_allclose(
        ours.decision(codes_new), ref.decision_function(codes_new), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_array_equal(
        model.decision_function(new_rows), -model.ocsvm_.decision(codes_new)
    )


def test_trained_ocsvm_is_scikit_learns_on_the_final_codes(small: np.ndarray) -> None:
    """Algorithm 1's last OC-SVM equals scikit-learn's fitted on Algorithm 1's final codes."""
    nu, tol = 0.1, 1e-7
    result = train_dl_ocsvm(
        small.T,
        n_atoms=10,
        s=3,
        beta=0.2,
        alpha=1.0,
        nu=nu,
        n_iter=3,
        atom_solver="exact",
        power_iter=50,
        omp_refresh=False,
        replace_dead_atoms=False,
        init="data",
        ocsvm_tol=tol,
        rng=np.random.default_rng(0),
    )
    Z = result.codes.T
    ref = OneClassSVM(kernel="linear", nu=nu, tol=tol).fit(Z)
    probe = Z + 0.05 * np.random.default_rng(2).standard_normal(Z.shape)
    np.testing.assert_allclose(
        result.ocsvm.decision(probe), ref.decision_function(probe), rtol=1e-9, atol=1e-12
    )


def test_paper_scaling_of_the_multipliers(small: np.ndarray) -> None:
    """lambda = dual_coef_/(nu N) sums to one, lies in [0, 1/(nu N)], and (w, rho) minimises the
    paper's OC-SVM primal: a perturbed (w, rho) is never better."""
    Z = np.abs(small[:, :6])
    nu = 0.2
    svm, lam = fit_linear_ocsvm(Z, nu, 1e-10)
    assert np.isclose(lam.sum(), 1.0)
    assert lam.min() >= 0.0 and lam.max() <= 1.0 / (nu * Z.shape[0]) + 1e-12
    np.testing.assert_allclose(svm.w / (nu * Z.shape[0]), lam @ Z, rtol=1e-9, atol=1e-12)
    best = ocsvm_primal(Z, svm, nu)
    rng = np.random.default_rng(0)
    for _ in range(50):
        other = type(svm)(
            svm.support_vectors,
            svm.dual_coef * (1.0 + 0.05 * rng.standard_normal(svm.dual_coef.size)),
            svm.intercept * (1.0 + 0.05 * rng.standard_normal()),
        )
        assert ocsvm_primal(Z, other, nu) >= best - 1e-9


@pytest.mark.parametrize("normalize", [None, "l2"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_union_of_subspaces(seed: int, normalize: str | None) -> None:
    """The paper's setting (unit-norm signals, raw or l2-normalised, i.e. the same signals)."""
    X, y = planted(seed)
    model = DLOCSVM(
        normalize=normalize,
        n_components=8,
        n_nonzero_coefs=2,
        n_iter=10,
        omp_refresh=True,
        contamination=y.mean(),
        random_state=seed,
    ).fit(X)
    assert balanced_accuracy_score(y, model.labels_) > 0.9
    assert roc_auc_score(y, model.decision_scores_) > 0.9


@pytest.mark.parametrize("gamma_scale", [1.0, 10.0])
def test_kernel_omp_equivalence(small: np.ndarray, gamma_scale: float) -> None:
    """Codes of KDL-OCSVM equal kernel OMP with atoms Phi(Y_L) A on the kernel Gram matrices
    (at scikit-learn's "scale" and at the default 10 x "scale")."""
    model = KDLOCSVM(
        n_components=8, n_nonzero_coefs=3, n_landmarks=50, gamma_scale=gamma_scale, random_state=0
    )
    model.fit(small)
    A = model.atom_coefficients_
    K_LL = kernel_matrix(model.landmarks_, model.landmarks_, "rbf", float(model.gamma_), 3, 1.0)
    K_Lx = kernel_matrix(model.landmarks_, small[:20], "rbf", float(model.gamma_), 3, 1.0)
    # with the ridge omp_codes adds to OMP's least squares (the same in kernel OMP)
    gram = A.T @ K_LL @ A + OMP_RIDGE * np.eye(A.shape[1])
    with warnings.catch_warnings():
        # a narrow kernel leaves some rows with a vanishing residual before s atoms: OMP stops
        # early (and warns), the codes are still exact (as in omp_codes)
        warnings.simplefilter("ignore", RuntimeWarning)
        kernel_codes = orthogonal_mp_gram(gram, A.T @ K_Lx, n_nonzero_coefs=3).T
    np.testing.assert_allclose(
        model._codes(small[:20]), kernel_codes * model.row_scale_, rtol=1e-6, atol=1e-8
    )


@pytest.mark.parametrize("kernel", ["rbf", "poly", "linear"])
def test_kernels_with_singular_gram(kernel: str) -> None:
    """Duplicated rows and a low-rank linear/poly kernel: the eigenvalue floor keeps it finite."""
    rng = np.random.default_rng(4)
    base = rng.standard_normal((30, 3))
    X = np.vstack([base, base])  # rank-deficient Gram, duplicated signals
    for cls in (KDLOCSVM, KDPLOCSVM):
        model = cls(n_components=4, kernel=kernel, random_state=0)
        if cls is KDLOCSVM:
            model.set_params(n_nonzero_coefs=2)
        model.fit(X)
        assert model.kernel_map_.shape[1] <= X.shape[0]
        assert np.all(np.isfinite(model.decision_function(X + 0.01)))


@pytest.mark.parametrize("proto", ALL_MODELS, ids=lambda m: type(m).__name__)
def test_state_round_trip_is_bit_identical(proto, small: np.ndarray) -> None:
    model = clone(proto).set_params(random_state=5, contamination=0.1).fit(small)
    buf = io.BytesIO()
    np.savez(buf, **model.get_state())
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as npz:
        state = {k: npz[k] for k in npz.files}
    restored = clone(proto).set_params(random_state=5, contamination=0.1).set_state(state)
    rows = small[::3] + 0.05
    np.testing.assert_array_equal(restored.decision_function(rows), model.decision_function(rows))
    np.testing.assert_array_equal(restored.predict(rows), model.predict(rows))
    np.testing.assert_array_equal(restored.labels_, model.labels_)
    # scalars are plain Python numbers, fitted or restored (scikit-learn's convention)
    for fitted in (model, restored):
        assert type(fitted.n_features_in_) is int and fitted.n_features_in_ == small.shape[1]
        assert type(fitted.threshold_) is float and type(fitted.ocsvm_intercept_) is float
    # the training diagnostics come back too
    np.testing.assert_array_equal(restored.objective_, model.objective_)
    assert type(restored.n_rejected_updates_) is int
    assert restored.n_rejected_updates_ == model.n_rejected_updates_
    if hasattr(model, "tau_"):
        assert type(restored.tau_) is float and restored.tau_ == model.tau_


@pytest.mark.parametrize("proto", ALL_MODELS, ids=lambda m: type(m).__name__)
def test_state_without_diagnostics_restores_and_scores_the_same(proto, small: np.ndarray) -> None:
    """A checkpoint written before the diagnostics were saved is still taken; none is invented,
    and none is left over from the instance's own earlier fit."""
    model = clone(proto).set_params(random_state=5).fit(small)
    diagnostics = {"objective_", "n_rejected_updates_", "tau_"}
    legacy = {k: v for k, v in model.get_state().items() if k not in diagnostics}
    other = clone(proto).set_params(random_state=5).fit(small[::-1])  # has diagnostics of its own
    restored = other.set_state(legacy)
    rows = small[::3] + 0.05
    np.testing.assert_array_equal(restored.decision_function(rows), model.decision_function(rows))
    assert not [k for k in diagnostics if hasattr(restored, k)]
    assert not diagnostics & set(restored.get_state())


@pytest.mark.parametrize("proto", ALL_MODELS, ids=lambda m: type(m).__name__)
def test_reproducible_and_pyod_api(proto, small: np.ndarray) -> None:
    a = clone(proto).set_params(random_state=11, contamination=0.1).fit(small)
    b = clone(proto).set_params(random_state=11, contamination=0.1).fit(small)
    np.testing.assert_array_equal(a.decision_scores_, b.decision_scores_)
    assert set(proto.get_params()) >= {"n_components", "contamination", "random_state", "nu"}
    assert a.decision_scores_.shape == (small.shape[0],)
    np.testing.assert_array_equal(a.labels_, (a.decision_scores_ > a.threshold_).astype(int))
    assert abs(a.labels_.mean() - 0.1) <= 0.02
    np.testing.assert_array_equal(a.predict(small), a.labels_)
    own_sign = clone(proto).set_params(random_state=11, contamination=None).fit(small)
    assert float(own_sign.threshold_) == 0.0
    np.testing.assert_array_equal(
        own_sign.predict(small), (own_sign.decision_function(small) > 0).astype(int)
    )


@pytest.mark.parametrize("cls", [DLOCSVM, DPLOCSVM, KDLOCSVM, KDPLOCSVM])
def test_input_validation(cls, small: np.ndarray) -> None:
    bad = small.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        cls().fit(bad)
    bad[3, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        cls().fit(bad)
    const = np.full_like(small, 1.5)  # one constant feature is accepted, all of them are not
    with pytest.raises(ValueError, match="every feature is constant"):
        cls().fit(const)
    with pytest.raises(ValueError, match="2-D"):
        cls().fit(small[:, 0])
    model = cls(n_components=4, random_state=0).fit(small)
    with pytest.raises(ValueError, match="features"):
        model.decision_function(small[:, :5])
    with pytest.raises(ValueError, match="NaN or infinite"):
        model.predict(bad)


@pytest.mark.parametrize("proto", ALL_MODELS, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_input_is_densified(proto, fmt: str, small: np.ndarray) -> None:
    """scipy.sparse input (fit, scores, predictions) gives exactly the dense input's results."""
    dense = clone(proto).set_params(random_state=3, contamination=0.1).fit(small)
    model = clone(proto).set_params(random_state=3, contamination=0.1).fit(sp.coo_matrix(small))
    rows = sp.coo_matrix(small[::4] + 0.05).asformat(fmt)
    np.testing.assert_array_equal(model.decision_scores_, dense.decision_scores_)
    np.testing.assert_array_equal(model.decision_function(rows), dense.decision_function(rows))
    np.testing.assert_array_equal(model.predict(rows), dense.predict(rows.toarray()))
    bad = sp.csr_matrix(small)
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        clone(proto).fit(bad)


def test_too_few_samples_for_sparsity(small: np.ndarray) -> None:
    with pytest.raises(ValueError, match="too few samples"):
        DLOCSVM(n_nonzero_coefs=5).fit(small[:5])
    model = DLOCSVM(n_components=2, n_nonzero_coefs=3).fit(small)  # at most 2 atoms exist
    assert model.n_nonzero_coefs_ == 2 and model.n_nonzero_coefs == 3


def test_dead_atom_replacement_and_omp_refresh(small: np.ndarray) -> None:
    """A large beta trims rows; replacement restarts them, and every option still scores."""
    trimmed = DLOCSVM(n_components=12, n_nonzero_coefs=2, beta=3.0, random_state=0).fit(small)
    assert (trimmed.row_scale_ == 0.0).any()
    replaced = DLOCSVM(
        n_components=12,
        n_nonzero_coefs=2,
        beta=3.0,
        replace_dead_atoms=True,
        omp_refresh=True,
        random_state=0,
    ).fit(small)
    assert (replaced.row_scale_ > 0).sum() >= (trimmed.row_scale_ > 0).sum()
    assert np.all(np.isfinite(replaced.decision_function(small)))


def test_odds_real_data_properties(shared_data) -> None:
    """Real data (ODDS wbc, min-max scaled): monotone objective, contamination-sized labels."""
    mat = loadmat(shared_data / "odds" / "wbc.mat")
    X = MinMaxScaler().fit_transform(mat["X"].astype(float))
    y = mat["y"].ravel()
    model = DLOCSVM(beta=0.5, contamination=float(y.mean()), ocsvm_tol=1e-10, random_state=0)
    model.fit(X)
    obj = model.objective_
    assert np.all(np.diff(obj) <= 1e-7 * np.abs(obj[:-1]))
    assert abs(model.labels_.mean() - y.mean()) <= 1.0 / X.shape[0] + 1e-12
