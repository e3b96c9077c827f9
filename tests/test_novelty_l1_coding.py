"""l1 sparse coding (Algorithm 5) against exact LP optima (HiGHS)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog
from sklearn.exceptions import ConvergenceWarning
from sparsewatch.models.l1_coding import (
    l1_objective,
    l1_sparse_code,
    l1_sparse_code_dense,
    weighted_l1_loss,
)
from sparsewatch.models.projections import project_l1_ball_nonneg

from tests.support.l1_coding import lp_optimum


def random_instance(seed: int, m: int = 250, k: int = 20, n: int = 40):
    rng = np.random.default_rng(seed)
    A = project_l1_ball_nonneg(3 * rng.random((m, k)) * (rng.random((m, k)) < 0.1))
    X = rng.random((k, n)) * (rng.random((k, n)) < 0.15)
    P = (A @ X + rng.random((m, n)) * (rng.random((m, n)) < 0.03)) * (rng.random((m, n)) < 0.5)
    P /= np.maximum(P.sum(axis=0), 1e-12)
    return sp.csc_matrix(P), A


@pytest.mark.parametrize("lam", [0.01, 0.1, 0.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_objective_matches_lp_random(seed: int, lam: float) -> None:
    P, A = random_instance(seed)
    res = l1_sparse_code(P, A, lam)
    ref = np.array([lp_optimum(P[:, j].toarray().ravel(), A, lam) for j in range(P.shape[1])])
    assert np.all(res.objective <= ref * (1 + 1e-3) + 1e-12)
    assert np.all(res.objective >= ref * (1 - 1e-9) - 1e-12)  # a feasible x cannot beat the LP
    obj, rec = l1_objective(P, A, res.codes, lam)
    np.testing.assert_allclose(res.objective, obj, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.reconstruction_error, rec, rtol=1e-9, atol=1e-12)
    assert res.codes.shape == (P.shape[1], A.shape[1]) and res.codes.min() >= 0


def test_float32_within_tolerance() -> None:
    P, A = random_instance(3)
    ref = l1_sparse_code(P, A, 0.1).objective
    res = l1_sparse_code(P, A.astype(np.float32), 0.1)
    assert res.codes.dtype == np.float32
    np.testing.assert_allclose(res.objective, ref, rtol=1e-3)


def test_screening_gives_exact_one_without_iterations() -> None:
    rng = np.random.default_rng(0)
    m, k, n = 100, 5, 8
    A = np.zeros((m, k))
    A[:50] = project_l1_ball_nonneg(rng.random((50, k)))  # atoms live on rows 0..49
    P = np.zeros((m, n))
    P[50:] = rng.random((50, n))  # documents live on rows 50..99
    P /= P.sum(axis=0)
    res = l1_sparse_code(P, A, 0.1)
    assert res.n_iter == 0 and res.n_screened == n
    np.testing.assert_allclose(res.objective, np.abs(P).sum(axis=0), rtol=1e-14)  # ||p||_1 = 1
    assert res.codes.nnz == 0


def test_document_equal_to_atom_is_explained() -> None:
    rng = np.random.default_rng(1)
    A = project_l1_ball_nonneg(rng.random((60, 4)) * (rng.random((60, 4)) < 0.2), radius=1.0)
    A /= A.sum(axis=0)
    P = A[:, [2]].copy()
    res = l1_sparse_code(P, A, 0.1)
    ref = lp_optimum(P.ravel(), A, 0.1)
    assert res.objective[0] <= ref * (1 + 1e-3)
    assert ref <= 0.1 + 1e-9  # x = e_2 reaches lambda


def test_warm_start_and_dense_baseline_agree() -> None:
    P, A = random_instance(4, n=15)
    cold = l1_sparse_code(P, A, 0.1)
    warm = l1_sparse_code(P, A, 0.1, x0=cold.codes)
    assert warm.n_iter <= cold.n_iter
    np.testing.assert_allclose(warm.objective, cold.objective, rtol=1e-3)
    X = l1_sparse_code_dense(P, A, 0.1, max_iter=3000, tol=1e-9)
    obj, _ = l1_objective(P, A, X.T, 0.1)
    np.testing.assert_allclose(obj, cold.objective, rtol=2e-3)


def test_rejects_negative_dictionary_and_shape_mismatch() -> None:
    with pytest.raises(ValueError):
        l1_sparse_code(np.ones((3, 1)), -np.ones((3, 2)))
    with pytest.raises(ValueError):
        l1_sparse_code(np.ones((3, 1)), np.ones((4, 2)))


@pytest.mark.parametrize("scale", [1e-9, 1e-7, 1e-5, 1.0, 1e3])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_exact_polish_does_not_depend_on_the_documents_scale(seed: int, scale: float) -> None:
    """The problem is positively homogeneous (``f(s p) = s f(p)``, codes ``s x``), but HiGHS's
    tolerances are absolute: documents of entries about 1e-7 came back from the polish with
    zero codes, certified exact (gap 0), at objectives up to 5x the optimum."""
    P, A = random_instance(seed, m=60, k=8, n=12)
    ref = np.array([lp_optimum(P[:, j].toarray().ravel(), A, 0.05) for j in range(P.shape[1])])
    res = l1_sparse_code(P * scale, A, 0.05, polish_after=0, dtype=np.float64)
    assert res.n_polished > 0
    np.testing.assert_allclose(res.objective / scale, ref, rtol=1e-6, atol=1e-9)
    obj, _ = l1_objective(P * scale, A, res.codes, 0.05)
    np.testing.assert_allclose(res.objective, obj, rtol=1e-9)


def test_rejects_a_non_finite_warm_start() -> None:
    """A NaN or infinite x0 went straight into the codes and the objective without the polish."""
    A = np.array([[0.5, 0.0], [0.5, 0.5], [0.0, 0.5]])
    p = np.array([[0.5], [0.5], [0.0]])
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="x0 contains NaN or infinite"):
            l1_sparse_code(p, A, 0.1, x0=np.array([[bad, 0.0]]), polish_after=None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rejects_non_finite_documents_and_dictionaries(dtype: type) -> None:
    """NaN/inf gave a NaN score (document) or passed the sign check (``nan < 0`` is false) and
    scored the document as unexplained (dictionary); both now raise ``ValueError``."""
    A = np.array([[0.5, 0.0], [0.5, 0.5], [0.0, 0.5]])
    p = np.array([[0.5], [0.5], [0.0]])
    assert l1_sparse_code(p, A, 0.1, dtype=dtype).objective[0] == pytest.approx(0.1, abs=1e-3)
    for bad in (np.nan, np.inf, -np.inf):
        P = p.copy()
        P[1, 0] = bad
        for doc in (P, sp.csc_matrix(P)):
            with pytest.raises(ValueError, match="NaN or infinite"):
                l1_sparse_code(doc, A, 0.1, dtype=dtype)
        D = A.copy()
        D[0, 0] = bad
        for dictionary in (D, sp.csc_matrix(D)):
            with pytest.raises(ValueError, match="finite and non-negative"):
                l1_sparse_code(p, dictionary, 0.1, dtype=dtype)


@pytest.mark.parametrize("fmt", ["csc", "csr"])
def test_duplicate_entries_are_summed_like_scipy(fmt: str) -> None:
    """A non-canonical sparse ``P`` (duplicate entries of one term, summed by scipy) is the
    document of their sum: each duplicate was coded as a separate row."""
    A = np.array([[1.0, 0.0], [0.0, 0.6], [0.0, 0.4]])
    dup = sp.csc_matrix(
        (np.array([0.5, 0.5, 0.3, 0.1, 0.2]), np.array([0, 0, 1, 2, 1]), np.array([0, 2, 5])),
        shape=(3, 2),
    )
    assert not dup.has_canonical_format
    P = dup if fmt == "csc" else dup.tocsr()
    dense = dup.toarray()
    ref = l1_sparse_code(dense, A, 0.1)
    res = l1_sparse_code(P, A, 0.1)
    np.testing.assert_allclose(res.objective, ref.objective, atol=1e-9)
    np.testing.assert_allclose(res.codes.toarray(), ref.codes.toarray(), atol=1e-9)
    for j in range(2):
        assert res.objective[j] == pytest.approx(lp_optimum(dense[:, j], A, 0.1), abs=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_documents_passed_are_left_untouched(dtype: type) -> None:
    """The clean-up of ``P`` (duplicates summed, explicit zeros dropped, indices sorted) works
    on a copy: a CSC ``P`` of the coding dtype shared its arrays and was rewritten in place."""
    A = np.array([[1.0, 0.0], [0.0, 0.6], [0.0, 0.4]])
    P = sp.csc_matrix(
        (np.array([0.0, 0.2, 0.5, 0.5, 0.3], dtype=dtype), [1, 2, 0, 0, 1], [0, 2, 5]),
        shape=(3, 2),
    )
    arrays = [P.data.copy(), P.indices.copy(), P.indptr.copy()]
    dense = P.toarray()
    l1_sparse_code(P, A, 0.1, dtype=dtype)
    for before, after in zip(arrays, (P.data, P.indices, P.indptr), strict=True):
        np.testing.assert_array_equal(after, before)
    np.testing.assert_array_equal(P.toarray(), dense)


@pytest.fixture(scope="module")
def reuters_instances(shared_data) -> list[tuple[sp.csc_matrix, np.ndarray]]:
    """Real TF-IDF columns (full and salient-term truncated) and a learned l1 dictionary."""
    import gzip
    import json

    from sparsewatch.models.novelty import OnlineL1NoveltyDetector
    from sparsewatch.models.text_features import StreamingTfidf

    with gzip.open(shared_data / "reuters21578.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for _, line in zip(range(420), fh, strict=False)]
    texts = [r["title"] + "\n" + r["body"] for r in rows]
    out = []
    for truncate in (None, 20):
        f = StreamingTfidf(max_terms_per_doc=truncate).partial_fit(texts[:400])
        est = OnlineL1NoveltyDetector(n_components=40, n_init_iter=1, dtype=np.float64)
        A = est.fit(f.transform(texts[:400]).T).components_
        out.append((f.transform(texts[400:]), A))
    return out


@pytest.mark.data
@pytest.mark.parametrize("lam", [0.05, 0.1, 0.3])
def test_objective_matches_lp_on_reuters_tfidf(reuters_instances, lam: float) -> None:
    used = 0
    for P, A in reuters_instances:
        res = l1_sparse_code(P, A, lam)
        used += int(np.sum(res.objective < 0.99))
        ref = np.array([lp_optimum(P[:, j].toarray().ravel(), A, lam) for j in range(P.shape[1])])
        assert np.all(res.objective <= ref * (1 + 1e-3) + 1e-12)
        assert np.all(res.objective >= ref * (1 - 1e-9) - 1e-12)
    assert used > 0 or lam > 0.1  # not a trivial, all-screened instance


def test_screening_margin_is_the_reduced_cost_at_zero() -> None:
    P, A = random_instance(5, n=30)
    lam = 0.3
    res = l1_sparse_code(P, A, lam)
    support = (P.toarray() != 0).astype(float)
    reduced = A.sum(axis=0) + lam - 2 * support.T @ A  # (n, k)
    np.testing.assert_allclose(res.screening_margin, np.maximum(reduced.min(axis=1), 0), atol=1e-12)
    screened = res.screening_margin > 0
    assert screened.any() and (~screened).any()
    assert np.all(np.diff(res.codes.indptr)[screened] == 0)


def weighted_lp_optimum(p: np.ndarray, A: np.ndarray, lam: float, w: float) -> float:
    """``min lam 1'x + 1'u + w 1'v  s.t.  p - A x = u - v;  x, u, v >= 0`` by HiGHS."""
    m, k = A.shape
    eye = np.eye(m)
    r = linprog(
        np.r_[np.full(k, lam), np.ones(m), np.full(m, w)],
        A_eq=np.hstack([A, eye, -eye]),
        b_eq=p,
        bounds=(0, None),
        method="highs",
    )
    assert r.status == 0
    return float(r.fun)


@pytest.mark.parametrize("polish_after", [None, 0, 300])
@pytest.mark.parametrize("w", [0.05, 0.3, 1.0])
@pytest.mark.parametrize("lam", [0.01, 0.1])
def test_weighted_loss_and_polish_match_lp(lam: float, w: float, polish_after: int | None) -> None:
    """Weighted l1 loss (over-representation charged ``w``), ADMM only / LP polish only / both."""
    P, A = random_instance(6, m=120, k=15, n=25)
    res = l1_sparse_code(P, A, lam, over_weight=w, polish_after=polish_after, tol=1e-4)
    ref = np.array(
        [weighted_lp_optimum(P[:, j].toarray().ravel(), A, lam, w) for j in range(P.shape[1])]
    )
    assert np.all(res.objective <= ref * (1 + 1e-3) + 1e-12)
    assert np.all(res.objective >= ref * (1 - 1e-9) - 1e-12)
    obj, rec = l1_objective(P, A, res.codes, lam, over_weight=w)
    np.testing.assert_allclose(res.objective, obj, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.reconstruction_error, rec, rtol=1e-9, atol=1e-12)
    assert res.converged.all()
    if polish_after == 0:
        assert res.n_iter == 0 and res.n_polished == P.shape[1] - res.n_screened
    if polish_after is None:
        assert res.n_polished == 0


@pytest.mark.parametrize("group_vars", [1, 20, 1 << 15])
def test_polish_in_groups_of_documents_matches_lp(
    group_vars: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The polishing LP is solved a group of whole documents at a time (one document per LP, a
    few, all at once): every document still gets its exact optimum."""
    monkeypatch.setattr("sparsewatch.models.l1_coding._POLISH_VARS", group_vars)
    P, A = random_instance(8, m=120, k=15, n=25)
    res = l1_sparse_code(P, A, 0.05, over_weight=0.3, polish_after=0)
    ref = [weighted_lp_optimum(P[:, j].toarray().ravel(), A, 0.05, 0.3) for j in range(25)]
    np.testing.assert_allclose(res.objective, ref, rtol=1e-7, atol=1e-12)
    assert res.n_polished == 25 - res.n_screened > 10


def test_weighted_screening_margin() -> None:
    """``w < 1`` admits atom j once ``(1 + w) m_j > w ||a_j||_1 + lambda``; the margin is the
    smallest of those reduced costs at ``x = 0``, clipped at 0."""
    P, A = random_instance(7, n=30)
    lam, w = 0.1, 0.2
    res = l1_sparse_code(P, A, lam, over_weight=w)
    support = (P.toarray() != 0).astype(float)
    reduced = w * A.sum(axis=0) + lam - (1 + w) * support.T @ A
    np.testing.assert_allclose(res.screening_margin, np.maximum(reduced.min(axis=1), 0), atol=1e-12)
    assert np.all(np.diff(res.codes.indptr)[res.screening_margin > 0] == 0)
    np.testing.assert_array_equal(weighted_l1_loss(np.array([-2.0, 0.0, 3.0]), 0.25), [0.5, 0, 3])
    with pytest.raises(ValueError):
        l1_sparse_code(P, A, lam, over_weight=0.0)


@pytest.mark.parametrize("w", [0.3, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_sparse_dictionary_gives_the_dense_result(seed: int, w: float) -> None:
    """A CSC dictionary (the detector's layout) is coded as the dense one, and both match the
    LP optimum. Equal to rounding, not bit for bit: the atoms' l1 norms are summed in a
    different order in each layout (pairwise down a dense column, by scipy over the stored
    entries of a sparse one), which can move their last bit, and the codes and objectives
    with them."""
    P, A = random_instance(seed)
    dense = l1_sparse_code(P, A, 0.1, over_weight=w)
    sparse = l1_sparse_code(P, sp.csc_matrix(A), 0.1, over_weight=w)
    np.testing.assert_allclose(sparse.objective, dense.objective, rtol=1e-14, atol=0)
    np.testing.assert_allclose(sparse.codes.toarray(), dense.codes.toarray(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(sparse.screening_margin, dense.screening_margin, rtol=0, atol=1e-15)
    obj, _ = l1_objective(P, sp.csc_matrix(A), sparse.codes, 0.1, over_weight=w)
    np.testing.assert_allclose(sparse.objective, obj, rtol=1e-9, atol=1e-12)
    if w == 1.0:
        ref = [lp_optimum(P[:, j].toarray().ravel(), A, 0.1) for j in range(P.shape[1])]
        assert np.all(sparse.objective <= np.array(ref) * (1 + 1e-3) + 1e-12)
    with pytest.raises(ValueError):
        l1_sparse_code(P, -sp.csc_matrix(A))


def test_stalled_blocks_are_polished_not_declared_converged() -> None:
    """14 documents of a recorded detector window (float32, 1,500 short atoms, ``w = 0.1``,
    ``lam = 0.01``; reduced to the 82 rows and 222 atoms they can use, the atoms' other mass
    summed into one extra row so every ``||a_j||_1`` is kept). Their ADMM residuals stall in
    float32 with relative duality gaps up to 0.2: the residual stop once declared 13 of them
    converged at objectives up to 4 % above the optimum. With the polish only a certified gap
    stops a block; every objective must match the exact LP."""
    data = np.load(Path(__file__).parent / "data" / "l1_stalled_blocks.npz", allow_pickle=False)
    P, A = data["P"], data["A"]
    lam, tol, w = float(data["lam"]), float(data["tol"]), float(data["over_weight"])
    res = l1_sparse_code(P, A, lam, tol=tol, over_weight=w, dtype=np.float32, polish_after=300)
    exact = np.array(
        [weighted_lp_optimum(P[:, j].astype(float), A.astype(float), lam, w) for j in range(14)]
    )
    assert res.converged.all()
    np.testing.assert_array_less(res.objective, exact * (1 + tol) + 1e-6)
    assert np.all(res.gap <= tol * res.objective + 1e-6)


@pytest.mark.parametrize("lam", [0.0, 1e-9, 1e-6])
def test_atoms_inside_the_support_at_tiny_lam_match_lp(lam: float) -> None:
    """float32 dictionary, ``lam`` at or near 0, atoms lying entirely on a document's terms: their
    reduced cost ``c_j = lam + w (||a_j||_1 - m_j)`` is ``lam`` up to rounding and must never be
    negative (a negative one left the dual point unscaled: an infeasible dual certified a zero
    gap at an objective 10 % above the LP optimum). Every document must reach the exact LP
    optimum, with a finite, non-negative certified gap."""
    rng = np.random.default_rng(15)
    m, k, n, w = 15, 6, 40, 0.1
    A = rng.random((m, k)) * (rng.random((m, k)) < 0.4)
    A[rng.integers(0, m, k), np.arange(k)] += 0.5  # no empty atom
    A = (A / A.sum(axis=0)).astype(np.float32)
    P = np.zeros((m, n))
    for j in range(n):  # the terms of two atoms plus a few random ones
        atoms = rng.choice(k, 2, replace=False)
        support = (A[:, atoms].sum(axis=1) > 0) | (rng.random(m) < 0.2)
        P[support, j] = rng.random(support.sum())
    P /= P.sum(axis=0)
    res = l1_sparse_code(sp.csc_matrix(P), A, lam, over_weight=w)
    ref = np.array([weighted_lp_optimum(P[:, j], A.astype(float), lam, w) for j in range(n)])
    assert np.all(np.isfinite(res.gap)) and np.all(res.gap >= 0) and res.converged.all()
    np.testing.assert_allclose(res.objective, ref, rtol=1e-4, atol=1e-6)


def test_polish_prints_nothing_on_stdout() -> None:
    """The polishing LP leaves the process's stdout alone: HiGHS's Python wrapper printed its
    banner there (at the C level, once per process) the first time it was built, which put two
    lines in front of whatever a command writes on stdout."""
    code = (
        "import numpy as np, scipy.sparse as sp\n"
        "from sparsewatch.models.l1_coding import l1_sparse_code\n"
        "rng = np.random.default_rng(0)\n"
        "A = rng.random((30, 5)); A /= A.sum(axis=0)\n"
        "P = sp.csc_matrix(rng.random((30, 4)))\n"
        "res = l1_sparse_code(P, A, 0.1, polish_after=0)\n"
        "assert res.n_polished == 4, res.n_polished\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout == ""


def _weak_atom_instance() -> tuple[sp.csc_matrix, np.ndarray]:
    """A document needing an atom of entries 1e-12 beside one of 0.5 (optimum 0 at lambda 0)."""
    A = np.array([[0.5, 0.0], [0.5, 0.0], [0.0, 1e-12]])
    return sp.csc_matrix(np.array([[0.4], [0.4], [0.2]])), A


def test_an_atom_of_tiny_entries_keeps_step_sizes_finite() -> None:
    """The power iterate of the step-size bound underflowed to 0 on the weak atom: 0/0 made the
    step size, codes, objective and gap NaN."""
    P, A = _weak_atom_instance()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        res = l1_sparse_code(P, A, 0.0, polish_after=None)
    assert np.isfinite(res.objective).all() and np.isfinite(res.gap).all()
    assert np.isfinite(res.codes.toarray()).all()
    assert res.objective[0] <= 0.4 + 1e-9  # no worse than the strong atom alone


def test_polish_reaches_an_optimum_through_an_atom_of_tiny_entries() -> None:
    """HiGHS drops matrix entries below 1e-9: unscaled, the weak atom was left out and the
    polish certified objective 0.2 (gap 0) where x = (0.8, 2e11) reaches 0."""
    P, A = _weak_atom_instance()
    res = l1_sparse_code(P, A, 0.0, polish_after=30)
    assert res.converged[0]
    assert res.objective[0] <= 1e-9
    np.testing.assert_allclose(res.codes.toarray()[0], [0.8, 2e11], rtol=1e-6)


def test_float32_document_of_tiny_mass_does_not_overflow_the_penalty() -> None:
    """phi_d = phi * rows / ||q_d||_1 passed float32's range at mass 1e-38: NaN iterates."""
    rng = np.random.default_rng(0)
    A = rng.random((6, 4)) ** 2
    A /= A.sum(axis=0)
    p = rng.random((6, 1))
    p *= 1e-38 / p.sum()
    with np.errstate(under="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # (30,000 iterations at this scale)
        res = l1_sparse_code(sp.csc_matrix(p), A.astype(np.float32), 0.01, polish_after=None)
    assert np.isfinite(res.objective).all() and np.isfinite(res.gap).all()
    assert res.objective[0] <= 1.01e-38  # no worse than x = 0
