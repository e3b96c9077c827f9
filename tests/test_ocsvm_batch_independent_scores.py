"""A row's anomaly score does not depend on the other rows of its batch, bit for bit.

DL-OCSVM's docstring says so (Algorithm 3 codes each row alone), but the OMP correlations
``D^T Y`` and the OC-SVM decision ``(Z SV^T) lambda`` went through BLAS, whose sums are blocked
and vectorised by the shape of the whole batch (and numpy calls another kernel for one row): the
same row scored alone, in a batch of 2 or of 7, or at another place in it, differed in its last
bits. When more than the ``contamination`` share of the reference rows are identical, the
threshold is exactly their training score, and the strict ``>`` flagged or cleared such a
document by its window's size: the anomaly worker raised alerts for documents identical to the
bulk of its reference set in windows of 1-3 documents, not in windows of 20.

DPL-OCSVM's codes ``P y`` and the kernel variants' kernel rows and kernel maps went through BLAS
matrix products too; they now multiply each row in a BLAS product of its own
(:func:`~sparsewatch.models._ocsvm_base.row_matmul`), all of one shape.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState, build_model
from sparsewatch.consumers.score_messages import ScoredDocument, parse_scored
from sparsewatch.models._ocsvm_base import LinearOCSVM, OCSVMDetectorBase, row_matmul
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

from sparsewatch.config import load_config


def _bulk_and_spread(rng: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of ``m`` features, 98 % of them one row (the rest Gaussian), and which."""
    X = rng.normal(size=(n, m))
    bulk = np.arange(n) < int(0.98 * n)
    X[bulk] = X[0]
    order = rng.permutation(n)
    return X[order], bulk[order]


def _scored_anywhere(
    model: OCSVMDetectorBase, X: np.ndarray, row: np.ndarray, sizes: range = range(2, 51)
) -> set:
    """The scores of ``row`` alone and in batches of ``sizes`` other rows of ``X``, at every
    place, the batch C-ordered (F-ordered for odd sizes)."""
    rng = np.random.default_rng(1)
    scores = {model.decision_function(row[None, :])[0]}
    for n in sizes:
        batch = X[rng.integers(0, len(X), n)]
        for at in range(n):
            placed = batch.copy()
            placed[at] = row
            scores.add(model.decision_function(np.asarray(placed, order="CF"[n % 2]))[at])
    return scores


def test_the_worker_models_score_of_a_row_is_the_same_in_any_batch():
    config = load_config(env={}).anomaly
    X, bulk = _bulk_and_spread(np.random.default_rng(0), 1000, 6)
    model = build_model(config, config.sparsity).fit(X)
    common, other = np.flatnonzero(bulk)[0], np.flatnonzero(~bulk)[0]
    for row in (common, other):
        # scored as at fit (in the batch of all training rows) and anywhere else: one value
        assert _scored_anywhere(model, X, X[row]) == {model.decision_scores_[row]}
    # a row of the bulk scores its training score, which is the threshold: never flagged
    assert model.threshold_ == model.decision_scores_[common]
    assert not model.predict(np.tile(X[common], (7, 1))).any()


def test_an_f_ordered_batch_of_many_features_scores_each_row_as_alone():
    """A DataFrame's values are F-ordered: numpy's row norms (the ``"l2"`` normalisation) then
    summed a row's squares column by column in a batch, pairwise for the row alone (9 of the
    1,436 rows below scored differently for that alone)."""
    X, _ = _bulk_and_spread(np.random.default_rng(2), 300, 10)
    model = DLOCSVM(n_components=12, n_nonzero_coefs=3, normalize="l2", random_state=0).fit(X)
    Y = np.random.default_rng(5).normal(size=(300, 10))
    alone = np.array([model.decision_function(Y[i : i + 1])[0] for i in range(300)])
    for n in (2, 3, 7, 9, 50):
        for start in range(0, 300 - n, n):
            batch = np.asfortranarray(Y[start : start + n])
            assert np.array_equal(model.decision_function(batch), alone[start : start + n])


@pytest.mark.parametrize("order", ["C", "F"])
def test_the_linear_ocsvm_decides_each_row_alone(order):
    """The decision step of all four models (OMP's codes are F-ordered)."""
    rng = np.random.default_rng(3)
    svm = LinearOCSVM(rng.normal(size=(40, 16)), rng.uniform(0, 1, 40), -0.5)
    Z = rng.normal(size=(200, 16))
    Z[rng.random(Z.shape) < 0.8] = 0.0  # (sparse codes)
    alone = np.array([svm.decision(np.asarray(Z[i : i + 1], order=order))[0] for i in range(200)])
    for n in (2, 3, 7, 50, 200):
        assert np.array_equal(svm.decision(np.asarray(Z[:n], order=order)), alone[:n])


# DPL-OCSVM and the kernel variants, small enough to fit in a second
PAIR_AND_KERNEL_MODELS = {
    "dpl-lift": lambda: DPLOCSVM(n_components=16, n_iter=2, random_state=0),
    "dpl-raw": lambda: DPLOCSVM(n_components=16, n_iter=2, normalize=None, random_state=0),
    "kdl-rbf": lambda: KDLOCSVM(n_iter=2, n_landmarks=120, random_state=0),
    "kdl-poly": lambda: KDLOCSVM(kernel="poly", n_iter=2, n_landmarks=120, random_state=0),
    "kdl-linear": lambda: KDLOCSVM(kernel="linear", n_iter=2, n_landmarks=120, random_state=0),
    "kdpl-rbf": lambda: KDPLOCSVM(n_components=16, n_iter=2, n_landmarks=120, random_state=0),
    "kdpl-poly": lambda: KDPLOCSVM(
        kernel="poly", n_components=16, n_iter=2, n_landmarks=120, random_state=0
    ),
    "kdpl-linear": lambda: KDPLOCSVM(
        kernel="linear", n_components=16, n_iter=2, n_landmarks=120, random_state=0
    ),
}


@pytest.mark.parametrize("name", PAIR_AND_KERNEL_MODELS)
def test_dpl_and_kernel_models_score_each_row_as_alone(name):
    """Rows scored one by one, then in C- and F-ordered batches of 2-120 rows at every offset:
    the same scores and labels, bit for bit (the codes ``P y``, the kernel rows and the kernel
    map went through BLAS matrix products, whose sums depend on the batch's shape)."""
    rng = np.random.default_rng(6)
    model = PAIR_AND_KERNEL_MODELS[name]().fit(rng.normal(size=(300, 12)))
    Y = rng.normal(size=(120, 12))
    alone = np.array([model.decision_function(Y[i : i + 1])[0] for i in range(120)])
    labels = (alone > model.threshold_).astype(np.int64)
    for n in (2, 3, 7, 9, 50, 120):
        for start in range(0, 120 - n + 1, n):
            for order in ("C", "F"):
                batch = np.asarray(Y[start : start + n], order=order)
                assert np.array_equal(model.decision_function(batch), alone[start : start + n])
                assert np.array_equal(model.predict(batch), labels[start : start + n])


@pytest.mark.parametrize("name", PAIR_AND_KERNEL_MODELS)
def test_rows_identical_to_the_bulk_that_sets_the_threshold_are_never_flagged(name):
    """98 % of the training rows are one row: the threshold is its training score, which it
    gets in any batch, at any place, C- or F-ordered; so it is never flagged. (Its score was off
    in the last bits by its batch: with these rows, five of the eight models flagged it in every
    window of 1-64 copies, DPL-OCSVM with ``"lift"`` when alone; all eight scored it, or the
    other row, differently in some batch.)"""
    X, bulk = _bulk_and_spread(np.random.default_rng(7), 500, 6)
    model = PAIR_AND_KERNEL_MODELS[name]().fit(X)
    common, other = np.flatnonzero(bulk)[0], np.flatnonzero(~bulk)[0]
    assert model.threshold_ == model.decision_scores_[common]
    for n in (1, 2, 3, 7, 20, 64):
        for order in ("C", "F"):
            assert not model.predict(np.asarray(np.tile(X[common], (n, 1)), order=order)).any()
    for row in (common, other):
        assert _scored_anywhere(model, X, X[row], range(2, 21)) == {model.decision_scores_[row]}


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(30, 200), (200, 30), (1, 40), (40, 1)])
def test_row_matmul_multiplies_each_row_alone(order, shape):
    """Products over many columns (kernel rows, kernel maps), a column of ``Z`` or of ``W``
    alone included: the same row, the same result, in any batch and layout; equal to ``@`` to
    rounding."""
    rng = np.random.default_rng(8)
    W = rng.normal(size=shape)
    Z = rng.normal(size=(150, shape[0]))
    alone = np.array([row_matmul(np.asarray(Z[i : i + 1], order=order), W)[0] for i in range(150)])
    np.testing.assert_allclose(alone, Z @ W, rtol=1e-12, atol=1e-12)
    for n in (2, 3, 7, 50, 150):
        for start in range(0, 150 - n + 1, n):
            batch = np.asarray(Z[start : start + n], order=order)
            assert np.array_equal(row_matmul(batch, W), alone[start : start + n])
            assert np.array_equal(row_matmul(batch, np.asfortranarray(W)), alone[start : start + n])


def _message(doc: str, seq: int, i: int, n: int, values: dict) -> ScoredDocument:
    return parse_scored(
        json.dumps(
            {
                "stream": "s",
                "doc_id": doc,
                "window_seq": seq,
                "index": i,
                "n": n,
                "timestamp": 1_700_000_000_000,
                "score": values["score"],
                "reconstruction_error": values["error"],
                "novel": False,
                "code_index": list(range(len(values["code"]))),
                "code_value": values["code"],
                "n_terms": values["n_terms"],
            }
        ).encode()
    )


# an unexplained 12-word document: the bulk of the reference set
COMMON = {"score": 1.0, "error": 1.0, "code": [], "n_terms": 12}


@pytest.mark.parametrize("seed", [3, 4])
def test_documents_identical_to_the_reference_bulk_are_never_flagged(seed):
    """The worker's reference set (1,000 documents, its default) is over 95 % one document;
    windows of such documents, of any size, are at the threshold and raise no alert (with seed
    4, windows of 2, 3 and 7 raised two alerts each; with seed 3, a window of 1 raised one)."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(960, 990))
    others = [
        {
            "score": float(rng.uniform(0.3, 1)),
            "error": float(rng.uniform(0.3, 1)),
            "code": [float(rng.uniform(0, 1))] * int(rng.integers(1, 4)),
            "n_terms": int(rng.integers(3, 40)),
        }
        for _ in range(1000 - k)
    ]
    rows = [COMMON] * k + others
    rows = [rows[j] for j in np.random.default_rng(1).permutation(1000)]
    base = AnomalyStreamState("s", load_config(env={}), None)
    for w in range(10):  # the reference period: 10 windows of 100
        for i in range(100):
            base.add(_message(f"r{w}-{i}", w, i, 100, rows[100 * w + i]), 0, 100 * w + i, 0.0)
    assert base.model is not None
    for size in (1, 2, 3, 7, 20):
        state = copy.deepcopy(base)
        outputs = [
            out
            for i in range(size)
            for out in state.add(_message(f"new-{i}", 10, i, size, COMMON), 0, 1000 + i, 0.0)
        ]
        (window,) = [out for out in outputs if out.is_window]
        calls = dict(window.calls)
        assert "insert_alerts" not in calls, size
        scores = {row["anomaly_score"] for row in calls["upsert_anomaly_scores"][0]}
        assert scores == {state.model.threshold_}, size
