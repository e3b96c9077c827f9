"""The novelty models: what a caller learns about whether the l1 coding
(Algorithm 5) converged within its iteration limit, its stopping rule on documents of any size,
OIADMM on a sparse dictionary without atoms, and stop words read as the text is."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sparsewatch.models.l1_coding import l1_sparse_code
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.oiadmm import OIADMM
from sparsewatch.models.text_features import StreamingTfidf, tokenize

from tests.support.l1_coding import noisy_sparse_problem

# two documents a three-atom dictionary explains only partly: neither is screened, and neither is
# certified after a single ADMM iteration
_A = np.array([[0.6, 0.0, 0.2], [0.4, 0.5, 0.2], [0.0, 0.5, 0.6]])
_P = sp.csc_matrix(np.array([[0.5, 0.1], [0.4, 0.3], [0.1, 0.6]]))


def test_iteration_cap_without_polish_warns_and_reports_the_documents() -> None:
    """ADMM alone stopped by ``max_iter`` before certifying a document: a ``ConvergenceWarning``
    says so (``score_samples`` callers never see the per-document flags), and ``converged``
    is false for exactly those documents."""
    with pytest.warns(ConvergenceWarning, match=r"2 of 2 documents"):
        res = l1_sparse_code(_P, _A, 0.01, max_iter=1, polish_after=None)
    assert not res.converged.any()
    assert res.n_iter == 1


def test_polished_or_certified_coding_is_silent() -> None:
    """The default coding (exact LP polish after ``polish_after`` iterations) certifies every
    document: no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = l1_sparse_code(_P, _A, 0.01, max_iter=1)
        assert res.converged.all()
        res = l1_sparse_code(_P, _A, 0.01, polish_after=None, tol=1e-2)
        assert res.converged.all()


def test_no_iteration_no_certificate() -> None:
    """With no ADMM iteration and no polish (``max_iter=0``) nothing bounds the distance of
    the returned codes to the optimum: ``gap`` is infinite, not a certificate of 0."""
    with pytest.warns(ConvergenceWarning):
        res = l1_sparse_code(_P, _A, 0.01, max_iter=0, polish_after=None)
    assert not res.converged.any()
    assert np.isinf(res.gap).all()
    # the bound gap promises holds: objective - gap <= optimum
    exact = l1_sparse_code(_P, _A, 0.01, max_iter=0)  # the LP polish alone: exact
    assert exact.converged.all() and (exact.gap == 0).all()
    assert (res.objective - res.gap <= exact.objective).all()


def test_detector_score_samples_warns_at_the_iteration_cap() -> None:
    """The detector's scoring, configured without the polish and with a tiny iteration cap,
    tells its caller that scores are upper bounds of uncertified codings."""
    rng = np.random.default_rng(0)
    X = rng.random((40, 12)) ** 3
    X /= X.sum(axis=1, keepdims=True)
    model = OnlineL1NoveltyDetector(n_components=10, coding_polish_after=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X[:30])
    model.set_params(coding_max_iter=1)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        model.score_samples(X[30:])


def test_oiadmm_sparse_dictionary_without_atoms_steps_like_the_dense_one() -> None:
    """A CSC dictionary of zero atoms takes the dense step (a dual filled by the first window)
    as a dense one does: no atom moves, the dual follows ``P`` (it raised 'blocks must be
    2-D' from stacking no slab of atoms)."""
    rng = np.random.default_rng(0)
    P = rng.random((6, 4))
    P /= P.sum(axis=0)
    models = [OIADMM(sparse=s).initialize(np.zeros((6, 0))) for s in (False, True)]
    for model in models:
        for _ in range(3):  # the first step fills the dual: the next ones are dense steps
            model.partial_fit(P, np.zeros((0, 4)))
        assert model.components_.shape == (6, 0)
    dense, sparse = models
    assert sp.issparse(sparse.components_)
    np.testing.assert_array_equal(np.asarray(sparse.dual_), np.asarray(dense.dual_))
    assert sparse.violation_ == dense.violation_


@pytest.mark.parametrize(
    ("stop_word", "text", "token"),
    [
        ("don\u2019t", "I don\u2019t know", "don't"),  # typographic apostrophe, as in the text
        ("don't", "I don\u2019t know", "don't"),
        ("cafe\u0301", "caf\u00e9 open", "caf\u00e9"),  # decomposed (NFD) in the list
        ("\u0130zmir", "flights to \u0130zmir", "izmir"),  # Turkish dotted capital I
        ("news\u00adpaper", "the newspaper", "newspaper"),  # soft hyphen
        ("The", "The cat", "the"),
    ],
)
def test_stop_words_are_read_as_the_text_is(stop_word: str, text: str, token: str) -> None:
    """A stop word removes the token its own spelling becomes in a text: the list is normalised
    as the text is (lower case, NFC, ``’`` as ``'``, no soft hyphen). A list written with a
    typographic apostrophe, decomposed accents or a Turkish ``İ`` removed nothing."""
    assert token in tokenize([text], stop_words=frozenset())[0]
    assert token not in tokenize([text], stop_words=frozenset({stop_word}))[0]
    tfidf = StreamingTfidf(stop_words=[stop_word])
    assert token not in tfidf.tokenize([text])[0]
    assert token not in tfidf.fit([text]).vocabulary_


@pytest.mark.parametrize("scale", [1e-15, 1e-30])
@pytest.mark.parametrize("polish_after", [300, None])
def test_tiny_documents_are_coded_to_the_relative_tolerance(
    scale: float, polish_after: int | None
) -> None:
    """The optimum is positively homogeneous in ``p`` (``x`` scales along), and so is the
    stopping rule: a document of l1 mass below ``1e-12`` was certified against an absolute
    floor of ``1e-12`` on its objective, after one check, up to 8x above its optimum."""
    P, A = noisy_sparse_problem(1)
    kwargs = {"over_weight": 0.3, "dtype": np.float64, "polish_after": polish_after}
    unit = l1_sparse_code(P, A, 0.05, **kwargs)
    tiny = l1_sparse_code(P * scale, A, 0.05, **kwargs)
    assert unit.converged.all() and tiny.converged.all()
    np.testing.assert_allclose(tiny.objective / scale, unit.objective, rtol=2e-4)
