"""The per-window novelty detector over raw texts: features -> score -> flag -> update.

:class:`Detector` composes a :class:`~sparsewatch.models.text_features.StreamingTfidf` (default
:data:`DEFAULT_FEATURES`) and an :class:`~sparsewatch.models.novelty.OnlineL1NoveltyDetector`
for one closed window of raw texts at a time, with no I/O: it scores the window, flags its novel
documents and learns from it (Algorithm 3 of Kasiviswanathan et al., NIPS 2012, one time step),
and returns a :class:`WindowResult`. Why the defaults are what they are: the module docstring of
:mod:`sparsewatch.models.novelty`. :func:`pack_texts` and :func:`unpack_texts` store texts (the
warm-up buffer) in npz-safe checkpoints.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sparsewatch.models.novelty import OnlineL1NoveltyDetector, _nonzero_columns
from sparsewatch.models.text_features import StreamingTfidf, checked_texts
from sparsewatch.models.unexplained import top_unexplained

__all__ = ["DEFAULT_FEATURES", "Detector", "WindowResult"]


class _FeatureDefaults(TypedDict):
    """The :class:`StreamingTfidf` parameters :data:`DEFAULT_FEATURES` sets."""

    max_features: int
    max_terms_per_doc: int | None
    df_half_life: float
    sublinear_tf: bool
    idf_power: float
    past_idf: bool
    bigrams: bool


DEFAULT_FEATURES: _FeatureDefaults = {
    "max_features": 20000,
    "max_terms_per_doc": None,
    "df_half_life": 20000.0,
    "sublinear_tf": True,
    "idf_power": 1.0,
    "past_idf": True,
    "bigrams": False,
}


def pack_texts(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Variable-length strings as npz-safe arrays (no pickle): their UTF-8 bytes concatenated
    (``uint8``) and ``n + 1`` ``int64`` offsets. A fixed-width unicode array pads every entry to
    the longest at 4 bytes a character: one 100 kB text among 1,000 made a 400 MB array. Lone
    surrogates (valid in JSON strings) pass through (``surrogatepass``), so the round trip of
    :func:`unpack_texts` is exact."""
    encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def unpack_texts(data: np.ndarray, offsets: np.ndarray) -> list[str]:
    """The strings :func:`pack_texts` packed."""
    blob = np.asarray(data, dtype=np.uint8).tobytes()
    bounds = np.asarray(offsets, dtype=np.int64).tolist()
    return [blob[a:b].decode("utf-8", "surrogatepass") for a, b in itertools.pairwise(bounds)]


@dataclass(frozen=True)
class WindowResult:
    """Per-document output of :meth:`Detector.process_window` / :meth:`Detector.score`.

    scores : (n,) novelty scores (Eq. (3) optimum incl. out-of-vocabulary mass, 1 = unexplained;
        plus the screening margin when ``score_margin``, then up to ``1 + over_weight + lam``);
    reconstruction_errors : (n,) ``||p - A x||_1`` part of the score;
    novel : (n,) bool flags; threshold : threshold used (``inf`` when nothing can be flagged);
    codes : scipy.sparse CSR (n, k) non-negative codes; top_atoms : (n, n_top) atom ids by
    decreasing code weight, ``-1`` padded; warmup : True while the dictionary was (being)
    initialised (no flags; scores NaN before initialisation); n_terms, n_atoms : model sizes;
    features : the (m, n) term-by-document matrix the scores were computed from (columns sum to
    one minus the out-of-vocabulary mass; ``None`` before initialisation), so callers such as
    topic models need not featurise the window again.
    """

    scores: np.ndarray
    reconstruction_errors: np.ndarray
    novel: np.ndarray
    threshold: float
    codes: sp.csr_matrix
    top_atoms: np.ndarray
    warmup: bool
    n_terms: int
    n_atoms: int
    features: sp.csc_matrix | None = None
    novel_terms: dict[int, list[tuple[str, float]]] = field(default_factory=dict)


def _top_atoms(codes: sp.csr_matrix, n_top: int) -> np.ndarray:
    """Per document the ``n_top`` atoms of largest positive code (ties: the lower atom), ``-1``
    padded; from the stored entries (a dense ``n x k`` copy and its argsort cost 12 bytes per
    document and atom)."""
    C = sp.csr_matrix(codes)
    C.sum_duplicates()
    rows = np.repeat(np.arange(C.shape[0]), np.diff(C.indptr))
    pos = C.data > 0
    rows, cols, vals = rows[pos], C.indices[pos], C.data[pos]
    order = np.lexsort((cols, -vals, rows))
    rank = np.arange(order.size) - np.searchsorted(rows[order], rows[order])
    keep = order[rank < n_top]
    out = np.full((C.shape[0], n_top), -1, dtype=np.int64)
    out[rows[keep], rank[rank < n_top]] = cols[keep]
    return out


class Detector:
    """Per-window novelty detector over raw texts: features -> score -> flag -> update.

    Parameters
    ----------
    features : a :class:`StreamingTfidf` (default: :data:`DEFAULT_FEATURES`).
    model : an :class:`OnlineL1NoveltyDetector` (default parameters).
    warmup_docs : documents collected (over one or more windows) before the dictionary is
        initialised; results are ``warmup=True`` until then, with no flags.
    n_top_atoms : how many atoms per document :class:`WindowResult` lists.
    n_novel_terms : how many unexplained terms :class:`WindowResult` names per novel document
        (``novel_terms``; 0: none).

    Not a scikit-learn estimator: it composes two (the features and the model) over windows of
    raw texts, and keeps their state between windows.

    Examples
    --------
    >>> from sparsewatch.models.novelty import OnlineL1NoveltyDetector
    >>> from sparsewatch.models.window_detector import Detector
    >>> from sparsewatch.replay.synthetic import generate_stream
    >>> texts = [doc["text"] for doc in generate_stream(300, seed=0)]  # synthetic tweets
    >>> detector = Detector(model=OnlineL1NoveltyDetector(n_components=20), warmup_docs=100)
    >>> detector.process_window(texts[:100]).warmup  # the dictionary is built on these
    True
    >>> result = detector.process_window(texts[100:200])  # score, flag, then learn
    >>> result.scores.shape, int(result.novel.sum())  # the top 10% are flagged
    ((100,), 10)
    >>> late = detector.score(texts[200:210])  # late documents: scored, nothing learnt
    >>> late.scores.shape
    (10,)
    """

    def __init__(
        self,
        features: StreamingTfidf | None = None,
        model: OnlineL1NoveltyDetector | None = None,
        warmup_docs: int = 1000,
        n_top_atoms: int = 3,
        n_novel_terms: int = 5,
    ) -> None:
        self.features = features if features is not None else StreamingTfidf(**DEFAULT_FEATURES)
        self.model = model if model is not None else OnlineL1NoveltyDetector()
        self.warmup_docs = warmup_docs
        self.n_top_atoms = n_top_atoms
        self.n_novel_terms = n_novel_terms
        self._warmup: list[str] = []

    @property
    def fitted(self) -> bool:
        return hasattr(self.model, "oiadmm_")

    def _warmup_result(self, n: int) -> WindowResult:
        """Result for ``n`` documents while the dictionary does not exist yet (no scores)."""
        return WindowResult(
            np.full(n, np.nan),
            np.full(n, np.nan),
            np.zeros(n, dtype=bool),
            np.inf,
            sp.csr_matrix((n, 0)),
            np.full((n, self.n_top_atoms), -1),
            True,
            self.features.n_features_ if hasattr(self.features, "terms_") else 0,
            0,
        )

    def _result(self, texts: Sequence[str], learn: bool) -> tuple[WindowResult, np.ndarray]:
        """Scored window (no flags yet) and which documents have any term (in the vocabulary or
        not): only those can be novel (:meth:`OnlineL1NoveltyDetector.flag_novel`)."""
        if learn:  # vocabulary and IDF update, then the row map applied to the model state
            P, oov = self.features.partial_fit_transform(texts, return_oov=True)
            self.model.remap_features(self.features.kept_rows_, self.features.n_new_)
        else:
            P, oov = self.features.transform(texts, return_oov=True)
        res = self.model.code(P.T)
        # A document of out-of-vocabulary words only has no column to code, hence no margin:
        # it scored 1 below a document of known words no atom covers (1 + its margin), and a
        # late one (scored before its words join the vocabulary) below the same text in a window.
        unsupported = (oov > 0) & (np.diff(sp.csc_matrix(P).indptr) == 0)  # P: terms x docs
        scores = (
            self.model.novelty_scores(res) + oov + unsupported * self.model.unsupported_margin()
        )
        return WindowResult(
            scores=scores,
            reconstruction_errors=res.reconstruction_error + oov,
            novel=np.zeros(len(texts), dtype=bool),
            threshold=np.inf,
            codes=res.codes,
            top_atoms=_top_atoms(res.codes, self.n_top_atoms),
            warmup=False,
            n_terms=self.features.n_features_,
            n_atoms=self.model.components_.shape[1],
            features=P,
        ), np.asarray(P.sum(axis=0)).ravel() + oov > 0

    def process_window(self, texts: Sequence[str]) -> WindowResult:
        """Score, flag and learn from one closed window (Algorithm 3, one time step).

        ``ValueError`` for a single string, ``TypeError`` for a document that is not a str,
        before anything changes (the warm-up buffer kept them, then lost every document it held
        when the warm-up's fit refused them)."""
        texts = checked_texts(texts)
        if not self.fitted:
            self._warmup.extend(texts)
            if len(self._warmup) < self.warmup_docs:
                return self._warmup_result(len(texts))
            warmup, self._warmup = self._warmup, []
            self.features.partial_fit(warmup)
            P = self.features.transform(warmup) if self.features.n_features_ else None
            if P is None or _nonzero_columns(P).size == 0:
                # no warm-up text had a term (empty texts, numbers only), or none kept one of the
                # vocabulary's (a vocabulary cap below the warm-up's terms, and max_terms_per_doc
                # keeping out-of-vocabulary ones): there is nothing to build a dictionary on, so
                # the warm-up starts over (those documents stay counted in the document
                # frequencies, as every processed document is)
                return self._warmup_result(len(texts))
            self.model.fit(P.T)
            result, _ = self._result(texts, learn=False)
            return WindowResult(**{**result.__dict__, "warmup": True})
        result, has_terms = self._result(texts, learn=True)
        novel, thr = self.model.flag_novel(result.scores, eligible=has_terms)
        assert result.features is not None  # (only warm-up results have no features)
        terms = self._novel_terms(result, novel)  # against the dictionary before the update
        self.model.partial_fit(result.features.T, codes=result.codes, scores=result.scores)
        return WindowResult(
            **{**result.__dict__, "novel": novel, "threshold": thr, "novel_terms": terms}
        )

    def score(self, texts: Sequence[str]) -> WindowResult:
        """Score (late) documents against the current dictionary; learns nothing, changes no state.

        Flags use the threshold of the last processed window, or the fixed one in ``"threshold"``
        mode (:meth:`OnlineL1NoveltyDetector.late_threshold`); never a document without terms.
        Texts are checked as by :meth:`process_window`."""
        texts = checked_texts(texts)
        if not self.fitted:
            raise RuntimeError("the detector has not finished its warm-up")
        result, has_terms = self._result(texts, learn=False)
        thr = self.model.late_threshold()
        novel = (result.scores > thr) & has_terms
        terms = self._novel_terms(result, novel)
        return WindowResult(
            **{**result.__dict__, "novel": novel, "threshold": thr, "novel_terms": terms}
        )

    def _novel_terms(
        self, result: WindowResult, novel: np.ndarray
    ) -> dict[int, list[tuple[str, float]]]:
        """:attr:`WindowResult.novel_terms` of the ``novel`` documents of ``result``, against
        the current dictionary (the one they were coded with)."""
        docs = np.flatnonzero(novel)
        if not self.n_novel_terms or docs.size == 0 or result.features is None:
            return {}
        P = result.features[:, docs]
        A = self.model.padded_components(P.shape[0])
        rows, mass = top_unexplained(P, A, result.codes[docs], self.n_novel_terms)
        names = self.features.terms_
        return {
            int(d): [(str(names[t]), float(w)) for t, w in zip(r, v, strict=True) if t >= 0]
            for d, r, v in zip(docs.tolist(), rows.tolist(), mass.tolist(), strict=True)
        }

    def top_terms(self, atom: int, n: int = 10) -> list[str]:
        """The ``n`` heaviest terms of dictionary atom ``atom``."""
        A = self.model.components_
        a = A[:, atom] if isinstance(A, np.ndarray) else A[:, [atom]].toarray().ravel()
        idx = np.argsort(-a, kind="stable")[:n]
        return [str(t) for t in self.features.terms_[idx[a[idx] > 0]]]

    def get_state(self) -> dict[str, np.ndarray]:
        """Everything needed to resume (features, dictionary, dual, warm-up buffer)."""
        st = {f"features.{k}": v for k, v in self.features.get_state().items()}
        if self.fitted:
            st.update({f"model.{k}": v for k, v in self.model.get_state().items()})
        st["warmup_utf8"], st["warmup_offsets"] = pack_texts(self._warmup)
        return st

    def set_state(self, state: dict[str, np.ndarray]) -> Detector:
        """Restore :meth:`get_state` (all of it: a checkpoint of the warm-up, which has no model,
        leaves the model unfitted even when this detector had already fitted one)."""
        self.features.set_state({k[9:]: v for k, v in state.items() if k.startswith("features.")})
        model = {k[6:]: v for k, v in state.items() if k.startswith("model.")}
        if model:
            self.model.set_state(model)
        elif self.fitted:
            self.model = clone(self.model)
        if "warmup_texts" in state:  # checkpoints written before the packed layout
            self._warmup = [str(t) for t in np.asarray(state["warmup_texts"]).tolist()]
        else:
            self._warmup = unpack_texts(state["warmup_utf8"], state["warmup_offsets"])
        return self
