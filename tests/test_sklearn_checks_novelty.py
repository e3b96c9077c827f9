"""scikit-learn conformance of the novelty models.

Every check of ``check_estimator`` applies to the models of documents x terms matrices and passes:
no expected failures. The dictionary models (ONLINE, BATCH-IMPL, L2-BATCH) are transformers of
non-negative input (``positive_only``); the nearest-neighbour memories take any real weighting.
``score_samples`` keeps its sign: higher = more novel.

Two estimators are outside the numeric checks by design, and checked here on what applies:

* :class:`StreamingTfidf` takes raw texts (tags ``string``, no ``two_d_array``, as scikit-learn's
  own text vectorisers), so ``check_estimator`` runs none of its checks on it;
* :class:`OIADMM` is the dictionary step of Algorithm 2, not an estimator of ``X``: it has no
  ``fit(X)`` (it starts from a given dictionary) and a step takes a window as COLUMNS with the
  codes of a dictionary (``partial_fit(P, codes)``), where every data check calls ``fit(X, y)``
  on rows.

The streaming behaviour the checks do not see is pinned below: a wider ``X`` is a grown
vocabulary, a narrower one is refused in scikit-learn's words; ``fit`` refuses empty data;
the first-story memories are history-dependent in ``partial_fit``/``score_stream`` only, while
``score_samples`` (no learning) is invariant to the order and batching of its rows (the
invariance checks above).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import (
    check_do_not_raise_errors_in_init_or_set_params,
    check_estimator_cloneable,
    check_estimator_repr,
    check_estimator_tags_renamed,
    check_get_params_invariance,
    check_mixin_order,
    check_no_attributes_set_in_init,
    check_parameters_default_constructible,
    check_set_params,
    check_valid_tag_types,
    parametrize_with_checks,
)
from sparsewatch.models.first_story import ExactFirstStory, LSHFirstStory
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.novelty_baselines import BatchL1Novelty, L2BatchNovelty
from sparsewatch.models.oiadmm import OIADMM
from sparsewatch.models.text_features import StreamingTfidf

_CODING = {"coding_max_iter": 50, "n_init_iter": 1, "init_dict_iter": 2}
DICTIONARY_MODELS = [
    OnlineL1NoveltyDetector(n_components=3, **_CODING),  # grows a CSC dictionary
    OnlineL1NoveltyDetector(n_components=3, grow_threshold=None, **_CODING),  # dense, fixed k
    BatchL1Novelty(n_components=3, eta=2, n_alternations=1, dict_iter=2, **_CODING),
    L2BatchNovelty(n_components=3, eta=2, n_alternations=1, dict_iter=2, code_max_iter=20),
]
MEMORIES = [ExactFirstStory(), LSHFirstStory(n_bits=4, n_tables=2, n_recent=5)]
# the checks of the scikit-learn API that call no ``fit`` (the others need numeric rows)
NO_FIT_CHECKS = [
    check_estimator_cloneable,
    check_estimator_tags_renamed,
    check_valid_tag_types,
    check_estimator_repr,
    check_no_attributes_set_in_init,
    check_do_not_raise_errors_in_init_or_set_params,
    check_mixin_order,
    check_parameters_default_constructible,
    check_get_params_invariance,
    check_set_params,
]


@parametrize_with_checks([*DICTIONARY_MODELS, *MEMORIES], xfail_strict=True)
def test_sklearn_compatible(
    estimator: object, check: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # check_array_api_input (numpy namespace) runs only with SciPy's array API switch on
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    check(estimator)


@pytest.mark.parametrize("check", NO_FIT_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("estimator", [StreamingTfidf(), OIADMM()], ids=lambda e: type(e).__name__)
def test_api_checks_without_fit(estimator: object, check: object) -> None:
    check(type(estimator).__name__, estimator)


def _documents(n: int = 30, m: int = 12, seed: int = 0) -> np.ndarray:
    """Non-negative unit-l1 rows (TF-IDF-like), every one with a term."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, m)) * (rng.random((n, m)) < 0.5)
    X[:, 0] += 0.1
    return X / X.sum(axis=1, keepdims=True)


def _ids(model: object) -> str:
    return type(model).__name__


@pytest.mark.parametrize("model", [*DICTIONARY_MODELS, *MEMORIES], ids=_ids)
def test_narrower_input_is_refused_and_wider_is_a_grown_vocabulary(model: object) -> None:
    """A narrower ``X`` raises scikit-learn's message (it was zero-padded: columns it lacks
    cannot be told from misaligned input); a wider one scores its new terms against zero
    dictionary rows (no atom codes a document on new terms only) or a zero-padded memory
    (novelty 1) without changing the model, and ``partial_fit`` grows ``n_features_in_``."""
    X = _documents()
    fitted = clone(model).fit(X)
    expected = r"X has 11 features, but \w+ is expecting 12 features as input"
    methods = [fitted.score_samples, fitted.partial_fit]
    methods += [fitted.transform] if hasattr(fitted, "transform") else []
    for method in methods:
        with pytest.raises(ValueError, match=expected):
            method(X[:, :11])
    assert fitted.n_features_in_ == 12
    new = np.zeros((3, 15))
    new[:, 12:] = 1 / 3  # documents only on the three new terms
    wider = np.vstack([np.hstack([X[:5], np.zeros((5, 3))]), new])
    scores = fitted.score_samples(wider)
    np.testing.assert_allclose(scores[:5], fitted.score_samples(X[:5]), atol=1e-6)
    if hasattr(fitted, "transform"):
        assert sp.csr_matrix(fitted.transform(new)).count_nonzero() == 0
    else:
        np.testing.assert_allclose(scores[5:], 1.0, atol=1e-12)
    assert fitted.n_features_in_ == 12
    assert fitted.partial_fit(wider).n_features_in_ == 15


@pytest.mark.parametrize("model", [*DICTIONARY_MODELS, *MEMORIES], ids=_ids)
@pytest.mark.parametrize("shape", [(0, 12), (5, 0)])
def test_fit_refuses_empty_data_and_keeps_the_fitted_state(model: object, shape: tuple) -> None:
    fitted = clone(model).fit(_documents())
    before = fitted.score_samples(_documents(5, seed=1))
    with pytest.raises(ValueError, match=r"Found array with 0 (sample|feature)\(s\)"):
        fitted.fit(sp.csr_matrix(shape))
    np.testing.assert_array_equal(fitted.score_samples(_documents(5, seed=1)), before)


@pytest.mark.parametrize("model", [*DICTIONARY_MODELS, *MEMORIES], ids=_ids)
def test_an_empty_window_is_accepted_once_fitted(model: object) -> None:
    """A stream's empty window adds no document (ONLINE and the memories learn nothing from
    it; the batch methods still take their step's alternations over the history)."""
    fitted = clone(model).fit(_documents())
    before = fitted.score_samples(_documents(5, seed=1))
    assert fitted.score_samples(sp.csr_matrix((0, 12))).shape == (0,)
    assert fitted.partial_fit(sp.csr_matrix((0, 12))) is fitted
    if isinstance(fitted, BatchL1Novelty | L2BatchNovelty):
        assert fitted.P_.shape == (12, 30) and fitted.components_.shape == (12, 3)
    else:
        after = fitted.score_samples(_documents(5, seed=1))
        np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("model", [*DICTIONARY_MODELS, *MEMORIES], ids=_ids)
def test_nan_is_refused_in_every_sparse_format(model: object) -> None:
    """L2-BATCH and the memories checked no entry (a NaN went into the scores); formats whose
    entries scikit-learn cannot check in place (DOK, LIL) are converted to CSR first."""
    X = sp.dok_matrix(_documents())
    X[3, 2] = np.nan
    for fmt in ("dok", "lil", "csr"):
        with pytest.raises(ValueError, match="Input X contains NaN"):
            clone(model).fit(X.asformat(fmt))


def test_the_memories_take_real_weightings_the_dictionaries_do_not() -> None:
    X = _documents() - 0.05
    for model in MEMORIES:
        scores = clone(model).fit(X[:20]).score_samples(X[20:])
        assert np.all((scores >= -1e-12) & (scores <= 2 + 1e-12))  # 1 - cosine in [0, 2]
    for model in DICTIONARY_MODELS:
        with pytest.raises(ValueError, match="Negative values in data"):
            clone(model).fit(X)


def test_score_stream_is_one_document_at_a_time() -> None:
    """The memory is history-dependent by design (so ``score_stream`` and ``partial_fit``
    depend on order); ``score_stream`` equals scoring, then storing, each row in turn."""
    X = _documents(20)
    X[12] = X[8]  # a repeat: novelty 0 in the stream, not against the memory alone
    stream = ExactFirstStory().fit(X[:5]).score_stream(X[5:])
    one_by_one = ExactFirstStory().fit(X[:5])
    expected = []
    for row in X[5:]:
        expected.append(one_by_one.score_samples(row[None])[0])
        one_by_one.partial_fit(row[None])
    np.testing.assert_allclose(stream, expected, atol=1e-12)
    assert abs(stream[7]) < 1e-12 and ExactFirstStory().fit(X[:5]).score_samples(X[12:13]) > 0.1


# ----------------------------------------------------------------- StreamingTfidf
TEXTS = [
    "Quake hits the coast of Chile",
    "Coast guard rescues fishermen after the quake",
    "Markets rally as rates fall",
    "Rates rise again, markets fall",
]


def test_tfidf_tags_are_those_of_a_text_vectoriser() -> None:
    tags = get_tags(StreamingTfidf())
    assert tags.input_tags.string and not tags.input_tags.two_d_array


def test_tfidf_fit_starts_over_and_partial_fit_goes_on() -> None:
    once = StreamingTfidf().fit(TEXTS[2:])
    twice = StreamingTfidf().fit(TEXTS[:2])
    assert twice.fit(TEXTS[2:]) is twice
    for name, value in once.get_state().items():
        np.testing.assert_array_equal(twice.get_state()[name], value, err_msg=name)
    assert StreamingTfidf().fit(TEXTS[:2]).partial_fit(TEXTS[2:]).n_docs_ == 4


def test_tfidf_refuses_invalid_texts_before_changing_state() -> None:
    tfidf = StreamingTfidf().fit(TEXTS)
    state = tfidf.get_state()
    with pytest.raises(ValueError, match="Iterable over raw text documents expected"):
        tfidf.fit("one string is not a sequence of documents")
    with pytest.raises(TypeError, match="every document must be a str"):
        tfidf.partial_fit(["a text", None])
    for name, value in state.items():
        np.testing.assert_array_equal(tfidf.get_state()[name], value, err_msg=name)


def test_tfidf_transform_needs_a_fit_and_learns_nothing() -> None:
    fresh = StreamingTfidf()
    with pytest.raises(NotFittedError):
        fresh.transform(TEXTS)
    assert not hasattr(fresh, "terms_")  # it set an empty vocabulary before
    tfidf = StreamingTfidf().fit(TEXTS)
    state = pickle.dumps(tfidf.get_state())
    tfidf.transform(["new words entirely", *TEXTS])
    assert pickle.dumps(tfidf.get_state()) == state


def test_tfidf_transform_is_per_document() -> None:
    """Sample order and subset invariance, the checks scikit-learn cannot run on texts."""
    tfidf = StreamingTfidf().fit(TEXTS[:3])
    full = tfidf.transform(TEXTS).toarray()
    order = [3, 1, 0, 2]
    np.testing.assert_array_equal(
        tfidf.transform([TEXTS[i] for i in order]).toarray(), full[:, order]
    )
    for i, text in enumerate(TEXTS):
        np.testing.assert_array_equal(tfidf.transform([text]).toarray()[:, 0], full[:, i])


def test_tfidf_pickles() -> None:
    tfidf = StreamingTfidf(max_features=5).fit(TEXTS)
    again = pickle.loads(pickle.dumps(tfidf))
    assert (again.transform(TEXTS) != tfidf.transform(TEXTS)).nnz == 0


# ----------------------------------------------------------------- OIADMM
def test_oiadmm_clone_forgets_and_pickle_resumes() -> None:
    rng = np.random.default_rng(0)
    model = OIADMM(beta=3.0).initialize(rng.random((6, 3)))
    windows = [(rng.random((6, 4)), rng.random((3, 4))) for _ in range(3)]
    model.partial_fit(*windows[0])
    assert not hasattr(clone(model), "components_") and clone(model).beta == 3.0
    resumed = pickle.loads(pickle.dumps(model))
    for P, codes in windows[1:]:
        model.partial_fit(P, codes)
        resumed.partial_fit(P, codes)
    np.testing.assert_array_equal(resumed.components_, model.components_)
    np.testing.assert_array_equal(np.asarray(resumed.dual_), np.asarray(model.dual_))
