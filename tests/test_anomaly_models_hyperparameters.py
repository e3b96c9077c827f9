"""The DL-OCSVM family (commit c0d360f): hyper-parameters checked at every fit, a
``beta`` that trims every atom, and the row count of a sparsity above the number of atoms."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sparsewatch.consumers.anomaly_worker import build_model
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

from sparsewatch.config import AnomalyConfig

ALL = [DLOCSVM, DPLOCSVM, KDLOCSVM, KDPLOCSVM]
KERNEL = [KDLOCSVM, KDPLOCSVM]
CODED = [DLOCSVM, KDLOCSVM]  # the models with OMP codes and the l2,1 weight beta


def _data(seed: int = 0, n: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4))


def _cases() -> list:
    """(model, parameters, message): each was accepted (or refused naming another parameter,
    or with another exception type) by a fit with ``n_iter=0``."""
    cases = [(cls, {"atom_solver": "svd"}, "atom_solver must be 'exact' or 'power'") for cls in ALL]
    cases += [(cls, {"ocsvm_tol": tol}, "ocsvm_tol must be") for cls in ALL for tol in (0.0, -1.0)]
    cases += [(cls, {"nu": "0.3"}, "nu must be in") for cls in (DLOCSVM, DPLOCSVM)]
    cases += [
        (cls, {"contamination": "x"}, "contamination must be") for cls in (DLOCSVM, KDPLOCSVM)
    ]
    for cls in CODED:
        cases += [
            (cls, {"n_nonzero_coefs": 2.5}, "n_nonzero_coefs must be an integer >= 1"),
            (cls, {"n_nonzero_coefs": True}, "n_nonzero_coefs must be an integer >= 1"),
            (cls, {"omp_refresh": "no"}, "omp_refresh must be a boolean"),
            (cls, {"replace_dead_atoms": None}, "replace_dead_atoms must be a boolean"),
        ]
    for cls in KERNEL:
        cases += [
            (cls, {"degree": 0, "kernel": "poly"}, "degree must be an integer >= 1"),
            (cls, {"degree": -1}, "degree must be an integer >= 1"),  # (rbf: unused, accepted)
            (cls, {"degree": 2.5, "kernel": "poly"}, "degree must be an integer >= 1"),
            (cls, {"coef0": float("nan"), "kernel": "poly"}, "coef0 must be a finite number"),
            (cls, {"coef0": float("inf")}, "coef0 must be a finite number"),
            (cls, {"gamma": 1.0, "gamma_scale": -1.0}, "gamma_scale must be > 0"),
        ]
    cases += [(DPLOCSVM, {"tau": None}, "tau must be"), (KDPLOCSVM, {"tau": True}, "tau must be")]
    return [pytest.param(*case, id=f"{case[0].__name__}-{case[1]}") for case in cases]


@pytest.mark.parametrize(("cls", "params", "message"), _cases())
def test_invalid_hyper_parameters_are_refused_by_name_on_every_fit_path(
    cls, params, message
) -> None:
    """Every hyper-parameter is checked when ``fit`` starts (scikit-learn's convention), not where
    it is first used: with ``n_iter=0`` an unknown ``atom_solver`` was never looked at."""
    model = cls(n_components=4, n_iter=0, random_state=0, **params)
    with pytest.raises(ValueError, match=message):
        model.fit(_data())


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (DLOCSVM, {"n_nonzero_coefs": np.int64(2), "omp_refresh": np.True_, "ocsvm_tol": 1e-4}),
        (KDLOCSVM, {"kernel": "poly", "degree": 1, "coef0": -0.5, "gamma": 0.2}),
        (KDPLOCSVM, {"kernel": "poly", "degree": np.int64(2), "coef0": 0.0, "tau": 0.5}),
        (DPLOCSVM, {"atom_solver": "power", "nu": None, "contamination": np.float64(0.2)}),
    ],
)
def test_valid_edge_values_still_fit(cls, params) -> None:
    model = cls(n_components=4, n_iter=1, random_state=0, **params).fit(_data())
    assert np.isfinite(model.decision_scores_).all()


@pytest.mark.parametrize("cls", CODED)
def test_a_beta_that_trims_every_atom_warns_at_fit(cls) -> None:
    """With a very large ``beta`` every training code row is trimmed: the OC-SVM sees only zero
    codes, every score is equal and nothing is flagged. That model is useless: it says so."""
    model = cls(n_components=6, beta=1e6, random_state=0)
    with pytest.warns(UserWarning, match=r"beta=1000000\.0 trimmed every atom"):
        model.fit(_data())
    assert np.ptp(model.decision_scores_) == 0.0 and model.labels_.sum() == 0
    assert np.ptp(model.decision_function(_data(1))) == 0.0


@pytest.mark.parametrize(
    "model",
    [
        DLOCSVM(n_components=8, n_nonzero_coefs=2, beta=0.3, random_state=0),
        KDLOCSVM(beta=1.0, random_state=0),  # trims some atoms, not all
        DLOCSVM(n_components=6, beta=1e6, n_iter=0, random_state=0),  # no sweep, no trimming
    ],
)
def test_a_beta_that_keeps_some_codes_does_not_warn(model) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.fit(_data())
    assert np.ptp(model.decision_scores_) > 0.0


def test_the_anomaly_worker_model_cannot_trim_every_atom() -> None:
    """The worker's DL-OCSVM has ``beta = 0`` (no configuration option sets it): no warning, even
    on a reference set of two distinct rows repeated, standardised as the worker does."""
    model = build_model(AnomalyConfig(), AnomalyConfig().sparsity)
    assert model.beta == 0.0
    rows = np.repeat(np.array([[1.0, -1.0, 0.5], [-1.0, 1.0, -0.5]]), 50, axis=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(rows)
    assert not [w for w in caught if "trimmed every atom" in str(w.message)]


def test_row_count_uses_the_sparsity_capped_at_the_atoms() -> None:
    """OMP uses at most ``n_components`` atoms per row: ``n_components=2, n_nonzero_coefs=10``
    needs ``max(2 + 1, 3) = 3`` rows, not 11 (5 rows were refused)."""
    X = _data(n=5)
    model = DLOCSVM(n_components=2, n_nonzero_coefs=10, n_iter=1, random_state=0).fit(X)
    assert model.n_nonzero_coefs_ == 2
    assert np.isfinite(model.decision_scores_).all()
    with pytest.raises(ValueError, match="sparsity 2 needs at least 3"):
        DLOCSVM(n_components=2, n_nonzero_coefs=10).fit(X[:2])
    with pytest.raises(ValueError, match="sparsity 3 needs at least 4"):
        DLOCSVM(n_components=8, n_nonzero_coefs=3).fit(X[:3])
