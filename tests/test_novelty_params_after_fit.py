"""Hyper-parameters set on a fitted ONLINE detector, and codes handed to ``partial_fit``.

``oiadmm_`` (the dictionary update, Algorithm 2) was built only by ``fit`` and ``set_state``, so
``set_params`` after fitting (``beta``, ``tau``, ``over_weight``, ``dtype``, ``grow_threshold``)
changed the coding at once but never the update: the live model and one restored from its
checkpoint under the same parameters learnt different dictionaries. And ``partial_fit(codes=...)``
counted the window, marked its atoms used and grew the vocabulary before the OIADMM step refused
codes of the wrong shape or with NaN entries, although invalid input must raise before any change.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.novelty import OnlineL1NoveltyDetector

# coding convergence warnings of these tiny windows are beside the point
pytestmark = pytest.mark.filterwarnings("ignore")


def _documents(n: int = 90, m: int = 30) -> sp.csr_matrix:
    rng = np.random.default_rng(1)
    return sp.csr_matrix(rng.random((n, m)) * (rng.random((n, m)) < 0.3))


def _dense(A: np.ndarray | sp.spmatrix) -> np.ndarray:
    return A.toarray() if sp.issparse(A) else np.asarray(A)


def _assert_same_state(a: OnlineL1NoveltyDetector, b: OnlineL1NoveltyDetector) -> None:
    sa, sb = a.get_state(), b.get_state()
    assert sa.keys() == sb.keys()
    for key in sa:
        np.testing.assert_array_equal(np.asarray(sa[key]), np.asarray(sb[key]), err_msg=key)


@pytest.mark.parametrize(
    ("base", "changed"),
    [
        ({}, {"beta": 1.0}),
        ({}, {"tau": 0.01}),
        ({}, {"over_weight": 1.0}),
        ({}, {"dtype": np.float64}),
        ({}, {"grow_threshold": None}),  # CSC dictionary -> dense
        ({"grow_threshold": None}, {"grow_threshold": 0.7}),  # dense -> CSC
        ({"grow_threshold": None}, {"dtype": np.float64, "beta": 2.0, "over_weight": 0.5}),
    ],
)
def test_live_model_after_set_params_learns_as_the_restored_one(
    base: dict[str, object], changed: dict[str, object]
) -> None:
    """A fitted model given new hyper-parameters and a model restored from its checkpoint under
    the same ones score alike and, window after window, learn the same dictionary and dual bit
    for bit, in the new float type and layout."""
    X = _documents()
    live = OnlineL1NoveltyDetector(n_components=8, **base).fit(X[:30])
    live.partial_fit(X[30:45])
    live.set_params(**changed)
    restored = OnlineL1NoveltyDetector(n_components=8, **{**base, **changed})
    restored.set_state(live.get_state())
    np.testing.assert_array_equal(live.score_samples(X[45:]), restored.score_samples(X[45:]))
    for window in (X[45:60], X[60:75], X[75:]):
        live.partial_fit(window)
        restored.partial_fit(window)
    assert live.components_.dtype == restored.components_.dtype == np.dtype(restored.dtype)
    assert sp.issparse(live.components_) == sp.issparse(restored.components_)
    np.testing.assert_array_equal(_dense(live.components_), _dense(restored.components_))
    _assert_same_state(live, restored)
    for name in ("beta", "tau", "over_weight"):
        assert getattr(live.oiadmm_, name) == getattr(live, name)


def test_changed_beta_moves_the_dictionary_update() -> None:
    """The new ``beta`` is the one the update uses: a model set to it after fitting learns the
    dictionary a model fitted with it from the same start learns, not the old one's."""
    X = _documents()
    fitted = OnlineL1NoveltyDetector(n_components=8).fit(X[:30])
    old = OnlineL1NoveltyDetector(n_components=8).set_state(fitted.get_state())
    new = OnlineL1NoveltyDetector(n_components=8, beta=1.0).set_state(fitted.get_state())
    fitted.set_params(beta=1.0).partial_fit(X[30:])
    old.partial_fit(X[30:])
    new.partial_fit(X[30:])
    np.testing.assert_array_equal(_dense(fitted.components_), _dense(new.components_))
    assert not np.array_equal(_dense(fitted.components_), _dense(old.components_))


def _bad_inputs(n: int, k: int) -> list[tuple[str, sp.spmatrix | np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    good = sp.csr_matrix(rng.random((n, k)) * (rng.random((n, k)) < 0.3))
    nan = good.copy()
    nan.data[:1] = np.nan
    inf = good.toarray()
    inf[0, 0] = np.inf
    scores = rng.random(n)
    return [
        ("NaN code", nan, scores),
        ("infinite code", inf, scores),
        ("too few atoms", sp.csr_matrix(np.ones((n, k - 3))), scores),
        ("too many documents", sp.csr_matrix(np.ones((n + 1, k))), scores),
        ("atoms x documents", sp.csr_matrix(np.ones((k, n))), scores),
        ("scores too short", good, scores[:-1]),
        ("NaN score", good, np.r_[np.nan, scores[1:]]),
        ("scores 2-d", good, scores[:, None]),
    ]


@pytest.mark.parametrize("case", range(8))
def test_invalid_codes_raise_before_any_change(case: int) -> None:
    """Codes of the wrong shape, with NaN or infinite entries, or scores that are not one finite
    number per document raise ``ValueError`` and leave the model as it was: window count, atom
    use, vocabulary (``X`` is wider: it would have grown the dictionary) and dictionary."""
    X = _documents()
    model = OnlineL1NoveltyDetector(n_components=8).fit(X[:30])
    window = sp.hstack([X[30:60], sp.csr_matrix(np.full((30, 2), 0.1))], format="csr")
    k = model.components_.shape[1]
    name, codes, scores = _bad_inputs(30, k)[case]
    before = model.get_state()
    width = model.n_features_in_
    with pytest.raises(ValueError):
        model.partial_fit(window, codes=codes, scores=scores)
    assert model.n_features_in_ == width, name
    assert model.n_windows_ == 0, name
    after = model.get_state()
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(np.asarray(after[key]), np.asarray(before[key]), key)


def test_valid_codes_are_taken_as_a_scoring_pass_gives_them() -> None:
    """Codes and scores of a scoring pass, dense or sparse, learn what coding the window inside
    ``partial_fit`` learns."""
    X = _documents()
    a = OnlineL1NoveltyDetector(n_components=8).fit(X[:30])
    b = OnlineL1NoveltyDetector(n_components=8).set_state(a.get_state())
    res = a.code(X[30:])
    a.partial_fit(X[30:], codes=res.codes.toarray(), scores=list(a.novelty_scores(res)))
    b.partial_fit(X[30:])
    _assert_same_state(a, b)
