"""The ONLINE detector (Algorithm 3) as an estimator and the per-window Detector."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sparsewatch.models.l1_coding import l1_sparse_code
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import Detector, WindowResult


def topic_docs(rng: np.random.Generator, topic: int, n: int, length: int = 10) -> list[str]:
    """Tweet-length documents: most of one topic's keywords plus a little shared noise."""
    words = [f"t{topic}w{i}" for i in range(length)]
    noise = [f"common{i}" for i in range(30)]
    return [
        " ".join(list(rng.choice(words, length - 3, replace=False)) + list(rng.choice(noise, 2)))
        for _ in range(n)
    ]


def mix(rng: np.random.Generator, topics: range | list[int], n: int) -> list[str]:
    return [doc for t in topics for doc in topic_docs(rng, t, n)]


def make_detector(**model: object) -> Detector:
    params = {"n_components": 20, "lam": 0.05, "atom_terms": 5, "random_state": 0} | model
    return Detector(
        StreamingTfidf(max_features=2000, max_terms_per_doc=20, idf_power=0.0),
        OnlineL1NoveltyDetector(**params),
        warmup_docs=200,
    )


def warm(rng: np.random.Generator, d: Detector) -> None:
    first = d.process_window(mix(rng, range(2), 50))
    assert first.warmup and np.isnan(first.scores).all() and not d.fitted
    second = d.process_window(mix(rng, range(2, 4), 50))
    assert second.warmup and d.fitted and np.isfinite(second.scores).all()
    assert not second.novel.any()


def test_novel_topic_scores_higher_and_is_flagged() -> None:
    rng = np.random.default_rng(0)
    d = make_detector(top_q=0.1)
    warm(rng, d)
    old = mix(rng, range(4), 45)
    new = topic_docs(rng, 9, 20)
    res = d.process_window(old + new)
    assert isinstance(res, WindowResult)
    n = len(old) + len(new)
    assert res.scores.shape == res.reconstruction_errors.shape == res.novel.shape == (n,)
    assert res.codes.shape == (n, res.n_atoms) and res.top_atoms.shape == (n, 3)
    assert np.all(res.scores >= res.reconstruction_errors - 1e-9)
    model = d.model  # the screening-margin tie-break may add up to over_weight + lam to 1
    assert np.all(res.scores <= 1 + model.over_weight + model.lam + 1e-6)
    assert np.all(res.scores >= 0)
    assert res.scores[len(old) :].min() > np.median(res.scores[: len(old)])
    assert res.novel.sum() >= int(np.ceil(0.1 * n))  # top 10% (ties at the cut included)
    assert res.novel[len(old) :].all()  # every document of the new topic is flagged
    assert np.all(res.scores[res.novel] > res.threshold)
    known = res.top_atoms[0][res.top_atoms[0] >= 0]
    assert known.size and all(t.startswith(("t", "common")) for t in d.top_terms(int(known[0])))


def test_threshold_mode() -> None:
    rng = np.random.default_rng(1)
    d = make_detector(flag="threshold", threshold=0.6)
    warm(rng, d)
    res = d.process_window(topic_docs(rng, 0, 30) + topic_docs(rng, 7, 5))
    np.testing.assert_array_equal(res.novel, res.scores > 0.6)
    assert res.threshold == 0.6 and res.novel[30:].all() and not res.novel[:30].any()


def test_score_learns_nothing_and_counts_unknown_terms() -> None:
    rng = np.random.default_rng(2)
    d = make_detector()
    warm(rng, d)
    before = d.get_state()
    late = [*topic_docs(rng, 1, 5), "entirely unseen vocabulary here"]
    a = d.score(late)
    b = d.score(late)
    after = d.get_state()
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(before[key], after[key])
    np.testing.assert_array_equal(a.scores, b.scores)
    # all its mass unexplained, plus the margin of a document no atom touches
    assert a.scores[-1] == pytest.approx(1.0 + d.model.unsupported_margin(), rel=1e-9)
    assert a.scores[-1] > 1.0 and a.scores[:-1].max() < 0.9


def test_state_round_trip_gives_identical_scores() -> None:
    rng = np.random.default_rng(3)
    d = make_detector()
    warm(rng, d)
    d.process_window(topic_docs(rng, 0, 40) + topic_docs(rng, 5, 10))
    buf = io.BytesIO()
    np.savez(buf, **d.get_state())
    buf.seek(0)
    e = make_detector().set_state(dict(np.load(buf, allow_pickle=False)))
    nxt = topic_docs(rng, 1, 40) + topic_docs(rng, 6, 10)
    r1, r2 = d.process_window(nxt), e.process_window(nxt)
    np.testing.assert_array_equal(r1.scores, r2.scores)
    np.testing.assert_array_equal(r1.novel, r2.novel)
    assert (r1.codes != r2.codes).nnz == 0
    np.testing.assert_array_equal(d.score(nxt[:5]).scores, e.score(nxt[:5]).scores)


def test_round_trip_during_warmup() -> None:
    rng = np.random.default_rng(4)
    d = make_detector()
    d.process_window(topic_docs(rng, 0, 120))
    buf = io.BytesIO()
    np.savez(buf, **d.get_state())
    buf.seek(0)
    e = make_detector().set_state(dict(np.load(buf, allow_pickle=False)))
    nxt = topic_docs(rng, 1, 120)
    np.testing.assert_array_equal(d.process_window(nxt).scores, e.process_window(nxt).scores)


def test_dictionary_growth_on_poorly_represented_window() -> None:
    rng = np.random.default_rng(5)
    d = make_detector(grow_threshold=0.9, grow_fraction=0.3, grow_size=5, max_components=27)
    warm(rng, d)
    k0 = d.model.components_.shape[1]
    before = d.process_window(topic_docs(rng, 11, 40))
    assert d.model.components_.shape[1] == k0 + 5
    d.process_window(topic_docs(rng, 12, 40))
    assert d.model.components_.shape[1] == 27  # capped by max_components
    res = d.process_window(topic_docs(rng, 11, 10))
    # the grown atoms now explain the new topic better
    assert np.median(res.scores) < np.median(before.scores) - 0.05


def test_shapes_stay_consistent_over_long_stream_with_eviction() -> None:
    rng = np.random.default_rng(6)
    d = Detector(
        StreamingTfidf(max_features=300, idf_power=0.0),
        OnlineL1NoveltyDetector(n_components=10, atom_terms=5, n_init_iter=2),
        warmup_docs=250,
    )
    for s in range(20):
        res = d.process_window(mix(rng, [s % 40, (s + 1) % 40], 125))
        m = d.features.n_features_
        assert m <= 300 and np.isfinite(res.scores).all()
        if d.fitted:
            assert d.model.components_.shape[0] == m == d.model.oiadmm_.dual_.shape[0]
            assert res.n_terms == m
    assert d.features.n_docs_ == 5000


def test_estimator_api() -> None:
    rng = np.random.default_rng(7)
    f = StreamingTfidf(idf_power=0.0)
    texts = mix(rng, range(3), 40)
    X = f.partial_fit(texts).transform(texts).T  # documents as rows
    est = OnlineL1NoveltyDetector(n_components=15, atom_terms=5)
    assert clone(est).get_params() == est.get_params()
    assert est.fit(X) is est and est.partial_fit(X) is est
    codes = est.transform(X)
    assert sp.issparse(codes) and codes.shape == (X.shape[0], 15) and codes.min() >= 0
    s = est.score_samples(X)
    assert s.shape == (X.shape[0],) and np.median(s) < 0.9
    wider = sp.hstack([X, sp.csr_matrix((X.shape[0], 4))]).tocsr()  # the vocabulary grew
    est.partial_fit(wider)
    assert est.n_features_in_ == X.shape[1] + 4
    with pytest.raises(ValueError):
        OnlineL1NoveltyDetector(flag="bogus").flag_novel(np.ones(3))


def test_score_margin_breaks_ties_only_where_no_atom_is_used() -> None:
    rng = np.random.default_rng(8)
    f = StreamingTfidf(idf_power=0.0)
    texts = mix(rng, range(3), 40)
    X = f.partial_fit(texts).transform(texts).T
    est = OnlineL1NoveltyDetector(n_components=15, atom_terms=5, score_margin=True).fit(X)
    res = est.code(X)
    s = est.score_samples(X)
    used = np.diff(res.codes.indptr) > 0
    np.testing.assert_array_equal(s[used], res.objective[used])
    assert np.all(s[~used] >= res.objective[~used])


def test_update_steps_per_window() -> None:
    _, _, X = _first_window(9, range(3))
    one = OnlineL1NoveltyDetector(n_components=10, n_init_iter=1).fit(X)
    three = clone(one).set_params(update_steps=3).fit(X)
    one.partial_fit(X)
    three.partial_fit(X)
    assert one.oiadmm_.n_steps_ == 1 and three.oiadmm_.n_steps_ == 3
    assert not np.array_equal(one.components_.toarray(), three.components_.toarray())


# the paper's ONLINE (no dictionary growth), in float64 for exact comparisons
ONLINE = {"n_components": 10, "n_init_iter": 1, "grow_threshold": None, "dtype": np.float64}


def _first_window(
    seed: int, topics: range, n: int = 30
) -> tuple[np.random.Generator, StreamingTfidf, sp.csr_matrix]:
    """A generator seeded ``seed``, term weights without idf, and the first window they learnt
    (``n`` documents of each of ``topics``, as rows); later windows go on from both."""
    rng = np.random.default_rng(seed)
    f = StreamingTfidf(idf_power=0.0)
    texts = mix(rng, topics, n)
    return rng, f, f.partial_fit(texts).transform(texts).T


def _fitted_estimator(seed: int) -> tuple[OnlineL1NoveltyDetector, sp.csr_matrix]:
    """An estimator of 10 atoms fitted on a first window of 20 documents of each of 3 topics,
    and that window."""
    _, _, X = _first_window(seed, range(3), 20)
    return OnlineL1NoveltyDetector(n_components=10, n_init_iter=1).fit(X), X


def test_update_passes_recode_the_window_between_oiadmm_steps() -> None:
    # Three passes equal three rounds of (code the window against the current dictionary, one
    # OIADMM step on those codes), the first on the scoring pass's codes; growth is off, as in
    # the paper's ONLINE, and the scores are those of the first coding.
    rng, f, X0 = _first_window(4, range(3))
    passes = OnlineL1NoveltyDetector(**ONLINE, update_passes=3).fit(X0)
    rounds = OnlineL1NoveltyDetector(**ONLINE).fit(X0)
    single = OnlineL1NoveltyDetector(**ONLINE).fit(X0)
    for topics in (range(3), range(1, 5)):
        texts = mix(rng, topics, 20)
        X = f.partial_fit(texts).transform(texts).T
        res = passes.code(X)
        passes.partial_fit(X, codes=res.codes, scores=res.objective)
        one = single.code(X)
        single.partial_fit(X, codes=one.codes, scores=one.objective)
        for _ in range(3):
            r = rounds.code(X)
            rounds.partial_fit(X, codes=r.codes, scores=r.objective)
        assert passes.oiadmm_.n_steps_ == rounds.oiadmm_.n_steps_
        np.testing.assert_allclose(passes.components_, rounds.components_, rtol=1e-12, atol=1e-14)
    assert single.oiadmm_.n_steps_ == 2
    assert not np.allclose(single.components_, passes.components_)
    with pytest.raises(ValueError, match="update_passes"):
        OnlineL1NoveltyDetector(**ONLINE, update_passes=0).fit(X0).partial_fit(X)


def test_recode_tol_recodes_loosely_from_the_previous_pass() -> None:
    # With recode_tol, passes 2.. re-code the window warm-started from the previous pass's codes,
    # to that tolerance and without the LP polish; the first pass (the scores) is unchanged, one
    # pass is unaffected, and the dictionary ends close to the tightly re-coded one.
    rng, f, X0 = _first_window(4, range(3))
    loose = OnlineL1NoveltyDetector(**ONLINE, update_passes=3, recode_tol=1e-2).fit(X0)
    tight = OnlineL1NoveltyDetector(**ONLINE, update_passes=3).fit(X0)
    texts = mix(rng, range(1, 5), 20)
    X = f.partial_fit(texts).transform(texts).T
    manual = clone(loose).set_params(update_passes=1, recode_tol=None).fit(X0)
    P = sp.csc_matrix(sp.csr_matrix(X).T)
    codes = manual.code(X).codes
    for p in range(3):
        if p:
            codes = l1_sparse_code(
                P,
                manual.components_,
                manual.lam,
                tol=1e-2,
                max_iter=manual.coding_max_iter,
                polish_after=None,
                x0=codes,
                over_weight=manual.over_weight,
            ).codes
        manual.oiadmm_.partial_fit(P, sp.csc_matrix(codes.T))
    for est in (loose, tight):
        res = est.code(X)
        est.partial_fit(X, codes=res.codes, scores=res.objective)
    np.testing.assert_allclose(loose.components_, manual.components_, rtol=1e-12, atol=1e-14)
    assert not np.array_equal(loose.components_, tight.components_)
    gap = np.abs(loose.components_ - tight.components_).sum() / np.abs(tight.components_).sum()
    assert gap < 0.01
    one = OnlineL1NoveltyDetector(**ONLINE).fit(X0).partial_fit(X)
    one_loose = OnlineL1NoveltyDetector(**ONLINE, recode_tol=1e-2).fit(X0).partial_fit(X)
    np.testing.assert_array_equal(one.components_, one_loose.components_)
    before = loose.get_state()
    with pytest.raises(ValueError, match="recode_tol"):
        loose.set_params(recode_tol=0.0).partial_fit(X)
    for key, value in before.items():
        np.testing.assert_array_equal(loose.get_state()[key], value)


def test_grow_first_refines_new_atoms_on_the_window_that_seeded_them() -> None:
    # Growth after the update leaves the window's new atoms at their seeds; seeded before a
    # second pass, they are coded by their documents and moved by OIADMM. With one pass the
    # order changes nothing (the new atoms' codes are zero).
    rng, f, X0 = _first_window(11, range(2))
    texts = topic_docs(rng, 7, 30)
    X = f.partial_fit(texts).transform(texts).T
    params = {
        "n_components": 10,
        "atom_terms": 5,
        "grow_threshold": 0.5,
        "grow_size": 3,
        "dtype": np.float64,
    }

    def updated(**extra: object) -> OnlineL1NoveltyDetector:
        est = OnlineL1NoveltyDetector(**params, **extra).fit(X0)
        res = est.code(X)
        return est.partial_fit(X, codes=res.codes, scores=est.novelty_scores(res))

    after, first1 = updated(), updated(grow_first=True)
    after2, first2 = updated(update_passes=2), updated(update_passes=2, grow_first=True)
    assert after.components_.shape[1] == first2.components_.shape[1] == 13
    A_after = after.components_.toarray()
    np.testing.assert_allclose(first1.components_.toarray(), A_after, atol=1e-12)
    seeds = after2.components_.toarray()[:, 10:]
    refined = first2.components_.toarray()[:, 10:]
    np.testing.assert_allclose(seeds, A_after[:, 10:], atol=1e-12)
    assert np.abs(refined - seeds).sum(axis=0).min() > 1e-3  # every new atom moved
    assert refined.min() >= 0 and refined.sum(axis=0).max() <= 1 + 1e-9  # still feasible
    res = first2.code(X)  # and they explain their story better than the bare seeds do
    assert np.mean(first2.novelty_scores(res)) < np.mean(after2.novelty_scores(after2.code(X)))


def test_growth_at_the_cap_replaces_least_recently_used_atoms() -> None:
    rng = np.random.default_rng(10)
    d = make_detector(grow_threshold=0.9, grow_fraction=0.0, grow_size=8, max_components=24)
    warm(rng, d)
    for topic in (20, 21):  # fills the dictionary up to the cap
        d.process_window(topic_docs(rng, topic, 30))
    model = d.model
    assert model.components_.shape[1] == 24
    last = model.atom_last_used_.copy()
    A = model.components_.toarray()
    res = d.process_window(topic_docs(rng, 22, 30))
    assert model.components_.shape[1] == 24  # bounded: new atoms replace old ones
    used_now = np.unique(res.codes.indices)
    unused = np.setdiff1d(np.arange(24), used_now)
    m0 = A.shape[0]  # the vocabulary grew: compare the old rows
    moved = np.abs(model.components_.toarray()[:m0, unused] - A[:, unused]).sum(axis=0)
    replaced = unused[moved > 1e-3]  # (projection rounding aside, unused atoms stay put)
    assert replaced.size > 0
    assert np.all(model.atom_last_used_[replaced] == model.n_windows_)
    # they were the least recently used among the atoms this window did not use
    assert last[replaced].max() <= np.sort(last[unused])[replaced.size - 1]
    after = d.process_window(topic_docs(rng, 22, 10))
    assert np.median(after.scores) < np.median(res.scores) - 0.05  # the new topic is learned


def test_state_round_trip_with_growth_and_weighted_loss() -> None:
    rng = np.random.default_rng(11)
    params = {
        "grow_threshold": 0.9,
        "grow_fraction": 0.0,
        "grow_size": 6,
        "max_components": 26,
        "over_weight": 0.2,
        "score_margin": True,
    }
    d = make_detector(**params)
    warm(rng, d)
    for topic in (30, 31):
        d.process_window(topic_docs(rng, topic, 30) + topic_docs(rng, 0, 10))
    buf = io.BytesIO()
    np.savez(buf, **d.get_state())
    buf.seek(0)
    e = make_detector(**params).set_state(dict(np.load(buf, allow_pickle=False)))
    for topic in (32, 33):
        nxt = topic_docs(rng, topic, 30) + topic_docs(rng, 1, 10)
        r1, r2 = d.process_window(nxt), e.process_window(nxt)
        np.testing.assert_array_equal(r1.scores, r2.scores)
        np.testing.assert_array_equal(d.model.components_.toarray(), e.model.components_.toarray())
        np.testing.assert_array_equal(d.model.atom_last_used_, e.model.atom_last_used_)


def test_sparse_seed_truncation_matches_the_dense_one() -> None:
    """The growing detector seeds atoms from sparse columns: the same ``t`` heaviest terms as the
    dense truncation (continuous values, so no ties), without densifying the window."""
    from sparsewatch.models.novelty import _truncate_columns, _truncate_columns_sparse

    rng = np.random.default_rng(12)
    M = sp.random(300, 40, density=0.08, random_state=12, format="csc")
    M.data = rng.random(M.nnz)
    M = sp.csc_matrix(M @ sp.diags(np.r_[np.ones(5), 0.0, np.ones(34)]))
    M.eliminate_zeros()  # column 5 is empty, and stays empty
    for t in (1, 3, 8, None):
        dense = _truncate_columns(M.toarray(), t)
        out = _truncate_columns_sparse(M, t)
        assert sp.isspmatrix_csc(out)
        np.testing.assert_array_equal(out.toarray(), dense)


def test_initial_atoms_are_capped_and_validated() -> None:
    X = sp.random(60, 80, density=0.1, random_state=np.random.RandomState(0), format="csr")
    grown = OnlineL1NoveltyDetector(n_components=30, max_components=10, n_init_iter=1).fit(X)
    assert grown.components_.shape[1] == 10  # a growing dictionary starts within its cap
    fixed = OnlineL1NoveltyDetector(
        n_components=30, max_components=10, grow_threshold=None, n_init_iter=1
    ).fit(X)
    assert fixed.components_.shape[1] == 10  # a fixed one too
    with pytest.raises(ValueError, match="n_components must be >= 1"):
        OnlineL1NoveltyDetector(n_components=0).fit(X)
    with pytest.raises(ValueError, match="max_components must be >= 1"):
        OnlineL1NoveltyDetector(max_components=0).fit(X)
    restored = OnlineL1NoveltyDetector(max_components=0).set_state(grown.get_state())
    with pytest.raises(ValueError, match="max_components must be >= 1"):
        restored.partial_fit(X)
    assert restored.components_.shape[1] == 10  # refused before any change


@pytest.mark.parametrize("grow_threshold", [0.7, None])
def test_a_model_restored_with_a_lower_cap_keeps_its_most_recently_used_atoms(
    grow_threshold: float | None,
) -> None:
    """``max_components`` lowered between a checkpoint and its restore (``detector.max_atoms``
    in the configuration): the restored dictionary kept every atom, above the cap for ever.
    After the next window's update it keeps the cap's most recently used atoms, in their
    order, with their columns and their last-use windows."""
    rng = np.random.default_rng(3)
    X = sp.random(200, 120, density=0.08, random_state=np.random.RandomState(1), format="csr")
    model = OnlineL1NoveltyDetector(
        n_components=40, grow_threshold=grow_threshold, n_init_iter=1
    ).fit(X[:60])
    for start in (60, 90):
        model.partial_fit(X[start : start + 30])
    k = model.components_.shape[1]
    # distinct last-use windows, so that "most recently used" names one set of atoms
    model.atom_last_used_ = rng.permutation(k).astype(np.int64)
    state = model.get_state()
    before = model.components_.toarray() if grow_threshold else model.components_.copy()

    small = OnlineL1NoveltyDetector(
        n_components=40, grow_threshold=grow_threshold, max_components=15, n_init_iter=1
    ).set_state(state)
    assert small.components_.shape[1] == k  # restoring changes nothing by itself
    window = X[:30]
    codes = small.code(window).codes
    used_now = np.unique(sp.csr_matrix(codes).indices)
    small.partial_fit(window)

    assert small.components_.shape[1] == 15
    last_used = np.asarray(state["atom_last_used"]).copy()
    last_used[used_now] = small.n_windows_
    if grow_threshold is None:  # (a growing model may also have replaced stale atoms)
        expected = np.sort(np.argsort(-last_used, kind="stable")[:15])
        np.testing.assert_array_equal(small.atom_last_used_, last_used[expected])
        twin = OnlineL1NoveltyDetector(n_components=40, grow_threshold=None, n_init_iter=1)
        twin = twin.set_state(state).partial_fit(window)  # the same step without the cap
        np.testing.assert_array_equal(small.components_, twin.components_[:, expected])
        assert not np.array_equal(before[:, expected], small.components_)  # it did learn
    assert set(np.unique(sp.csr_matrix(small.code(window).codes).indices)) <= set(range(15))
    small.partial_fit(X[30:60])  # and it goes on within the cap
    assert small.components_.shape[1] == 15
    assert small.atom_last_used_.shape == (15,)


def test_a_quiet_streams_small_windows_flag_only_what_beats_the_last_cut() -> None:
    """An idle stream's timeout closes windows of a document or two: the top-``q`` cut rounded
    ``q n`` up to one document and flagged every such window's best, known story or not."""
    rng = np.random.default_rng(21)
    d = make_detector(top_q=0.1)
    warm(rng, d)
    full = d.process_window(mix(rng, range(4), 20) + topic_docs(rng, 8, 5))  # a cut of its own
    assert full.novel.sum() >= 9 and np.isfinite(full.threshold)
    known = [d.process_window(topic_docs(rng, t % 4, 1)) for t in range(12)]  # windows of one
    assert not any(w.novel.any() for w in known)
    assert all(w.threshold == full.threshold for w in known)
    pair = d.process_window(topic_docs(rng, 1, 1) + topic_docs(rng, 11, 1))  # a new story
    assert pair.novel.tolist() == [False, True] and pair.threshold == full.threshold


def test_documents_without_terms_are_never_flagged() -> None:
    """A document with no term (empty, numbers only) scores 0: nothing to explain. With fewer
    than ``ceil(q n)`` documents with terms the top-``q`` cut fell to 0 and flagged them all."""
    rng = np.random.default_rng(13)
    d = make_detector(top_q=0.5)
    warm(rng, d)
    last = d.model.threshold_
    res = d.process_window(["123 456", "789", "42 42", "1"])
    np.testing.assert_array_equal(res.scores, 0.0)
    assert not res.novel.any() and res.threshold == last  # no cut of its own: the last one
    # the cut is the top q of the documents with terms: one of the two here, never an empty one
    texts = ["", *topic_docs(rng, 0, 1), "2024", *topic_docs(rng, 8, 1), "!!", "7 8 9"]
    res = d.process_window(texts)
    has_terms = np.array([False, True, False, True, False, False])
    assert not res.novel[~has_terms].any()
    np.testing.assert_array_equal(res.novel, has_terms & (res.scores == res.scores.max()))
    late = d.score(["", "0 0", "entirely unseen words"])  # late documents: the same rule
    np.testing.assert_array_equal(late.novel, [False, False, True])
    d.model.set_params(flag="threshold", threshold=-1.0)  # even a threshold below every score
    res = d.process_window(["", *topic_docs(rng, 1, 2), "123"])
    np.testing.assert_array_equal(res.novel, [False, True, True, False])


def test_update_passes_are_validated_before_any_state_changes() -> None:
    est, X = _fitted_estimator(14)
    est.partial_fit(X)
    before = est.get_state()
    with pytest.raises(ValueError, match="update_passes"):
        est.set_params(update_passes=0).partial_fit(X)
    after = est.get_state()
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(before[key], after[key])


def test_warmup_on_texts_without_terms_starts_over_then_fits() -> None:
    """When no warm-up text has a term the vocabulary is empty: no dictionary can be built (an
    empty one crashed the topic models downstream), so the warm-up starts over."""
    rng = np.random.default_rng(15)
    d = make_detector()
    for _ in range(3):
        res = d.process_window(["", "123 456", "!!! ???", "42"] * 50)
        assert res.warmup and not d.fitted and not res.novel.any() and res.n_terms == 0
        assert np.isnan(res.scores).all()
        assert d.get_state()["warmup_offsets"].size == 1  # the buffer does not grow
    warm(rng, d)
    res = d.process_window([*mix(rng, range(4), 10), "", "123"])
    assert np.isfinite(res.scores).all() and not res.novel[-2:].any()
    assert d.features.n_docs_ == 3 * 200 + 200 + 42


def test_warmup_buffer_state_is_compact_and_exact() -> None:
    """The warm-up texts are stored as UTF-8 bytes plus offsets: one long text no longer pads
    every entry (a fixed-width unicode array of 1,000 texts with one of 100 kB was 400 MB),
    and any text, odd characters included, comes back exactly."""
    rng = np.random.default_rng(16)
    odd = ["", "trailing nul\x00", "emoji 🌍 zürich 東京", "lone \ud800 surrogate", "x" * 100_000]
    texts = topic_docs(rng, 0, 995) + odd
    d = make_detector()
    d.warmup_docs = 2000
    d.process_window(texts)
    state = d.get_state()
    assert not any(v.dtype.kind in "OU" and v.size > 1 for k, v in state.items() if "warmup" in k)
    total = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    assert state["warmup_utf8"].nbytes + state["warmup_offsets"].nbytes == total + 8 * 1001
    buf = io.BytesIO()
    np.savez(buf, **state)
    buf.seek(0)
    e = make_detector()
    e.warmup_docs = 2000
    e.set_state(dict(np.load(buf, allow_pickle=False)))
    assert e._warmup == texts
    nxt = topic_docs(rng, 1, 1000)
    np.testing.assert_array_equal(e.process_window(nxt).scores, d.process_window(nxt).scores)


def test_set_state_reads_the_former_unicode_warmup_layout() -> None:
    d = make_detector()
    d.process_window(["first text", "second text"])
    state = {k: v for k, v in d.get_state().items() if not k.startswith("warmup_")}
    state["warmup_texts"] = np.array(["first text", "second text"])
    assert make_detector().set_state(state)._warmup == ["first text", "second text"]


def _assert_same_state(est: OnlineL1NoveltyDetector, before: dict[str, np.ndarray]) -> None:
    after = est.get_state()
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)


def test_non_finite_documents_are_rejected_before_any_state_changes() -> None:
    """NaN/inf gave NaN scores, and ``partial_fit`` failed deep in the solver after counting the
    window (``n_windows_``, ``atom_last_used_``) and growing the vocabulary."""
    est, X = _fitted_estimator(16)
    est.partial_fit(X)
    before = est.get_state()
    nan_rows = X[:4].copy()
    nan_rows.data[0] = np.nan
    inf_wide = sp.hstack([X[:4], sp.csr_matrix(np.ones((4, 3)))]).tocsr()  # wider, with an inf
    inf_wide.data[-1] = np.inf
    for bad in (nan_rows, inf_wide, nan_rows.toarray()):
        for call in (est.partial_fit, est.fit, est.score_samples, est.transform, est.code):
            with pytest.raises(ValueError, match=r"NaN|infinity"):
                call(bad)
        _assert_same_state(est, before)
        assert est.n_features_in_ == X.shape[1]
    with pytest.raises(ValueError, match=r"NaN|infinity"):
        OnlineL1NoveltyDetector(n_components=10).partial_fit(nan_rows)  # the first call fits


def test_scoring_a_wider_vocabulary_leaves_the_model_as_it_was() -> None:
    """Read-only calls on documents with new terms score against the dictionary padded with zero
    rows (new terms are unexplained mass), in a copy: they grew ``components_``, the dual and
    ``n_features_in_``. Only ``partial_fit`` (or ``remap_features``) grows the model."""
    for grow in (0.7, None):  # sparse (growing) and dense dictionaries
        est, X = _fitted_estimator(17)
        est.set_params(grow_threshold=grow).fit(X)
        est.partial_fit(X)
        m = X.shape[1]
        wider = sp.hstack([X[:6], sp.random(6, 5, density=0.5, random_state=1)]).tocsr()
        before = est.get_state()
        scores, codes, result = est.score_samples(wider), est.transform(wider), est.code(wider)
        _assert_same_state(est, before)
        assert est.n_features_in_ == m and est.oiadmm_.dual_.shape[0] == m
        grown = clone(est).set_state(before).remap_features(np.arange(m), 5)
        np.testing.assert_array_equal(scores, grown.score_samples(wider))
        np.testing.assert_array_equal(codes.toarray(), grown.transform(wider).toarray())
        np.testing.assert_array_equal(result.objective, grown.code(wider).objective)
        assert np.all(scores[:6] >= est.score_samples(X[:6]))  # new terms are never explained
        est.partial_fit(wider)
        assert est.n_features_in_ == m + 5 and est.oiadmm_.dual_.shape[0] == m + 5


def test_scoring_before_fit_raises_not_fitted() -> None:
    est = OnlineL1NoveltyDetector()
    X = sp.csr_matrix(np.ones((2, 4)))
    for call in (est.score_samples, est.transform, est.code):
        with pytest.raises(NotFittedError):
            call(X)


@pytest.mark.parametrize("bad", ["one text", b"one text", [None], [b"bytes"]])
def test_texts_are_checked_before_the_warmup_buffer_or_model_changes(bad: object) -> None:
    """A single string was taken as one document per character, and a document that is not a
    str sat in the warm-up buffer (its checkpoint failed) until the window completing the warm-up
    refused it, losing every buffered document."""
    rng = np.random.default_rng(16)
    d = make_detector()
    good = mix(rng, range(2), 75)
    d.process_window(good)
    before = d.get_state()
    error = ValueError if isinstance(bad, str | bytes) else TypeError
    completing = bad if isinstance(bad, str | bytes) else good[:49] + bad  # type: ignore[operator]
    with pytest.raises(error):
        d.process_window(completing)
    after = d.get_state()
    assert not d.fitted and before.keys() == after.keys()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    d.process_window(mix(rng, range(2, 4), 25))  # 150 + 50: the warm-up completes
    assert d.fitted
    with pytest.raises(error):
        d.score(completing)
