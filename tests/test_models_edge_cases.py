"""Model edge cases: dense empty windows for the l1/l2 novelty models, the dtype of the
scores of documents without terms, parameter checks of Algorithm 5, StreamingTfidf and OIADMM,
an unfitted StreamingTfidf's state, and first-story scores of exact duplicates (each test failed
before its fix)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sparsewatch.models.first_story import ExactFirstStory, LSHFirstStory
from sparsewatch.models.l1_coding import l1_sparse_code
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.novelty_baselines import BatchL1Novelty, L2BatchNovelty
from sparsewatch.models.oiadmm import OIADMM
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import Detector

from tests.support.arrays import to_dense

NOVELTY_MODELS = [OnlineL1NoveltyDetector, L2BatchNovelty, BatchL1Novelty]


def _documents(n: int = 40, m: int = 12) -> np.ndarray:
    X = np.random.default_rng(0).random((n, m))
    return X / X.sum(axis=1, keepdims=True)


def _learned(model: BaseEstimator) -> dict[str, np.ndarray]:
    """What a partial_fit can change, as dense arrays."""
    if isinstance(model, OnlineL1NoveltyDetector):
        return {k: to_dense(v) for k, v in model.get_state().items()}
    return {
        "components": model.components_,
        "P": to_dense(model.P_),
        "codes": to_dense(model.codes_),
    }


@pytest.mark.parametrize("cls", NOVELTY_MODELS)
def test_a_dense_empty_window_passes_as_a_sparse_one(cls: type[BaseEstimator]) -> None:
    """``_check_documents`` promises that an empty window passes once fitted; a dense one failed
    in scikit-learn's non-negativity check (the minimum of an empty array)."""
    X = _documents()
    dense_empty, sparse_empty = np.zeros((0, 12)), sp.csr_matrix((0, 12))
    model = cls(n_components=10).fit(X)
    for method in ("score_samples", "transform"):
        got = getattr(model, method)(dense_empty)
        want = getattr(model, method)(sparse_empty)
        assert type(got) is type(want) and got.shape == want.shape and got.dtype == want.dtype
    by_dense = cls(n_components=10).fit(X).partial_fit(dense_empty)
    by_sparse = cls(n_components=10).fit(X).partial_fit(sparse_empty)
    want = _learned(by_sparse)
    for name, value in _learned(by_dense).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)
    with pytest.raises(ValueError, match="expecting 12 features"):  # not the empty-min error
        model.score_samples(np.zeros((3, 0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scores_of_documents_without_terms_are_floats(dtype: type) -> None:
    """With no stored entry in ``P`` the early return built the objective by a weighted bincount
    of nothing, which numpy returns as int64: the dtype of the scores depended on the batch."""
    A = np.full((3, 2), 1 / 3, dtype=dtype)
    P = np.zeros((3, 2), dtype=dtype)
    P[0, 1] = 1.0
    normal = l1_sparse_code(P, A)
    empty = l1_sparse_code(np.zeros((3, 2), dtype=dtype), A)
    assert empty.objective.dtype == normal.objective.dtype == np.float64
    assert empty.reconstruction_error.dtype == normal.reconstruction_error.dtype
    np.testing.assert_array_equal(empty.objective, 0.0)
    X = np.abs(np.random.default_rng(0).random((10, 6)))
    batch = BatchL1Novelty(n_components=4).fit(X)
    assert batch.score_samples(np.zeros((2, 6))).dtype == batch.score_samples(X[:2]).dtype
    online = OnlineL1NoveltyDetector(n_components=4, score_margin=False).fit(X)
    assert online.score_samples(np.zeros((2, 6))).dtype == np.float64


@pytest.mark.parametrize("lam", [np.nan, -0.1, np.inf])
def test_l1_coding_refuses_an_invalid_lambda(lam: float) -> None:
    with pytest.raises(ValueError, match="lam must be finite and >= 0"):
        l1_sparse_code(np.ones((3, 2)), np.full((3, 2), 1 / 3), lam)


def test_l1_coding_refuses_a_warm_start_of_another_shape() -> None:
    """``x0`` is ``(n, k)``: a ``(k, n)`` or wider one was indexed silently (or failed later)."""
    P, A = np.ones((3, 2)), np.full((3, 4), 1 / 3)
    for x0 in (np.zeros((4, 2)), sp.csr_matrix((2, 5))):
        with pytest.raises(ValueError, match=r"x0 must have shape \(n, k\) = \(2, 4\)"):
            l1_sparse_code(P, A, x0=x0)
    assert l1_sparse_code(P, A, x0=np.zeros((2, 4))).objective.shape == (2,)


@pytest.mark.parametrize("half_life", [0, -5.0, np.nan])
def test_tfidf_refuses_a_half_life_that_is_not_positive(half_life: float) -> None:
    """``df_half_life = 0`` divided by zero; a negative one made the frequencies grow. Invalid
    hyper-parameters raise before any state changes."""
    with pytest.raises(ValueError, match="df_half_life must be > 0 or None"):
        StreamingTfidf(df_half_life=half_life).fit(["aa"])
    tfidf = StreamingTfidf().fit(["quake hits the coast"])
    state = tfidf.get_state()
    tfidf.set_params(df_half_life=half_life)
    for learn in (tfidf.fit, tfidf.partial_fit, tfidf.partial_fit_transform):
        with pytest.raises(ValueError, match="df_half_life"):
            learn(["a new story"])
    for name, value in state.items():
        np.testing.assert_array_equal(tfidf.get_state()[name], value, err_msg=name)


def test_oiadmm_step_before_initialize_is_not_fitted() -> None:
    with pytest.raises(NotFittedError, match="initialize"):
        OIADMM().partial_fit(np.ones((3, 2)), np.ones((2, 2)))


def test_unfitted_tfidf_state_is_empty_and_changes_nothing() -> None:
    """``get_state`` initialised an unfitted instance, whose ``transform`` then returned an empty
    matrix instead of raising ``NotFittedError``."""
    tfidf = StreamingTfidf()
    state = tfidf.get_state()
    assert state["terms"].size == 0 and state["df"].size == 0 and int(state["n_docs"]) == 0
    with pytest.raises(NotFittedError):
        tfidf.transform(["quake hits the coast"])
    # a detector in warm-up checkpoints the empty state; restored, it goes on as before
    detector = Detector(model=OnlineL1NoveltyDetector(n_components=2), warmup_docs=4)
    detector.process_window(["quake hits the coast", "coast guard"])
    restored = Detector(model=OnlineL1NoveltyDetector(n_components=2), warmup_docs=4)
    restored.set_state(detector.get_state())
    assert restored.process_window(["quake again", "rescue boats"]).warmup
    assert restored.fitted


@pytest.mark.parametrize("cls", [ExactFirstStory, LSHFirstStory])
def test_first_story_scores_of_duplicates_stay_in_the_unit_interval(cls: type) -> None:
    """``1 - max cosine`` of a stored document was ``-4.4e-16`` (its cosine rounds above 1)."""
    X = np.random.default_rng(0).random((50, 30))
    model = cls().fit(X)
    scores = model.score_samples(X)
    assert scores.min() >= 0.0 and scores.max() <= 1.0
    np.testing.assert_allclose(scores, 0.0, atol=1e-12)
    assert model.max_similarity(X).max() <= 1.0
    if cls is ExactFirstStory:
        stream = cls().score_stream(np.vstack([X, X]))
        assert stream.min() >= 0.0
        np.testing.assert_allclose(stream[50:], 0.0, atol=1e-12)
