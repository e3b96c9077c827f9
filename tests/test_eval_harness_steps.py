"""The offline evaluation: an empty step's SRE, and what a batch baseline's step times."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.models.novelty_baselines import BatchL1Novelty, L2BatchNovelty
from sparsewatch.replay.eval_methods import SharedTfidf, build_methods
from sparsewatch.replay.evaluate import Corpus, evaluate_corpus, to_json

TEXTS = [
    "oil price opec output",
    "opec oil quota price",
    "wheat grain harvest export",
    "grain wheat crop export",
    "gold mine ounce price",
    "gold ounce mine output",
    "coffee bean brazil crop",
    "coffee brazil export bean",
]


def _docs(n: int) -> list[dict]:
    return [
        {"text": TEXTS[i % len(TEXTS)], "labels": [TEXTS[i % len(TEXTS)].split()[0]]}
        for i in range(n)
    ]


def test_a_step_without_documents_has_no_sre_and_the_result_is_valid_json() -> None:
    """A corpus cut with an empty step (e.g. steps by time) reported SRE NaN for it (mean over
    no document, with a RuntimeWarning), and ``json.dumps`` wrote the invalid token NaN."""
    docs = _docs(24)
    step_of = np.r_[np.zeros(12, int), np.ones(6, int), np.full(6, 3)]  # step 2 is empty
    params = {name: {"n_components": 4} for name in ("online", "batch", "l2-batch")}
    methods = build_methods(["online", "batch", "l2-batch"], params)
    result = evaluate_corpus(Corpus("tiny", docs, step_of), methods, SharedTfidf())
    for m in result["methods"].values():
        assert m["sre"][1] is None
        assert all(isinstance(v, float) for v in (m["sre"][0], m["sre"][2]))
    json.dumps(to_json(result), allow_nan=False)  # raised ValueError on NaN


@pytest.mark.parametrize(("name", "cls"), [("batch", BatchL1Novelty), ("l2-batch", L2BatchNovelty)])
def test_a_batch_step_codes_its_documents_once(monkeypatch, name: str, cls: type) -> None:
    """The timed step of BATCH (Algorithm 7) and L2-BATCH (Algorithm 8) coded the step's
    documents twice: once for the scores, again in ``partial_fit`` to choose the new atoms (the
    same codes, same dictionary): wasted work inside the reported per-step wall time."""
    features = SharedTfidf()
    docs = _docs(40)
    features.partial_fit([d["text"] for d in docs[:24]])
    X0 = features.transform([d["text"] for d in docs[:24]])
    step_texts = [d["text"] + " tanker" * (i % 2) for i, d in enumerate(docs[24:])]
    features.partial_fit(step_texts)
    X1 = features.transform(step_texts)

    method = build_methods([name], {name: {"n_components": 4, "eta": 2}})[name]
    method.warm_up(X0, [])
    reference = cls(n_components=4, eta=2).fit(X0)
    ref_scores = reference.score_samples(X1)
    reference.partial_fit(X1)

    sizes: list[int] = []
    original = cls._code

    def counting(self, P, A, x0=None):
        sizes.append(P.shape[1])
        return original(self, P, A, x0)

    monkeypatch.setattr(cls, "_code", counting)
    scores = method.step(X1, step_texts)
    assert sizes.count(X1.shape[0]) == 1, sizes
    # the same step as scoring and updating separately: same scores, same dictionary
    np.testing.assert_allclose(scores, ref_scores)
    np.testing.assert_allclose(method.estimator.components_, reference.components_)


@pytest.mark.parametrize("cls", [BatchL1Novelty, L2BatchNovelty])
def test_partial_fit_refuses_scores_of_another_length_before_changing_state(cls: type) -> None:
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.random((20, 6)) * (rng.random((20, 6)) < 0.5))
    model = cls(n_components=3).fit(X[:10])
    wider = sp.hstack([X[10:], sp.csr_matrix(np.ones((10, 1)))]).tocsr()
    A = model.components_.copy()
    with pytest.raises(ValueError, match="one per document"):
        model.partial_fit(wider, scores=np.zeros(9))
    with pytest.raises(ValueError, match="finite"):
        model.partial_fit(wider, scores=np.full(10, np.nan))
    np.testing.assert_array_equal(model.components_, A)
    assert model.P_.shape == (6, 10)
