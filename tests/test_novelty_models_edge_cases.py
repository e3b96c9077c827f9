"""The novelty models: OIADMM with all-zero codes, top-q flags, seeding atoms only from
documents with a term (ONLINE, BATCH-IMPL, L2-BATCH), L2-BATCH on empty windows, the Detector's
restore of a warm-up checkpoint, duplicate entries in first-story detection (each test failed
before its fix)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError
from sparsewatch.models.first_story import ExactFirstStory, LSHFirstStory
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.novelty_baselines import BatchL1Novelty, L2BatchNovelty
from sparsewatch.models.oiadmm import OIADMM
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import Detector

from tests.support.arrays import to_dense


def _topic_texts(rng: np.random.Generator, topics: range, n: int) -> list[str]:
    out = []
    for t in topics:
        words = [f"t{t}w{i}" for i in range(10)]
        out += [" ".join(rng.choice(words, 7, replace=False)) for _ in range(n)]
    return out


@pytest.mark.parametrize("sparse_dual", [True, False])
@pytest.mark.parametrize("tau", [None, 0.7])
def test_oiadmm_window_without_codes_still_updates_the_dual(
    sparse_dual: bool, tau: float | None
) -> None:
    """Algorithm 2 with ``X_t = 0`` (no document used an atom): ``A`` cannot move (the A-update is
    ``tau (Z - E) X_t^T = 0``; ``tau_t = 1/(2 Psi_max)`` is undefined), but the dual update
    ``Delta_{t+1} = Delta_t + beta (P_t - E_{t+1})`` applies. The dual was kept unchanged."""
    rng = np.random.default_rng(0)
    m, k, n, beta = 60, 5, 8, 5.0
    A0 = rng.random((m, k))
    A0 /= A0.sum(axis=0)
    P = sp.csc_matrix(rng.random((m, n)) * (rng.random((m, n)) < 0.3))
    Delta0 = 0.3 * rng.standard_normal((m, n)) * (rng.random((m, n)) < 0.02)
    o = OIADMM(dtype=np.float64, tau=tau).initialize(A0)
    A_before = o.components_.copy()
    o.dual_ = sp.csc_matrix(Delta0) if sparse_dual else Delta0.copy()
    o.partial_fit(P, sp.csr_matrix((k, n)))
    Z = P.toarray() + Delta0 / beta
    E = np.sign(Z) * np.maximum(np.abs(Z) - 1.0 / beta, 0.0)
    np.testing.assert_allclose(to_dense(o.dual_), Delta0 + beta * (P.toarray() - E), atol=1e-12)
    np.testing.assert_allclose(o.components_, A_before, atol=1e-12)  # projected again: rounding
    assert o.n_steps_ == 1 and np.isfinite(o.violation_[-1])


def test_top_q_flags_ceil_of_the_decimal_fraction() -> None:
    """``ceil(q n)`` of the fraction as written: ``0.07 * 100`` is ``7.000000000000001`` in
    floats, and 8 documents of 100 were flagged."""
    scores = np.arange(100, dtype=np.float64)
    novel, thr = OnlineL1NoveltyDetector(top_q=0.07).flag_novel(scores)
    assert novel.sum() == 7 and thr < 93 <= thr + 1e-9
    assert OnlineL1NoveltyDetector(top_q=0.1).flag_novel(scores)[0].sum() == 10
    assert OnlineL1NoveltyDetector(top_q=1.0).flag_novel(scores[:3])[0].all()
    assert OnlineL1NoveltyDetector(top_q=0.1).flag_novel(scores[10:20])[0].sum() == 1  # q n = 1


def test_a_window_too_small_for_a_top_q_cut_is_judged_by_the_last_threshold() -> None:
    """With ``q n < 1`` the cut rounded up to one document: the best of every window an idle
    stream's timeout closed after a document or two was flagged, whatever its score, so a quiet
    stream raised an alert per window. Such windows use (and keep) the last threshold."""
    model = OnlineL1NoveltyDetector(top_q=0.1, threshold=0.95)
    assert model.flag_novel(np.array([0.5, 0.96]))[0].tolist() == [False, True]  # before any cut
    novel, thr = model.flag_novel(np.linspace(0.0, 0.99, 100))  # a full window: its top 10%
    assert novel.sum() == 10 and 0.89 < thr < 0.9 and model.threshold_ == thr
    for small in ([0.2], [0.3, 0.85], [0.95, 0.1, 0.5], np.full(9, 0.2)):
        novel, used = model.flag_novel(np.asarray(small))
        assert used == thr and model.threshold_ == thr  # judged by the last cut, which stays
        np.testing.assert_array_equal(novel, np.asarray(small) > thr)
    eligible = np.array([True, False] * 10)  # 10 eligible of 20: q n = 1, a cut of their own
    novel, used = model.flag_novel(np.arange(20.0) / 20, eligible=eligible)
    assert novel.tolist() == [False] * 18 + [True, False] and used == model.threshold_ < 0.9


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5])
def test_top_q_outside_the_unit_interval_is_refused(q: float) -> None:
    """``top_q = 1.5`` flagged 5 of 10 documents (the partition index went negative)."""
    with pytest.raises(ValueError, match="top_q"):
        OnlineL1NoveltyDetector(top_q=q).flag_novel(np.arange(10.0))


def test_initial_atoms_are_seeded_from_documents_with_a_term() -> None:
    """A warm-up document without any term seeded an all-zero atom (of no use to any document);
    with half the warm-up empty, about half the atoms were zero. Without empty documents the
    choice of seeds is the one it was (same random draws)."""
    rng = np.random.default_rng(1)
    X = sp.random(40, 60, density=0.15, random_state=1, format="csr")
    X = sp.csr_matrix(X.multiply(1.0 / np.maximum(X.sum(axis=1), 1e-12)))
    empty = sp.csr_matrix((40, 60))
    mixed = sp.vstack([X, empty]).tocsr()[rng.permutation(80)]
    for est in (
        OnlineL1NoveltyDetector(n_components=30, n_init_iter=1),
        BatchL1Novelty(n_components=30, n_init_iter=1, eta=0),
        L2BatchNovelty(n_components=30, n_alternations=1),
    ):
        est.fit(mixed)
        A = to_dense(est.components_)
        assert A.shape[1] == 30 and (np.abs(A).sum(axis=0) > 0).all(), type(est).__name__
    with pytest.raises(ValueError, match="no document has a term"):
        OnlineL1NoveltyDetector(n_components=3).fit(empty)
    with pytest.raises(ValueError, match="no document has a term"):
        L2BatchNovelty(n_components=3).fit(empty)


def test_growth_seeds_no_atom_from_a_document_without_a_term() -> None:
    """A document whose terms are all out of the vocabulary (here: in one document only, below
    ``min_df_new``) scores its out-of-vocabulary mass, 1, so it counted as poorly represented and
    seeded an all-zero atom (at the cap it would replace a real one)."""
    rng = np.random.default_rng(0)
    d = Detector(
        StreamingTfidf(min_df_new=2, idf_power=0.0),
        OnlineL1NoveltyDetector(n_components=10, lam=0.05, atom_terms=5),
        warmup_docs=60,
    )
    d.process_window(_topic_texts(rng, range(3), 20))
    r = d.process_window([*_topic_texts(rng, range(3, 5), 10), "zyxwv qwerty plugh xyzzy"])
    margin = d.model.unsupported_margin()  # ranked with the unexplained documents (> 1)
    assert r.scores[-1] == pytest.approx(1.0 + margin) and r.features[:, -1].nnz == 0
    assert margin > 0
    A = to_dense(d.model.components_)
    assert A.shape[1] > 10  # the new topics seeded atoms
    assert (A.sum(axis=0) > 0).all()


def test_batch_baselines_seed_no_atom_from_empty_documents() -> None:
    """BATCH-IMPL and L2-BATCH add ``eta`` atoms from a step's worst-represented documents; an
    empty document (ranked last, but taken when fewer than ``eta`` documents have terms)
    seeded a zero atom."""
    X = sp.random(30, 40, density=0.2, random_state=0, format="csr")
    step = sp.vstack([X[:2], sp.csr_matrix((4, 40))]).tocsr()
    for est in (BatchL1Novelty(n_components=5, eta=3), L2BatchNovelty(n_components=5, eta=3)):
        est.fit(X).partial_fit(step)
        A = to_dense(est.components_)
        assert A.shape[1] == 7 and (A.sum(axis=0) > 0).all(), type(est).__name__


def test_l2_batch_takes_windows_without_documents() -> None:
    """``normalize`` refuses zero rows: an empty window raised in ``score_samples`` and
    ``partial_fit`` of L2-BATCH (BATCH-IMPL and the nearest-neighbour peers took it)."""
    X = sp.random(30, 40, density=0.2, random_state=0, format="csr")
    m = L2BatchNovelty(n_components=5, eta=3).fit(X)
    assert m.score_samples(sp.csr_matrix((0, 40))).shape == (0,)
    m.partial_fit(sp.csr_matrix((0, 40)))  # no atom added; the history alternates again
    assert m.components_.shape == (40, 5) and m.P_.shape == (40, 30) and m.codes_.shape == (5, 30)
    assert np.isfinite(m.score_samples(X)).all()


def test_restoring_a_warmup_checkpoint_unfits_the_detector() -> None:
    """``set_state`` with a checkpoint taken during the warm-up (no model keys) left an already
    fitted model in place: the detector then scored with a dictionary the checkpoint never had,
    against a vocabulary restored to the warm-up's."""
    rng = np.random.default_rng(3)
    w1, w2, w3 = (_topic_texts(rng, range(3), 10) for _ in range(3))

    def make() -> Detector:
        model = OnlineL1NoveltyDetector(n_components=10, lam=0.05, atom_terms=5)
        return Detector(StreamingTfidf(idf_power=0.0), model, warmup_docs=50)

    d = make()
    d.process_window(w1)
    checkpoint = d.get_state()
    d.process_window(w2)
    assert d.fitted
    d.set_state(checkpoint)
    assert not d.fitted
    fresh = make().set_state(checkpoint)
    for w in (w2, w3):
        a, b = d.process_window(w), fresh.process_window(w)
        np.testing.assert_array_equal(a.scores, b.scores)
        np.testing.assert_array_equal(a.novel, b.novel)


@pytest.mark.parametrize("cls", [ExactFirstStory, LSHFirstStory])
def test_first_story_sums_duplicate_entries(cls: type) -> None:
    """A CSR row with a duplicate stored entry (1 and 1 in column 0) was normalised with
    ``1 + 1`` for ``(1 + 1)^2``: the cosine of a document with itself came out above 1 and its
    novelty negative. The caller's matrix is left as it was."""
    dup = sp.csr_matrix((np.array([1.0, 1.0, 2.0]), np.array([0, 0, 1]), np.array([0, 3])), (1, 4))
    plain = sp.csr_matrix(dup.toarray())
    for memory, query in ((plain, dup), (dup, plain), (dup, dup)):
        np.testing.assert_allclose(cls().fit(memory).score_samples(query), 0.0, atol=1e-12)
    assert not dup.has_canonical_format and dup.data.tolist() == [1.0, 1.0, 2.0]


def test_state_calls_before_fit_raise_not_fitted() -> None:
    """``get_state``/``remap_features`` of the ONLINE detector and the batch baselines'
    ``objective`` raised a bare ``AttributeError`` naming a private attribute."""
    for call in (
        lambda: OnlineL1NoveltyDetector().get_state(),
        lambda: OnlineL1NoveltyDetector().remap_features(np.arange(0), 1),
        lambda: L2BatchNovelty().objective(),
        lambda: BatchL1Novelty().objective(),
    ):
        with pytest.raises(NotFittedError):
            call()


def test_lsh_refit_draws_the_hyperplanes_of_the_current_parameters() -> None:
    """``fit`` kept the hyperplanes of the first fit: after ``set_params(n_bits=6)`` the keys
    failed to reshape into the tables, after a new ``random_state`` the old seed's planes were
    used. Refitting with unchanged parameters gives the same planes and scores as before."""
    X = sp.random(50, 30, density=0.2, random_state=0, format="csr")
    Q = sp.random(5, 30, density=0.2, random_state=1, format="csr")
    m = LSHFirstStory(n_bits=8, n_tables=4, n_recent=0).fit(X)
    first = (m.planes_.copy(), m.score_samples(Q))
    m.fit(X)
    np.testing.assert_array_equal(m.planes_, first[0])
    np.testing.assert_array_equal(m.score_samples(Q), first[1])
    m.set_params(n_bits=6).fit(X)
    assert m.planes_.shape == (30, 24) and m.score_samples(Q).shape == (5,)
    m.set_params(n_bits=8, random_state=1).fit(X)
    other = LSHFirstStory(n_bits=8, n_tables=4, n_recent=0, random_state=1).fit(X)
    np.testing.assert_array_equal(m.planes_, other.planes_)


def test_a_window_without_eligible_documents_reports_the_threshold_late_documents_use() -> None:
    """Late documents are flagged against the threshold the last window reported: one whose
    documents have no term reported ``inf`` while ``threshold_`` kept the window before's. Such
    a window has no top-``q`` cut of its own: it reports and keeps the last one."""
    rng = np.random.default_rng(4)
    d = Detector(
        StreamingTfidf(idf_power=0.0),
        OnlineL1NoveltyDetector(n_components=10, lam=0.05, atom_terms=5),
        warmup_docs=60,
    )
    d.process_window(_topic_texts(rng, range(3), 20))
    last = d.process_window(_topic_texts(rng, range(3, 5), 10)).threshold
    assert np.isfinite(last)
    empty = d.process_window(["", "the of and", "1234"])
    assert empty.threshold == last == d.model.threshold_ and not empty.novel.any()
    late = d.score(_topic_texts(rng, range(5, 7), 5))
    assert late.threshold == last
    np.testing.assert_array_equal(late.novel, late.scores > last)


def test_a_document_of_unknown_words_ranks_with_the_unexplained_ones_late_or_not() -> None:
    """Words out of the vocabulary leave a document no column to code, hence no screening
    margin: scored late (before its words join the vocabulary) it got 1, below any document no
    atom explains (1 + margin), and below the same text in a window, whose new words join the
    vocabulary first."""
    rng = np.random.default_rng(1)
    d = Detector(model=OnlineL1NoveltyDetector(n_components=12, lam=0.05), warmup_docs=60)
    d.process_window(_topic_texts(rng, range(3), 20))
    d.process_window(_topic_texts(rng, range(3), 20))
    late = d.score(["zzzqqq xxyyzz"])
    margin = d.model.unsupported_margin()
    assert margin > 0 and late.scores[0] == pytest.approx(1.0 + margin, rel=1e-9)
    window = d.process_window(["zzzqqq xxyyzz", *_topic_texts(rng, range(3), 19)])
    assert window.scores[0] == pytest.approx(late.scores[0], rel=1e-6)
