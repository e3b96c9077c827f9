"""The detectors the offline evaluation compares, built by name (shared by CLI and benchmark).

Every method here follows :class:`sparsewatch.replay.evaluate.StepMethod`. The shared features are
a :class:`~sparsewatch.models.text_features.StreamingTfidf` with an unbounded vocabulary (so rows
keep their meaning over the whole run: the nearest-neighbour memories rely on it), no decay and
no truncation: the paper's unit-l1 TF-IDF columns. The product's :class:`Detector` consumes raw
texts and uses its own default features (its featurisation is inside its time).

Names
-----
``online``      ONLINE, Algorithm 3 (paper settings: k = 100, lambda = 0.1, whole-document seeds).
``batch``       BATCH-IMPL, Algorithm 7, same settings and the same warm-up dictionary.
``l2-batch``    L2-BATCH, Algorithm 8.
``nn-exact``    exact nearest-neighbour first-story detection against earlier steps.
``nn-lsh``      LSH-approximate nearest neighbour (Petrovic et al. 2010).
``detector``    the product's default :class:`~sparsewatch.models.window_detector.Detector`.

Documents without terms
-----------------------
A document with no term (empty after tokenisation: an all-zero row of the shared features)
scores 0 under every method: nothing to explain. The l1 and l2 methods give that by themselves
(``x = 0`` leaves residual 0), and the product's :class:`Detector` scores it 0 and never flags
it. The nearest-neighbour memories would score it 1 (its cosine with everything is 0), ranking
it with the most novel documents where every other method ranks it last, so
:class:`FirstStoryMethod` sets those scores to 0 and the AUCs compare the same convention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from sparsewatch.models.first_story import ExactFirstStory, LSHFirstStory
from sparsewatch.models.l1_coding import l1_sparse_code
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.novelty_baselines import BatchL1Novelty, L2BatchNovelty
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import Detector
from sparsewatch.replay.evaluate import EstimatorMethod, NothingToLearnError, StepMethod

from sparsewatch.errors import SparsewatchError

PAPER = {"n_components": 100, "lam": 0.1, "atom_terms": None, "over_weight": 1.0}
# ONLINE is Algorithm 3 as published: none of the product's additions (see models.novelty)
# (coding polished after 300 iterations, as BATCH's, which it is compared with)
ONLINE_PAPER = {
    **PAPER,
    "score_margin": False,
    "grow_threshold": None,
    "coding_polish_after": 300,
}


class SharedTfidf:
    """The evaluation's shared features: rows are documents (``n x m`` CSR), unit l1."""

    def __init__(self, **params: Any) -> None:
        defaults = {"max_features": 10**9, "df_half_life": None, "max_terms_per_doc": None}
        self.features = StreamingTfidf(**{**defaults, **params})

    def partial_fit(self, texts: Sequence[str]) -> None:
        self.features.partial_fit(texts)

    def transform(self, texts: Sequence[str]) -> sp.csr_matrix:
        return self.features.transform(texts).T.tocsr()


class DetectorMethod:
    """The product's per-window :class:`Detector` on raw texts (warm-up = first window)."""

    uses_text = True

    def __init__(self, detector: Detector | None = None) -> None:
        self.detector = detector if detector is not None else Detector()

    def warm_up(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> None:
        """The dictionary is built on the warm-up's texts; NothingToLearnError when none of them has
        a term for the detector's features. The detector then keeps waiting for its warm-up:
        step 1 became it, scored by a dictionary fitted on itself, or, with a step smaller than
        the warm-up, failed with "RuntimeError: the detector has not finished its warm-up"."""
        self.detector.warmup_docs = len(texts)
        self.detector.process_window(texts)
        if not self.detector.fitted:
            raise NothingToLearnError("the warm-up has no term for the detector's features")

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.detector.process_window(texts).scores)

    def sre(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> float | None:
        """Mean Eq. (3) optimum (the detector's weighted loss, out-of-vocabulary mass included)
        after the update: ``reconstruction error + lam ||x||_1``. Not the mean score, which
        adds the screening margin (a tie-break among unexplained documents, up to
        ``over_weight + lam`` more) and so exceeded the objective's maximum of 1."""
        res = self.detector.score(texts)
        code_l1 = np.asarray(abs(res.codes).sum(axis=1)).ravel()
        return float(np.mean(res.reconstruction_errors + self.detector.model.lam * code_l1))


def l1_sre(estimator: Any, X: sp.csr_matrix) -> float:
    """The paper's SRE on the step's documents: mean of Eq. (3)'s optimum after the update,
    with the estimator's own loss (its ``over_weight``; it was the plain l1 loss whatever the
    estimator minimised)."""
    A = estimator.components_
    P = sp.csc_matrix(X.T)
    if P.shape[0] < A.shape[0]:
        P = sp.csc_matrix((P.data, P.indices, P.indptr), shape=(A.shape[0], P.shape[1]))
    lam, w = estimator.lam, getattr(estimator, "over_weight", 1.0)
    res = l1_sparse_code(P, A[: P.shape[0]], lam, tol=1e-3, over_weight=w)
    return float(np.mean(res.objective))


def l2_sre(estimator: L2BatchNovelty, X: sp.csr_matrix) -> float:
    """L2-BATCH's own objective (mean over the step's documents) after the update."""
    return float(np.mean(estimator.score_samples(X)))


class OnlineMethod(EstimatorMethod):
    """ONLINE (Algorithm 3): the step's documents are coded once (Algorithm 5); those codes give
    the scores and feed the OIADMM update (``partial_fit``), instead of ``score_samples`` and
    ``partial_fit`` each coding the step. ``update_passes`` > 1 re-codes between updates."""

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        res = self.estimator.code(X)
        scores = np.asarray(self.estimator.novelty_scores(res))
        self.estimator.partial_fit(X, codes=res.codes, scores=scores)
        return scores


class BatchMethod(EstimatorMethod):
    """BATCH (Algorithm 7) and L2-BATCH (Algorithm 8): the detection step's scores also choose the
    ``eta`` new atoms of the dictionary step (``partial_fit(X, scores=...)``), so the step's
    documents are coded once, not once for the scores and again inside ``partial_fit``."""

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        scores = np.asarray(self.estimator.score_samples(X))
        self.estimator.partial_fit(X, scores=scores)
        return scores


class FirstStoryMethod(EstimatorMethod):
    """The nearest-neighbour memories: score against earlier steps, then store the step. A row
    without terms scores 0, as in the product (see the module's "Documents without terms")."""

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        assert X is not None, "a feature method (uses_text False) is given the step's rows"
        scores = super().step(X, texts)
        has_terms = np.asarray(abs(X).sum(axis=1)).ravel() > 0
        return np.where(has_terms, scores, 0.0)


def _online(**params: Any) -> StepMethod:
    return OnlineMethod(OnlineL1NoveltyDetector(**{**ONLINE_PAPER, **params}), sre_fn=l1_sre)


def _batch(**params: Any) -> StepMethod:
    return BatchMethod(BatchL1Novelty(**{**PAPER, **params}), sre_fn=l1_sre)


FACTORIES: dict[str, Callable[..., StepMethod]] = {
    "online": _online,
    "batch": _batch,
    "l2-batch": lambda **p: BatchMethod(L2BatchNovelty(**p), sre_fn=l2_sre),
    "nn-exact": lambda **p: FirstStoryMethod(ExactFirstStory(**p)),
    "nn-lsh": lambda **p: FirstStoryMethod(LSHFirstStory(**p)),
    "detector": lambda **p: DetectorMethod(Detector(**p)),
}


def build_methods(names: Sequence[str], params: dict[str, dict] | None = None) -> dict:
    """Methods by name (``params[name]`` overrides that method's parameters)."""
    params = params or {}
    unknown = [n for n in names if n not in FACTORIES]
    if unknown:
        raise SparsewatchError(f"unknown method(s) {unknown}; choose from {sorted(FACTORIES)}")
    return {name: FACTORIES[name](**params.get(name, {})) for name in names}
