"""``max_step_documents``: a window larger than the bound is coded in blocks and learnt in one
OIADMM step per block, so memory and the checkpointed dual stay bounded (burst windows)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.consumers.detector_core import build_models
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.window_detector import _top_atoms

from sparsewatch.config import load_config
from sparsewatch.errors import SparsewatchError
from tests.support.l1_coding import lp_optimum


def topic_matrix(seed: int, n: int, m: int = 120, topics: int = 6) -> sp.csr_matrix:
    """``n`` documents (rows) of ``topics`` disjoint word groups plus sparse noise, unit l1."""
    rng = np.random.default_rng(seed)
    width = m // topics
    X = np.zeros((n, m))
    for i, t in enumerate(rng.integers(0, topics, n)):
        X[i, t * width + rng.choice(width, 6, replace=False)] = rng.random(6) + 0.5
        X[i, rng.choice(m, 2, replace=False)] += 0.2 * rng.random(2)
    return sp.csr_matrix(X / X.sum(axis=1, keepdims=True))


def model(**params: object) -> OnlineL1NoveltyDetector:
    base = {"n_components": 12, "lam": 0.05, "atom_terms": 5, "random_state": 0}
    return OnlineL1NoveltyDetector(**(base | params))


def test_a_window_over_the_bound_is_learnt_in_bounded_steps_and_dual() -> None:
    X0, X = topic_matrix(0, 80), topic_matrix(1, 250)
    bounded = model(max_step_documents=60).fit(X0)
    steps = bounded.oiadmm_.n_steps_
    bounded.partial_fit(X)
    # 250 documents in ceil(250 / 60) = 5 steps of 50; the dual has one step's columns
    assert bounded.oiadmm_.n_steps_ - steps == 5
    assert bounded.oiadmm_.dual_.shape == (X.shape[1], 50)
    state = bounded.get_state()  # the checkpointed dual: dense (n x m) or CSC (m x n)
    dual_docs = (
        state["dual_transposed"].shape[0]
        if "dual_transposed" in state
        else state["dual_indptr"].size - 1
    )
    assert dual_docs == 50
    unbounded = model(max_step_documents=None).fit(X0).partial_fit(X)
    assert unbounded.oiadmm_.dual_.shape == (X.shape[1], 250)
    # a window within the bound is one step, as before
    within = model(max_step_documents=250).fit(X0).partial_fit(X)
    assert within.oiadmm_.n_steps_ == unbounded.oiadmm_.n_steps_
    np.testing.assert_array_equal(
        np.asarray(sp.csc_matrix(within.components_).toarray()),
        np.asarray(sp.csc_matrix(unbounded.components_).toarray()),
    )


def test_blocked_coding_reaches_the_lp_optimum_for_every_document() -> None:
    X0, X = topic_matrix(2, 80), topic_matrix(3, 37)
    m = model(max_step_documents=None, over_weight=1.0, score_margin=False).fit(X0)
    whole = m.code(X)
    res = m.set_params(max_step_documents=8).code(X)  # 5 blocks of 7-8 documents
    A = np.asarray(sp.csc_matrix(m.components_).toarray(), dtype=np.float64)
    assert res.codes.shape == (37, A.shape[1]) and res.objective.shape == (37,)
    assert (res.objective < 0.99).sum() >= 8  # the dictionary explains many of them
    for j in range(X.shape[0]):
        opt = lp_optimum(X[j].toarray().ravel(), A, m.lam)
        assert res.objective[j] == pytest.approx(opt, rel=1.5e-3, abs=1e-6)
    # the codes belong to their documents: ||p - A x||_1 from them is the reported error
    recon = np.abs(X.toarray().T - A @ res.codes.toarray().T).sum(axis=0)
    np.testing.assert_allclose(recon, res.reconstruction_error, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res.objective, whole.objective, rtol=3e-3)


def test_initialisation_uses_the_last_documents_within_the_bound() -> None:
    old = sp.hstack([topic_matrix(4, 100, m=60, topics=3), sp.csr_matrix((100, 60))]).tocsr()
    new = sp.hstack([sp.csr_matrix((100, 60)), topic_matrix(5, 100, m=60, topics=3)]).tocsr()
    m = model(max_step_documents=100).fit(sp.vstack([old, new]))
    A = np.asarray(sp.csc_matrix(m.components_).toarray())
    assert A[:60].sum() == 0 and A[60:].sum() > 0
    both = model(max_step_documents=None).fit(sp.vstack([old, new]))
    assert np.asarray(sp.csc_matrix(both.components_).toarray())[:60].sum() > 0


@pytest.mark.parametrize("bad", [0, -3])
def test_a_bound_below_one_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="max_step_documents"):
        model(max_step_documents=bad).fit(topic_matrix(6, 30))


def dense_top_atoms(codes: sp.csr_matrix, n_top: int) -> np.ndarray:
    """Reference: argsort of the dense codes (ties: the lower atom), -1 for non-positive."""
    dense = codes.toarray()
    order = np.argsort(-dense, axis=1, kind="stable")[:, :n_top]
    vals = np.take_along_axis(dense, order, axis=1)
    return np.where(vals > 0, order, -1).astype(np.int64)


@pytest.mark.parametrize("seed", range(5))
def test_top_atoms_from_the_sparse_codes_equal_the_dense_argsort(seed: int) -> None:
    codes = sp.random(60, 40, density=0.08, random_state=seed, format="lil")
    codes[3, :] = 0  # a document without a code
    codes[5, :4] = 1.0  # four equal largest codes
    codes = sp.csr_matrix(codes)
    codes.data = np.round(codes.data * 4) / 4  # ties, and zeros stored explicitly
    for n_top in (1, 3, 7):
        np.testing.assert_array_equal(_top_atoms(codes, n_top), dense_top_atoms(codes, n_top))
    assert _top_atoms(sp.csr_matrix((4, 0)), 3).tolist() == [[-1, -1, -1]] * 4


@pytest.mark.parametrize(("value", "bound"), [("0", None), ("1", 1), ("500", 500)])
def test_the_step_bounds_come_from_the_configuration(value: str, bound: int | None) -> None:
    env = {
        "SPARSEWATCH_DETECTOR_MAX_STEP_DOCUMENTS": value,
        "SPARSEWATCH_DETECTOR_EMERGING_MAX_DOCUMENTS": value,
    }
    models = build_models(load_config(env=env).detector)
    assert models.detector.model.max_step_documents == bound
    assert models.emerging is not None and models.emerging.max_step_documents == bound
    defaults = build_models(load_config(env={}).detector)
    assert defaults.detector.model.max_step_documents == 1000
    assert defaults.emerging is not None and defaults.emerging.max_step_documents == 2000


@pytest.mark.parametrize(
    "variable",
    [
        "SPARSEWATCH_DETECTOR_MAX_STEP_DOCUMENTS",
        "SPARSEWATCH_DETECTOR_EMERGING_MAX_DOCUMENTS",
        "SPARSEWATCH_MAX_IDLE_STREAMS",
    ],
)
def test_negative_bounds_are_refused_by_the_configuration(variable: str) -> None:
    with pytest.raises(SparsewatchError, match=f"\\({variable}\\) must be >= 0"):
        load_config(env={variable: "-1"})
