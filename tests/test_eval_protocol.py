"""The offline evaluation protocol: steps, novelty labels, AUC, the harness on a tiny corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import roc_auc_score
from sparsewatch.models.first_story import ExactFirstStory
from sparsewatch.replay.evaluate import (
    EstimatorMethod,
    assign_steps,
    auc_standard_error,
    evaluate_corpus,
    load_jsonl,
    load_reuters,
    make_corpus,
    novelty_labels,
    roc_auc,
    stratified_auc,
)

from sparsewatch.errors import SparsewatchError


def test_assign_steps_warmup_then_fixed_steps() -> None:
    np.testing.assert_array_equal(assign_steps(9, 3, 2), [0, 0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(assign_steps(9, 3, 2, max_steps=2), [0, 0, 0, 1, 1, 2, 2, -1, -1])
    with pytest.raises(SparsewatchError):
        assign_steps(5, 0, 2)


def test_a_step_never_splits_documents_of_one_timestamp() -> None:
    """A step, the warm-up too, goes on to the end of its last timestamp's documents; the next
    step's count starts after them."""
    times = [1, 2, 3, 3, 3, 4, 5, 6, 6]
    np.testing.assert_array_equal(assign_steps(9, 2, 2, times=times), [0, 0, 1, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(
        assign_steps(9, 3, 3, max_steps=1, times=times), [0, 0, 0, 0, 0, 1, 1, 1, 1]
    )
    np.testing.assert_array_equal(assign_steps(4, 1, 1, times=[7, 7, 7, 7]), [0, 0, 0, 0])


_DAILY = [
    *({"text": f"alpha doc {i}", "timestamp": "2020-01-01", "labels": ["a"]} for i in range(4)),
    {"text": "beta news", "timestamp": "2020-01-02", "labels": ["b"]},
    {"text": "beta again", "timestamp": "2020-01-02T00:00:00Z", "labels": ["b"]},
    {"text": "alpha later", "timestamp": "2020-01-03", "labels": ["a"]},
]


@pytest.mark.parametrize("order", [1, -1])
def test_two_first_stories_of_one_day_are_both_novel_in_any_file_order(
    tmp_path: Path, order: int
) -> None:
    """The step cut fell between two same-day first stories: the first was novel, its twin (same
    timestamp, next step) was not, and file order decided which."""
    path = tmp_path / "daily.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in _DAILY[::order]))
    docs = load_jsonl(path)
    corpus = make_corpus("daily", docs, warmup=4, step_size=1)
    novel, _ = novelty_labels([d["labels"] for d in docs], corpus.step_of)
    assert corpus.step_of.tolist() == [0, 0, 0, 0, 1, 1, 2]
    assert novel.tolist() == [False] * 4 + [True, True, False]
    assert "never split" in corpus.protocol["ties"]
    assert corpus.protocol["order"] == "timestamp, ties by corpus position"


def test_a_document_without_a_readable_timestamp_is_refused_by_name() -> None:
    docs = [{"text": "a", "timestamp": 1, "labels": ["x"]}, {"text": "b", "labels": ["y"]}]
    with pytest.raises(SparsewatchError, match="tiny: document 2 has no 'timestamp'"):
        make_corpus("tiny", docs, 1, 1)
    docs[1]["timestamp"] = "yesterday"
    with pytest.raises(SparsewatchError, match="tiny: document 2: bad timestamp 'yesterday'"):
        make_corpus("tiny", docs, 1, 1)


def test_the_reuters_protocol_records_the_tie_rule_and_the_dropped_stories(
    tmp_path: Path,
) -> None:
    """It said "ties by corpus position" (they are by NEWID) and not that stories without
    TOPICS were dropped."""
    stories = [
        {"id": 3, "title": "t", "body": "wheat crop", "date": "1987-02-26", "topics": ["grain"]},
        {"id": 2, "title": "t", "body": "no topic", "date": "1987-02-26", "topics": []},
        {"id": 1, "title": "t", "body": "oil price", "date": "1987-02-26", "topics": ["crude"]},
        {"id": 4, "title": "t", "body": "gold mine", "date": "1987-02-27", "topics": ["gold"]},
    ]
    path = tmp_path / "reuters.jsonl"
    path.write_text("".join(json.dumps(story) + "\n" for story in stories))
    docs = load_reuters(path)
    assert [d["id"] for d in docs] == ["1", "3", "4"]
    protocol = make_corpus("reuters", docs, 1, 1).protocol
    assert protocol["order"] == "timestamp, ties by NEWID"
    assert protocol["labelled_only"] is True
    assert protocol["unlabelled_dropped"] == 1
    every = load_reuters(path, labelled_only=False)
    assert [d["id"] for d in every] == ["1", "2", "3", "4"]
    assert make_corpus("reuters", every, 1, 1).protocol["unlabelled_dropped"] == 0


def test_novelty_labels_on_a_hand_built_corpus() -> None:
    labels = [["a"], ["b"], [], ["a", "c"], ["c"], ["d"], ["c"], ["d", "a"], ["e"]]
    steps = np.array([0, 0, 0, 1, 1, 1, 2, 2, -1])
    novel, evaluable = novelty_labels(labels, steps, "none")
    # step 1: {a,c} has a (seen) -> not novel; {c} unseen before step 1 -> novel even though
    # another document of the same step has it; {d} novel. step 2: c and d were seen in step 1.
    np.testing.assert_array_equal(evaluable, [0, 0, 0, 1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(novel, [0, 0, 0, 0, 1, 1, 0, 0, 0])
    novel_any, _ = novelty_labels(labels, steps, "any")
    np.testing.assert_array_equal(novel_any, [0, 0, 0, 1, 1, 1, 0, 0, 0])
    with pytest.raises(SparsewatchError):
        novelty_labels(labels, steps, "some")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=2, max_size=60))
def test_auc_equals_sklearn_with_ties(pairs: list[tuple[bool, int]]) -> None:
    y = np.array([p[0] for p in pairs])
    s = np.array([p[1] for p in pairs], dtype=float)
    ours = roc_auc(y, s)
    if y.all() or not y.any():
        assert ours is None
    else:
        assert ours == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_auc_of_many_scores_is_exact() -> None:
    """20,000 scores with ties: the rank sum (about 1e8) is exact, as SciPy 1.18's float32 ranks
    of float32 scores summed in float32 were not (off in the fourth decimal)."""
    rng = np.random.default_rng(0)
    y = rng.random(20_000) < 0.5
    s = np.round(rng.random(20_000) + 0.3 * y, 3)
    assert roc_auc(y, s) == pytest.approx(roc_auc_score(y, s.astype(np.float32)), abs=1e-12)


def test_auc_counts_scores_equal_up_to_float32_rounding_as_ties() -> None:
    """Unexplained documents score their l1 norm, 1 up to ~1e-8: in float64 the AUC ordered
    these ties by rounding noise (here it made a tie of all four look like a perfect ranking)."""
    y = np.array([True, True, False, False])
    s = 1.0 + np.array([3e-9, 2e-9, -1e-9, -4e-9])
    assert roc_auc(y, s) == 0.5
    assert roc_auc(y, s + np.array([0.0, 0.0, -1e-3, 0.0])) == 0.75  # a real difference counts


class _Tfidf:
    """A featurizer refitted on everything seen so far (columns in first-seen order)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.vocab: dict[str, int] = {}

    def partial_fit(self, texts: list[str]) -> None:
        self.seen += texts
        for t in texts:
            for w in t.split():
                self.vocab.setdefault(w, len(self.vocab))

    def transform(self, texts: list[str]):
        vec = TfidfVectorizer(vocabulary=self.vocab, token_pattern=r"\S+").fit(self.seen)
        return vec.transform(texts)


def test_harness_on_a_tiny_corpus_nearest_neighbour_is_perfect() -> None:
    docs = [
        {"text": t, "labels": lab, "timestamp": i}
        for i, (t, lab) in enumerate(
            [
                ("oil price opec", ["oil"]),
                ("opec oil output", ["oil"]),
                ("wheat harvest grain", ["grain"]),
                ("grain wheat export", ["grain"]),
                ("oil opec quota", ["oil"]),
                ("gold mine ounce", ["gold"]),
                ("wheat grain crop", ["grain"]),
                ("gold ounce price", ["gold"]),
                ("coffee bean brazil", ["coffee"]),
                ("opec oil price", ["oil"]),
            ]
        )
    ]
    corpus = make_corpus("tiny", docs, warmup=4, step_size=3)
    result = evaluate_corpus(corpus, {"nn": EstimatorMethod(ExactFirstStory())}, _Tfidf())
    assert [s["n_novel_none"] for s in result["steps"]] == [1, 1]
    m = result["methods"]["nn"]
    assert m["auc_none"] == [1.0, 1.0]
    assert m["pooled_auc_none"] == 1.0
    assert len(m["time_s"]) == 2


def test_reuters_loader_protocol(shared_data) -> None:
    docs = load_reuters(shared_data / "reuters21578.jsonl.gz")
    assert len(docs) == 11_367
    assert all(d["labels"] for d in docs)
    stamps = [d["timestamp"] for d in docs]
    assert stamps == sorted(stamps)
    corpus = make_corpus("reuters", docs, 1000, 1000, max_steps=7)
    # unique timestamps: the steps are the plain counts' (the committed results stand)
    np.testing.assert_array_equal(corpus.step_of, assign_steps(len(docs), 1000, 1000, 7))
    novel, evaluable = novelty_labels([d["labels"] for d in docs], corpus.step_of)
    assert evaluable.sum() == 7000
    assert 5 <= novel.sum() <= 30


def test_auc_standard_error_matches_the_spread_of_simulated_aucs() -> None:
    rng = np.random.default_rng(0)
    n_pos, n_neg = 30, 300
    aucs = []
    for _ in range(400):
        y = np.r_[np.ones(n_pos, bool), np.zeros(n_neg, bool)]
        s = np.r_[rng.normal(1.0, 1, n_pos), rng.normal(0, 1, n_neg)]
        aucs.append(roc_auc(y, s))
    se = auc_standard_error(float(np.mean(aucs)), n_pos, n_neg)
    assert 0.7 * np.std(aucs) <= se <= 1.3 * np.std(aucs)
    assert auc_standard_error(None, 1, 1) is None


def test_the_stratified_auc_counts_the_pairs_of_a_step_only() -> None:
    """Brute force over the (novel, known) pairs within each step; scores that fall from step to
    step with no ranking within any step (each step's AUC 0.5) leave it at 0.5, where the pooled
    AUC, with the novel documents in the first step, reads them as a ranking."""
    rng = np.random.default_rng(3)
    steps = []
    for k, (n, p) in enumerate([(40, 5), (30, 0), (50, 7), (20, 20), (60, 2)]):
        y = np.zeros(n, bool)
        y[rng.choice(n, p, replace=False)] = True
        steps.append((y, rng.integers(0, 6, n) - 3.0 * k))  # ties within steps
    wins = pairs = 0.0
    for y, s in steps:
        diff = s[y][:, None] - s[~y][None, :]
        wins += (diff > 0).sum() + 0.5 * (diff == 0).sum()
        pairs += diff.size
    aucs = [roc_auc(y, s) for y, s in steps]
    auc, se = stratified_auc(
        aucs, [int(y.sum()) for y, _ in steps], [int((~y).sum()) for y, _ in steps]
    )
    assert auc == pytest.approx(wins / pairs, abs=1e-12)
    assert se is not None and 0 < se < 0.2

    drifting = [(np.r_[np.ones(5, bool), np.zeros(95, bool)], np.full(100, 10.0))] + [
        (np.zeros(100, bool), np.full(100, 10.0 - k)) for k in range(1, 4)
    ]
    y = np.concatenate([y for y, _ in drifting])
    s = np.concatenate([s for _, s in drifting])
    aucs = [roc_auc(y, s) for y, s in drifting]
    counts = [int(y.sum()) for y, _ in drifting], [int((~y).sum()) for y, _ in drifting]
    assert stratified_auc(aucs, *counts)[0] == 0.5
    assert roc_auc(y, s) > 0.8
    assert stratified_auc([None, None], [0, 3], [4, 0]) == (None, None)
