"""The novelty models: the top-``q`` cut and the growth
fraction of a float32 fraction, integer hyper-parameters out of range, one failed LP polish
group, and the stall stop of ADMM on documents of large l1 mass."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sparsewatch.consumers.detector_core import build_models
from sparsewatch.models import l1_coding
from sparsewatch.models.l1_coding import l1_sparse_code
from sparsewatch.models.novelty import OnlineL1NoveltyDetector

from sparsewatch.config import DetectorConfig
from tests.support.l1_coding import noisy_sparse_problem

_FLOAT_TYPES = [float, np.float32, np.float64]


def _unit_rows(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    X = rng.random((n, m)) ** 3
    return X / X.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("as_type", _FLOAT_TYPES)
@pytest.mark.parametrize("q", ["0.1", "0.07", "0.29", "0.05", "0.3"])
@pytest.mark.parametrize("n", [100, 1000])
def test_top_q_cut_counts_the_decimal_whatever_the_float_type(
    as_type: type, q: str, n: int
) -> None:
    """``ceil(q n)`` of the decimal ``q``: a float32 ``0.1`` (0.10000000149 as a float64) flagged
    11 of 100 documents, a Python or float64 ``0.1`` 10."""
    scores = np.random.default_rng(0).permutation(n) / n  # distinct: no ties at the cut
    model = OnlineL1NoveltyDetector(top_q=as_type(q))
    novel, _ = model.flag_novel(scores)
    assert int(novel.sum()) == math.ceil(Fraction(q) * n)


@pytest.mark.parametrize("as_type", _FLOAT_TYPES)
@pytest.mark.parametrize(("n_poor", "grows"), [(29, False), (30, True)])
def test_growth_fraction_counts_the_decimal(as_type: type, n_poor: int, grows: bool) -> None:
    """Atoms grow when MORE than ``grow_fraction`` of the window is poorly represented: 29 of
    100 documents are not more than 0.29 of them (in float64 ``0.29 * 100`` is
    28.999999999999996, and 29 poor documents grew the dictionary)."""
    rng = np.random.default_rng(0)
    X = _unit_rows(rng, 100, 30)
    model = OnlineL1NoveltyDetector(n_components=5, grow_fraction=as_type("0.29")).fit(X[:40])
    k = model.components_.shape[1]
    scores = np.zeros(100)
    scores[:n_poor] = 0.9  # above grow_threshold (0.7)
    model.partial_fit(X, codes=sp.csr_matrix((100, k)), scores=scores)
    assert model.components_.shape[1] == (k + n_poor if grows else k)


_INVALID = [
    ({"atom_terms": 0}, "atom_terms must be None or >= 1"),
    ({"atom_terms": 2.5}, "atom_terms must be None or an integer >= 1"),
    ({"update_steps": 0}, "update_steps must be >= 1"),
    ({"update_steps": -1}, "update_steps must be >= 1"),
    ({"update_steps": 1.0}, "update_steps must be an integer >= 1"),
    ({"update_passes": True}, "update_passes must be an integer >= 1"),
    ({"coding_max_iter": -1}, "coding_max_iter must be >= 0"),
    ({"coding_polish_after": -1}, "coding_polish_after must be None or >= 0"),
    ({"n_init_iter": -1}, "n_init_iter must be >= 0"),
    ({"init_dict_iter": -2}, "init_dict_iter must be >= 0"),
    ({"grow_size": -1}, "grow_size must be >= 0"),
    ({"grow_fraction": float("nan")}, "grow_fraction must be a finite number >= 0"),
    ({"n_components": 0}, "n_components must be >= 1"),
    ({"max_step_documents": 0}, "max_step_documents must be None or >= 1"),
]


@pytest.mark.parametrize(("params", "message"), _INVALID)
def test_out_of_range_hyper_parameters_are_refused_at_fit(
    params: dict[str, object], message: str
) -> None:
    """An integer hyper-parameter out of its range raises ``ValueError`` naming it at ``fit``
    (``atom_terms=0`` seeded empty atoms, ``update_steps=0`` learnt nothing, a negative
    ``coding_max_iter`` ran as 0, all silently)."""
    X = _unit_rows(np.random.default_rng(0), 30, 12)
    with pytest.raises(ValueError, match=message):
        OnlineL1NoveltyDetector(**{"n_components": 5, **params}).fit(X)


@pytest.mark.parametrize(("params", "message"), _INVALID)
def test_out_of_range_hyper_parameters_are_refused_at_partial_fit_before_any_change(
    params: dict[str, object], message: str
) -> None:
    """The same values set on a fitted model: ``partial_fit`` refuses them and leaves the model
    as it was."""
    X = _unit_rows(np.random.default_rng(0), 30, 12)
    model = OnlineL1NoveltyDetector(n_components=5).fit(X[:20])
    before = model.get_state()
    with pytest.raises(ValueError, match=message):
        model.set_params(**params).partial_fit(X[20:])
    after = model.get_state()
    assert before.keys() == after.keys()
    for key, value in before.items():
        np.testing.assert_array_equal(np.asarray(after[key]), np.asarray(value), err_msg=key)


@pytest.mark.parametrize(
    "params",
    [
        {"coding_max_iter": 0, "coding_polish_after": 0},  # the polish alone
        {"n_init_iter": 0, "init_dict_iter": 0},  # the seed atoms as they are
        {"atom_terms": None, "grow_size": 0, "max_step_documents": None},
        {"coding_polish_after": None, "update_steps": np.int64(2), "update_passes": 2},
    ],
)
def test_boundary_hyper_parameters_are_accepted(params: dict[str, object]) -> None:
    """The lowest value of each range (and ``None`` where it means "off") fits and learns."""
    X = _unit_rows(np.random.default_rng(0), 30, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # ADMM alone may stop at its cap
        model = OnlineL1NoveltyDetector(**{"n_components": 5, **params}).fit(X[:20])
        model.partial_fit(X[20:])
    assert model.n_windows_ == 1


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"initial_atoms": 1, "max_atoms": 1, "new_atoms_per_window": 0, "max_step_documents": 0},
        {"new_atoms_per_window": 1, "novel_top_q": 1.0, "max_step_documents": 1},
    ],
)
def test_the_products_documented_ranges_pass_the_checks(overrides: dict[str, object]) -> None:
    """Every detector setting ``sparsewatch.config`` documents as valid (its range checks'
    boundaries included) builds a model that fits and learns a window."""
    model = build_models(DetectorConfig(**overrides)).detector.model
    X = _unit_rows(np.random.default_rng(0), 30, 12)
    model.fit(X[:20]).partial_fit(X[20:])
    assert model.n_windows_ == 1


def _huge_atom_instance() -> tuple[np.ndarray, np.ndarray]:
    """121 documents of 50 active atoms each (two polish groups of up to 4,096 variables: 81
    and 40 documents) and an atom of one entry 1e16 on term ``m`` that no document uses."""
    rng = np.random.default_rng(0)
    m = 40
    A = np.zeros((m + 1, 51))
    A[:m, :50] = rng.random((m, 50))
    A[:, :50] /= A[:, :50].sum(axis=0)
    A[m, 50] = 1e16
    P = np.zeros((m + 1, 121))
    P[:m] = rng.random((m, 121)) ** 3
    return P / P.sum(axis=0), A


def test_polish_solves_an_atom_of_an_entry_beyond_highs_limits() -> None:
    """HiGHS rejects matrix entries above 1e15: a document using an atom of entry 1e16 was left
    unsolved with its whole group. Columns are solved at unit scale, so it is exact: term ``m``
    is explained by that atom at a cost of ``lambda q_m / 1e16``, the rest as without it."""
    P, A = _huge_atom_instance()
    m = A.shape[0] - 1
    P[m, 7] = P[:m, 7].sum()
    P /= P.sum(axis=0)
    res = l1_sparse_code(P, A, 0.01, polish_after=0, dtype=np.float64)
    assert res.converged.all() and res.n_polished == P.shape[1]
    rest = l1_sparse_code(P[:m, [7]], A[:m, :50], 0.01, polish_after=0, dtype=np.float64)
    np.testing.assert_allclose(res.objective[7], rest.objective[0], rtol=1e-7)
    np.testing.assert_allclose(res.codes[7, 50], P[m, 7] / 1e16, rtol=1e-7)


@pytest.mark.parametrize("bad_first", [True, False])
def test_a_failed_polish_group_keeps_the_other_groups_exact(
    bad_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HiGHS failing on one group of the polish left every document with the ADMM iterates:
    the other group keeps the exact codes HiGHS found (certified, the objectives of coding its
    documents without the failing one); only the failing group's documents are left
    unconverged, with the objectives of their ADMM iterates. HiGHS is made to reject one group's
    LP as it rejects any: by an entry above 1e15 (the polish itself no longer builds one)."""
    P, A = _huge_atom_instance()
    failing_call = 0 if bad_first else 1
    calls = []
    build_lp = l1_coding._lp

    def lp_with_a_rejected_entry(*args: Any) -> Any:
        lp = build_lp(*args)
        if len(calls) == failing_call:
            lp.a_matrix_.value_ = np.r_[1e16, np.asarray(lp.a_matrix_.value_)[1:]]
        calls.append(lp)
        return lp

    monkeypatch.setattr(l1_coding, "_lp", lp_with_a_rejected_entry)
    with pytest.warns(ConvergenceWarning, match=r" of 121 "):
        res = l1_sparse_code(P, A, 0.01, polish_after=0, dtype=np.float64)
    assert len(calls) == 2
    bad = 0 if bad_first else 120
    solved = np.flatnonzero(res.converged)
    assert not res.converged[bad]
    assert solved.size == res.n_polished >= 40  # a whole group of documents
    assert (res.gap[solved] == 0).all()
    assert (res.gap[~res.converged] == np.inf).all()
    monkeypatch.undo()
    alone = l1_sparse_code(P[:, solved], A, 0.01, polish_after=0, dtype=np.float64)
    assert alone.converged.all()
    np.testing.assert_allclose(res.objective[solved], alone.objective, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(res.objective[~res.converged], 1.0, rtol=1e-12)  # x = 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("scale", [1e4, 1e8])
def test_stall_stop_without_polish_is_scale_free(dtype: type, scale: float) -> None:
    """Without the polish, a document of l1 mass ``s`` stops where the same document of unit
    mass does: the stall stop compared a scale-free dual residual with ``tol_residual
    ||q_d||_1``, so documents of mass 1e8 stopped, flagged converged, at objectives up to 3 %
    above the optimum."""
    P, A = noisy_sparse_problem(1)
    exact = l1_sparse_code(P, A, 0.05, over_weight=0.3, dtype=np.float64)
    kwargs = {"over_weight": 0.3, "dtype": dtype, "polish_after": None}
    unit = l1_sparse_code(P, A, 0.05, **kwargs)
    large = l1_sparse_code(P * scale, A, 0.05, **kwargs)
    assert unit.converged.all() and large.converged.all()
    np.testing.assert_allclose(large.objective / scale, exact.objective, rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(unit.objective, exact.objective, rtol=2e-5, atol=1e-5)
