"""Dynamic NMF with temporal regularisation for evolving and emerging topics.

Saha and Sindhwani, "Learning Evolving and Emerging Topics in Social Media: A Dynamic NMF
approach with Temporal Regularization", WSDM 2012.

Each call of :meth:`DynamicNMF.partial_fit` is one time point ``t`` with its documents ``X(t)``
(documents x terms, scikit-learn orientation). The model keeps the documents of the last
``window`` (omega) time points, stacked as ``X`` (``N x D``), and factorises
``X ~ W H`` with topics ``H`` (``K x D``, every row on the probability simplex) and document
weights ``W >= 0`` (``N x K``):

    min  ||X - W_ev H_ev - W_em H_em||_F^2 + mu sum_{i in em} L(S w_i)
    s.t. h_i in simplex; for evolving i: |h_i - h_i(t-1)| <= delta entrywise  (constraint (4))

* Evolving topics are the topics of ``t - 1`` (emerging ones included: an emerging topic becomes
  evolving at the next time point); ``K_em = n_emerging`` new emerging topics per time point.
* ``S`` (``tau x N``, ``tau <= omega`` time points in the window) sums a topic's document
  weights per time point; ``F = (I + 2 lambda D2^T D2)^{-1}`` is the Hodrick-Prescott smoother
  (``D2`` second differences, ``lambda = hp_lambda``) and ``D`` the first-difference operator.
  The hinge emergence regulariser ``L(S w) = sum_j c_j max(0, margin - (D F S w)_j)^2`` rewards
  topics whose smoothed volume rises by ``margin`` per time point, with ``c_j = j / (tau - 1)``
  weighting recent differences more (the weights are our choice; the paper leaves them free).
  Scale: the hinge is made invariant to the scale of ``X`` (``X -> cX`` scales the whole
  objective by ``c^2``): ``w`` enters as ``S w / a`` and the hinge is weighted by ``mu b``, with
  ``a`` the mean l1 mass and ``b`` the mean squared l2 norm of a window document. So ``margin``
  is a rise of the smoothed volume in *average documents* per time point, and ``mu = 1`` prices
  a unit hinge gap like the squared norm of one average document.
* Empty documents (all-zero rows, e.g. no vocabulary term): their residual is ``-w_i h_i``, so
  the quadratic keeps their weights at 0 and only the hinge, rewarding any rise of ``S w``, would
  give them weight on an emerging topic (they were then labelled with it and counted in its
  ``n_documents``). They are left out of the problem: zero weights, their columns of ``S``
  zeroed (no volume), not counted in the averages ``a`` and ``b``, label -1, and they seed no
  emerging topic.
* Rank-one cyclic updates (HALS order, one topic at a time, residual ``R_i = X - sum_{j != i}
  w_j h_j``): evolving ``w_i = max(0, R_i h_i) / ||h_i||^2`` in closed form; emerging ``w_i`` by
  projected gradient on problem (9) (the quadratic plus ``mu L``); ``h_i`` by projecting
  ``R_i^T w_i / ||w_i||^2`` onto the simplex with the box bounds of (4) (plain simplex for
  emerging topics) by :func:`sparsewatch.models.projections.simplex_box_threshold`, hot-started
  from the topic's threshold one sweep earlier.
* Hot start: topics and the weights of documents still in the window are kept from ``t - 1``;
  new documents get NNLS weights on the current topics; emerging topics start from the positive
  residuals ``max(x - w H, 0)`` of new documents, the worst-fitted first (only documents with
  a positive residual), one per story (our choice, not the paper's): a document whose positive
  residual has cosine ``seed_similarity`` (default 0.3) or more with a seed already chosen
  seeds no other. The ``K_em`` worst-fitted
  documents were the seeds before, usually all of one burst: on 80 documents with a new story
  in 20 of them, ``K_em = 3`` split it into three topics of 9, 6 and 5 documents (term cosines
  0.17-0.43, three alerts), and two stories born together got topics mixing both. When fewer
  than ``K_em`` documents remain unlike the seeds, fewer emerging topics are added.
* The first time point is a plain NMF (no box, no emerging topics) of ``n_initial_topics``.
* After each time point documents of ``X(t)`` are tagged with their dominant topic id (``labels_``,
  as :meth:`DynamicNMF.predict` gives it: the largest NNLS weight on the final topics, not the
  solver's weights, which the hinge raises on emerging topics) and each emerging topic yields an
  :class:`EmergingTopicEvent` (``events_``) with its top terms, its raw volume ``S w`` over the
  window and that volume's rise at the time point (the event's score), and its smoothed trend
  ``F S w``. The smoother belongs to the hinge (the paper's objective); as a report it invented
  history: a story only in the last of 7 time points (raw volumes 0.49 0.22 0.54 0.47 0.42 0.55
  18.56) had the trend -1.95 -0.74 0.58 2.2 4.29 6.91 9.96, negative volumes and a rise over the
  whole window, and slope 3.05 for a jump of 18.
* With a growing vocabulary, a wider ``X(t)`` appends terms (zero weight in every topic);
  :meth:`resize_features` also handles evicted terms. At most ``max_topics`` topics are kept:
  beyond that, the evolving topics with the least weight in the window are dropped.
* Bounded time points: a time point of more than ``max_step_documents`` documents takes part in
  the problem through a uniform sample of that many (seeded by ``random_state`` and the time
  index: a restart draws the same), each sampled document standing for ``n_t / kept_t`` of
  them (``doc_weights_``): it weighs that much in the quadratic term, the volumes ``S w`` and
  the averages ``a`` and ``b``, so the objective and the volumes are unbiased estimates of the
  whole time point's. Every document of ``X(t)`` still gets a label, by NNLS on the final
  topics as the sampled ones (they count in an event's ``n_documents``; its ``strength`` is the
  weighted sample's, on the scale of its volume). Without the
  bound the model kept every document of the last ``window`` time points (state, checkpoint
  and each solve grow with them): measured on Reuters TF-IDF at 20,000 terms, time points of
  8,000 documents grew the state by 11.6 MB each, to 84 MB at 56,000 documents, and the peak
  of a step from 45 MB to 317 MB (3.2 s a step, one BLAS thread); with the default bound of
  2,000 the window holds 14,000 documents, the state 25 MB and a step peaks at 98 MB (1.4 s),
  whatever the size of the time points.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import asdict, dataclass
from typing import TypeGuard

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.decomposition import NMF
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils import Tags
from sparsewatch.models._validation import (
    check_feature_count,
    check_keep_index,
    nonnegative_matrix,
    require_samples_and_features,
    tfidf_model_tags,
)
from sparsewatch.models.nnls import COLUMN_BLOCK, solve_nnls
from sparsewatch.models.projections import project_simplex, simplex_box_threshold

__all__ = ["DynamicNMF", "EmergingTopicEvent", "hp_smoother"]

EVOLVING, EMERGING = 0, 1


def _is_int(value: object) -> TypeGuard[numbers.Integral]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class EmergingTopicEvent:
    """One emerging topic at one time point.

    Its series run over the ``tau`` time points of the window, oldest first: ``volume`` is the
    raw volume ``S w`` (the documents' weights on the topic summed per time point, each
    document counted for those it stands for; non-negative), ``trend`` its Hodrick-Prescott
    smoothing ``F S w``, the series the hinge of problem (9) reads (it can be negative, and a
    story present only at the last time point shows in it as a rise over the whole window).
    ``rise`` is the raw volume's rise at this time point, ``volume[-1] - volume[-2]`` (the whole
    ``volume[-1]`` for a window of one time point): the event's score, how much more the topic
    holds now than a time point earlier. ``slope`` is the trend's last difference. ``strength``
    is ``volume[-1]``, ``n_documents`` the documents of the time point the topic dominates.
    """

    time_index: int
    topic_id: int
    top_terms: tuple[str, ...]
    top_term_indices: tuple[int, ...]
    top_weights: tuple[float, ...]
    trend: tuple[float, ...]
    slope: float
    strength: float
    n_documents: int
    volume: tuple[float, ...]
    rise: float

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-able dictionary."""
        return asdict(self)


def _as_documents(X: np.ndarray | sp.spmatrix) -> sp.csr_matrix:
    """``X`` as float64 CSR, checked by :func:`nonnegative_matrix`: only the first time point's
    NMF refused negative entries, a later one overflowed the solver after the window had been
    stored and counted; storing the window canonicalised the caller's matrix in place."""
    return nonnegative_matrix(X, "DynamicNMF", sparse=True)


# Nonzeros of the new documents whose fit is computed at once by _positive_residual (their
# rows of W and columns of H: 2 x 4,096 x K floats, 6.5 MB at K = 100 topics).
_RESIDUAL_BLOCK = 4096


def _positive_residual(X: sp.csr_matrix, W: np.ndarray, H: np.ndarray) -> sp.csr_matrix:
    """``max(X - W H, 0)`` as a CSR matrix on the nonzeros of ``X`` (``W H >= 0``, so it is 0
    elsewhere), without forming the dense ``W H`` (documents x terms)."""
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    fit = np.empty(X.nnz)
    for lo in range(0, X.nnz, _RESIDUAL_BLOCK):
        at = slice(lo, lo + _RESIDUAL_BLOCK)
        fit[at] = np.einsum("ij,ji->i", W[rows[at]], H[:, X.indices[at]])
    return sp.csr_matrix((np.maximum(X.data - fit, 0.0), X.indices, X.indptr), shape=X.shape)


def hp_smoother(n: int, lam: float) -> np.ndarray:
    """Hodrick-Prescott smoother ``F = (I + 2 lambda D2^T D2)^{-1}`` for ``n`` time points."""
    if n < 3:
        return np.eye(n)
    D2 = np.diff(np.eye(n), n=2, axis=0)
    return np.linalg.inv(np.eye(n) + 2.0 * lam * D2.T @ D2)


class DynamicNMF(TransformerMixin, BaseEstimator):
    """Saha-Sindhwani dynamic NMF: evolving topics in a delta box plus emerging topics.

    Parameters
    ----------
    n_initial_topics : topics of the plain NMF at the first time point.
    n_emerging : ``K_em``, emerging topics added per time point.
    window : ``omega``, time points of documents kept.
    delta : half-width of the box around the previous topic (constraint (4)); 0 freezes
        evolving topics.
    mu : weight of the hinge emergence regulariser.
    margin : rise per time point the hinge asks of an emerging topic's smoothed volume.
    hp_lambda : Hodrick-Prescott smoothing parameter.
    max_iter, tol : cyclic sweeps per time point and relative objective tolerance.
    pg_iter : projected-gradient steps per emerging ``w_i`` update.
    max_topics : cap on the number of topics kept.
    n_top_terms : terms reported per event (at most: only terms of positive weight).
    max_step_documents : most documents of one time point kept in the problem (module
        docstring); ``None``: all of them.
    seed_similarity : in ``(0, 1]``; a new document whose positive residual has at least this
        cosine with an emerging topic's seed already chosen at the time point seeds no other
        (module docstring, "Hot start"): one story, one emerging topic.
    random_state : seed of the first NMF and of the samples of large time points.

    Examples
    --------
    Three time points: sport and politics documents, then a burst on a new story.

    >>> import numpy as np
    >>> from sparsewatch.models.dynamic_nmf import DynamicNMF
    >>> vocabulary = ["goal", "match", "team", "vote", "poll", "party", "quake", "tsunami"]
    >>> stories = np.zeros((18, 8))  # three stories of 6 documents on their own terms
    >>> stories[:6, :3] = stories[6:12, 3:6] = stories[12:, 6:] = 1
    >>> rng = np.random.default_rng(0)
    >>> model = DynamicNMF(n_initial_topics=2, window=3)
    >>> for t in range(3):
    ...     rows = stories if t == 2 else stories[:12]  # the new story at the last time point
    ...     model = model.partial_fit(rng.random(rows.shape) * rows, vocabulary=vocabulary)
    >>> model.topic_ids_  # 2 initial topics, one emerging topic per later time point
    array([0, 1, 2, 3])
    >>> event = model.events_[0]
    >>> event.topic_id, event.top_terms[:2], event.n_documents
    (3, ('tsunami', 'quake'), 6)
    >>> model.labels_[-6:]  # the burst's documents are tagged with the emerging topic
    array([3, 3, 3, 3, 3, 3])
    """

    # learned state (partial_fit)
    n_features_in_: int
    components_: np.ndarray
    weights_: np.ndarray
    events_: list[EmergingTopicEvent]

    def __init__(
        self,
        n_initial_topics: int = 5,
        *,
        n_emerging: int = 1,
        window: int = 7,
        delta: float = 0.01,
        mu: float = 5.0,
        margin: float = 0.1,
        hp_lambda: float = 10.0,
        max_iter: int = 30,
        tol: float = 1e-4,
        pg_iter: int = 20,
        max_topics: int = 100,
        n_top_terms: int = 10,
        max_step_documents: int | None = 2000,
        seed_similarity: float = 0.3,
        random_state: int | None = 0,
    ) -> None:
        self.n_initial_topics = n_initial_topics
        self.n_emerging = n_emerging
        self.window = window
        self.delta = delta
        self.mu = mu
        self.margin = margin
        self.hp_lambda = hp_lambda
        self.max_iter = max_iter
        self.tol = tol
        self.pg_iter = pg_iter
        self.max_topics = max_topics
        self.n_top_terms = n_top_terms
        self.max_step_documents = max_step_documents
        self.seed_similarity = seed_similarity
        self.random_state = random_state

    def __sklearn_tags__(self) -> Tags:
        """Sparse input is accepted (kept CSR) and must be non-negative."""
        return tfidf_model_tags(super().__sklearn_tags__(), None)

    # ------------------------------------------------------------------ public API
    def fit(
        self, X: np.ndarray | sp.spmatrix, y: None = None, vocabulary: list[str] | None = None
    ) -> DynamicNMF:
        """Forget any state and learn ``X`` as the first time point of a new stream.

        The same as :meth:`partial_fit` on a fresh model: a plain NMF of ``n_initial_topics``
        topics refined by the cyclic updates, with ``labels_`` for the rows of ``X`` and no
        events (emerging topics need a previous time point). A stream is learned by
        :meth:`partial_fit`, one time point per call.

        ``ValueError`` before the state is forgotten for invalid ``X`` or ``vocabulary`` (as in
        :meth:`partial_fit`) and for ``X`` without documents or terms (a stream's
        :meth:`partial_fit` waits for data instead; ``fit`` would return a model without topics).
        ``X`` may have fewer terms than the forgotten state (the feature-count check of
        :meth:`partial_fit` ran before the state was forgotten and refused it).
        """
        X = _as_documents(X)
        require_samples_and_features(X, type(self).__name__)
        self._check_time_point(X, vocabulary, check_features=False)
        for name in (*self._state_names(), "labels_", "events_", "n_iter_"):
            if hasattr(self, name):
                delattr(self, name)
        return self.partial_fit(X, vocabulary=vocabulary)

    def partial_fit(
        self, X: np.ndarray | sp.spmatrix, y: None = None, vocabulary: list[str] | None = None
    ) -> DynamicNMF:
        """Process one time point: its documents ``X`` (documents x terms).

        Until a first time point with documents and terms arrives nothing is learned (labels
        -1, no events): with no terms (an empty vocabulary) there is nothing to factorise.

        Sets ``labels_`` (dominant topic id of every row of ``X``, as :meth:`predict` gives it after
        the time point; -1 for a row without weight, e.g. an empty document), ``events_`` (the
        emerging topics of this time point) and, once there are topics, ``n_iter_`` (cyclic sweeps
        run at the last solved time point; like ``labels_`` it is not part of :meth:`get_state`).
        ``vocabulary[j]`` names column ``j`` in the events. ``X`` with NaN or infinite entries
        raises ``ValueError`` before anything changes, and so do negative entries and a
        ``vocabulary`` that does not name every column (it raised ``IndexError`` after the time
        point had been learned).
        """
        X = _as_documents(X)
        self._check_time_point(X, vocabulary)
        if not hasattr(self, "components_") and 0 in X.shape:
            self.labels_, self.events_ = np.full(X.shape[0], -1, dtype=np.int64), []
            return self
        sample = self._sample(X.shape[0], getattr(self, "n_steps_", 0))
        weight = X.shape[0] / max(sample.size, 1)
        if not hasattr(self, "components_"):
            self._first_time_point(X[sample], weight)
        else:
            if X.shape[1] > self.n_features_in_:
                self.resize_features(X.shape[1])
            self._next_time_point(X[sample], weight)
        self.components_ = np.ascontiguousarray(self.components_)
        self.weights_ = np.ascontiguousarray(self.weights_)
        self._tag_and_emit(X, sample, vocabulary)
        return self

    def transform(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """Non-negative topic weights of ``X`` on the current topics (``n_samples x K``).

        A wider ``X`` (terms the vocabulary appended since) is read with zero weight on the new
        terms, without changing the model; a narrower one raises ``ValueError``."""
        self._check_fitted()
        X = _as_documents(X)
        H = self._pad_topics(X.shape[1])
        return solve_nnls(H.T, np.asarray(X @ H.T).T).T

    def predict(self, X: np.ndarray | sp.spmatrix) -> np.ndarray:
        """Dominant topic id of each row of ``X`` (-1 when no topic has weight)."""
        return self._dominant(self.transform(X))

    def _dominant(self, W: np.ndarray) -> np.ndarray:
        """Topic id of each row's largest weight, -1 for a row without weight."""
        if W.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        return np.where(W.max(axis=1) > 0, self.topic_ids_[W.argmax(axis=1)], -1)

    def resize_features(self, n_features: int, keep_index: np.ndarray | None = None) -> DynamicNMF:
        """Change the term dimension: old terms ``keep_index`` first, then new zero terms.

        Topics that lose mass are rescaled back onto the simplex; the stored window documents are
        re-indexed the same way (evicted terms dropped). Invalid ``keep_index`` or ``n_features``
        raise ``ValueError`` before anything changes
        (:func:`~sparsewatch.models._validation.check_keep_index`).
        """
        self._check_fitted()
        keep = check_keep_index(keep_index, self.n_features_in_, n_features)
        H = np.zeros((self.components_.shape[0], n_features))
        H[:, : keep.size] = self.components_[:, keep]
        sums = H.sum(axis=1, keepdims=True)
        self.components_ = np.where(sums > 0, H / np.where(sums > 0, sums, 1.0), 1.0 / n_features)
        X = self._window_matrix().tocsc()[:, keep]
        X = sp.hstack([X, sp.csr_matrix((X.shape[0], n_features - keep.size))]).tocsr()
        self._store_window(X)
        self.n_features_in_ = n_features
        return self

    def get_state(self) -> dict[str, np.ndarray]:
        """Learned state as plain numeric arrays (``np.savez``-able, ``allow_pickle=False``)."""
        self._check_fitted()
        return {name: np.asarray(getattr(self, name)).copy() for name in self._state_names()}

    def set_state(self, state: dict[str, np.ndarray]) -> DynamicNMF:
        """Restore :meth:`get_state` output on an instance built with the same parameters.

        ``ValueError``, with nothing restored, for a state with missing entries (a ``KeyError``
        left a mix of both states). A state saved before ``doc_weights_`` existed has every
        document weigh 1 (it kept every document)."""
        state = dict(state)
        if "doc_weights_" not in state and "doc_times_" in state:
            state["doc_weights_"] = np.ones(np.shape(state["doc_times_"]))
        missing = [name for name in self._state_names() if name not in state]
        if missing:
            raise ValueError(f"state is missing {missing}")
        for name in self._state_names():
            value = np.array(state[name])
            setattr(self, name, value if value.ndim else value.item())
        return self

    # ------------------------------------------------------------------ window bookkeeping
    def _check_time_point(
        self, X: sp.csr_matrix, vocabulary: list[str] | None, *, check_features: bool = True
    ) -> None:
        """``ValueError`` for a ``vocabulary`` that does not name every column, a
        ``max_step_documents`` below 1, or, once fitted and with ``check_features``, ``X`` with
        fewer terms than the model (a wider one appends terms; :meth:`fit` forgets the model)."""
        if vocabulary is not None and len(vocabulary) != X.shape[1]:
            raise ValueError(f"vocabulary has {len(vocabulary)} terms, X has {X.shape[1]} columns")
        cap = self.max_step_documents
        if cap is not None and cap < 1:
            raise ValueError(f"max_step_documents must be >= 1 or None, got {cap}")
        self._check_params()
        if check_features and hasattr(self, "components_"):
            check_feature_count(X.shape[1], self.n_features_in_, type(self).__name__)

    def _check_params(self) -> None:
        """``ValueError`` naming the parameter, before any state changes, for values that gave
        wrong results silently (``n_emerging=-1`` made 29 emerging topics, a negative
        ``n_top_terms`` reported terms from the end) or failed deep inside (``window=0``:
        IndexError; ``max_topics=0``: argmax of an empty sequence; ``delta<0``: empty set)."""
        at_least = {
            "n_initial_topics": 1,
            "n_emerging": 0,
            "window": 1,
            "max_iter": 1,
            "pg_iter": 1,
            "n_top_terms": 1,
            "max_topics": max(self.n_initial_topics, 1) if _is_int(self.n_initial_topics) else 1,
        }
        for name, low in at_least.items():
            value = getattr(self, name)
            if not _is_int(value) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.n_emerging >= self.max_topics:
            # (pruning keeps emerging topics first: every evolving one went at every time point,
            # and beyond max_topics emerging ones were dropped at birth, without an event)
            raise ValueError(
                f"n_emerging ({self.n_emerging}) must be below max_topics ({self.max_topics}): "
                "no topic would be tracked from one time point to the next"
            )
        for name in ("delta", "mu", "margin", "hp_lambda", "tol"):
            value = getattr(self, name)
            # (not value < inf: NaN fails it too)
            if not isinstance(value, numbers.Real) or value < 0 or not value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        value = self.seed_similarity
        if not isinstance(value, numbers.Real) or not 0 < value <= 1:
            raise ValueError(f"seed_similarity must be a number in (0, 1], got {value!r}")

    def _check_fitted(self) -> None:
        """``NotFittedError`` before the first :meth:`fit` or time point."""
        if not hasattr(self, "components_"):
            raise NotFittedError(
                "This DynamicNMF has no topics yet: call fit, or partial_fit with a first time "
                "point"
            )

    @staticmethod
    def _state_names() -> list[str]:
        return [
            "components_",
            "weights_",
            "topic_ids_",
            "topic_kinds_",
            "topic_births_",
            "doc_times_",
            "doc_weights_",
            "win_data_",
            "win_indices_",
            "win_indptr_",
            "n_steps_",
            "next_topic_id_",
            "n_features_in_",
        ]

    def _window_matrix(self) -> sp.csr_matrix:
        shape = (self.doc_times_.size, self.n_features_in_)
        return sp.csr_matrix((self.win_data_, self.win_indices_, self.win_indptr_), shape=shape)

    def _store_window(self, X: sp.csr_matrix) -> None:
        X = sp.csr_matrix(X)
        X.sort_indices()
        self.win_data_ = X.data.astype(np.float64)
        self.win_indices_ = X.indices.astype(np.int64)
        self.win_indptr_ = X.indptr.astype(np.int64)

    def _pad_topics(self, n_features: int) -> np.ndarray:
        H = self.components_
        check_feature_count(n_features, H.shape[1], type(self).__name__)
        return np.hstack([H, np.zeros((H.shape[0], n_features - H.shape[1]))])

    def _sample(self, n: int, t: int) -> np.ndarray:
        """The rows of time point ``t`` (of ``n`` documents) kept in the problem: all of them, or
        a sorted uniform sample of ``max_step_documents`` seeded by ``random_state`` and ``t``."""
        cap = self.max_step_documents
        if cap is None or n <= cap:
            return np.arange(n)
        # an int seeds the samples; None or a RandomState instance (whose seed cannot be read
        # back, and whose draws a checkpoint would not restore) sample with seed 0
        seed = int(self.random_state) if _is_int(self.random_state) else 0
        rng = np.random.default_rng([seed, t])
        return np.sort(rng.choice(n, cap, replace=False))

    # ------------------------------------------------------------------ time points
    def _warm_start(self, X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        """Weights and topics of a plain NMF of ``n_initial_topics`` (only a warm start: the
        cyclic updates refine it). NNDSVDa when the matrix has room for the topics, else a
        random start. NNDSVDa divides by the norm of a singular vector's negative part, 0 for
        some matrices of rank below ``k``: scikit-learn then returned NaN factors, with only a
        RuntimeWarning (1% of small sparse first windows, e.g. three documents of which two
        are empty), and the topics stayed NaN at every later time point. Such a start is
        replaced by the random one."""
        k = self.n_initial_topics
        for init in ("nndsvda", "random") if k <= min(X.shape) else ("random",):
            nmf = NMF(k, init=init, max_iter=200, random_state=self.random_state)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                warnings.simplefilter("ignore", RuntimeWarning)  # NaN: checked below
                W = nmf.fit_transform(X)
            if np.isfinite(W).all() and np.isfinite(nmf.components_).all():
                break
        return W, nmf.components_

    def _first_time_point(self, X: sp.csr_matrix, weight: float) -> None:
        k = self.n_initial_topics
        W, H = self._warm_start(X)
        scale = np.maximum(H.sum(axis=1), 1e-300)
        H = project_simplex(H / scale[:, None], axis=1)
        self.n_features_in_ = X.shape[1]
        self.components_ = H
        self.weights_ = W * scale[None, :]
        self.topic_ids_ = np.arange(k, dtype=np.int64)
        self.topic_kinds_ = np.full(k, EVOLVING, dtype=np.int64)
        self.topic_births_ = np.zeros(k, dtype=np.int64)
        self.doc_times_ = np.zeros(X.shape[0], dtype=np.int64)
        self.doc_weights_ = np.full(X.shape[0], weight)
        self.n_steps_ = 1
        self.next_topic_id_ = k
        self._store_window(X)
        lo, hi = np.zeros_like(H), np.ones_like(H)
        self._solve(X, lo, hi)

    def _next_time_point(self, X_new: sp.csr_matrix, weight: float) -> None:
        t = self.n_steps_
        keep = self.doc_times_ > t - self.window
        X = sp.vstack([self._window_matrix()[keep], X_new]).tocsr()
        self.doc_times_ = np.concatenate([self.doc_times_[keep], np.full(X_new.shape[0], t)])
        self.doc_weights_ = np.concatenate(
            [self.doc_weights_[keep], np.full(X_new.shape[0], weight)]
        )
        self._store_window(X)
        self.n_steps_ = t + 1
        self.topic_kinds_ = np.full(self.topic_ids_.size, EVOLVING, dtype=np.int64)
        H_prev = self.components_
        W_new = self.transform(X_new) if X_new.shape[0] else np.zeros((0, H_prev.shape[0]))
        H_em = self._emerging_init(X_new, W_new, H_prev)
        k_em = H_em.shape[0]
        self.components_ = np.vstack([H_prev, H_em])
        W_old = self.weights_[keep]
        self.weights_ = np.hstack([np.vstack([W_old, W_new]), np.zeros((X.shape[0], k_em))])
        self.topic_ids_ = np.concatenate(
            [self.topic_ids_, self.next_topic_id_ + np.arange(k_em, dtype=np.int64)]
        )
        self.topic_kinds_ = np.concatenate([self.topic_kinds_, np.full(k_em, EMERGING)])
        self.topic_births_ = np.concatenate([self.topic_births_, np.full(k_em, t)])
        self.next_topic_id_ += k_em
        lo = np.vstack([np.maximum(H_prev - self.delta, 0.0), np.zeros_like(H_em)])
        hi = np.vstack([np.minimum(H_prev + self.delta, 1.0), np.ones_like(H_em)])
        self._solve(X, lo, hi)
        self._prune()

    def _emerging_init(self, X_new: sp.csr_matrix, W_new: np.ndarray, H: np.ndarray) -> np.ndarray:
        """Seeds of at most ``n_emerging`` emerging topics: the positive residuals of new
        documents, the worst-fitted (largest ``||x - w H||^2``) first, skipping a document whose
        positive residual has cosine ``seed_similarity`` or more with a seed already chosen
        (module docstring, "Hot start").

        Only documents with a positive residual are seeds: an empty or fully explained one
        seeded a uniform topic, which split a story once the real ones ran out (with 3 emerging
        topics, two empty documents took 3 to 6 of a new story's 30 documents and halved its
        alert's rise); fewer emerging topics are added instead, none at a time point of empty
        documents only. Seeding from the ``n_emerging`` worst-fitted documents alone
        split one new story (its documents are all the worst fitted) into as many emerging
        topics, each with a share of its documents and a third of its alerts, and mixed two
        stories born together.
        """
        R = _positive_residual(X_new, W_new, H)
        norms = np.sqrt(np.asarray(R.multiply(R).sum(axis=1)).ravel())
        candidates = np.flatnonzero(norms > 0)  # x != 0 too: R <= x entrywise
        if min(self.n_emerging, candidates.size) == 0:
            return np.zeros((0, H.shape[1]))
        X_c, W_c = X_new[candidates], W_new[candidates]
        sq = np.asarray(X_c.multiply(X_c).sum(axis=1)).ravel()
        XH = np.asarray(X_c @ H.T)
        residual = sq - 2.0 * np.sum(W_c * XH, axis=1) + np.sum((W_c @ (H @ H.T)) * W_c, axis=1)
        U = sp.diags(1.0 / norms[candidates]) @ R[candidates]
        taken = np.zeros(candidates.size, dtype=bool)  # a residual like a chosen seed's
        seeds: list[int] = []
        for j in np.argsort(-residual, kind="stable").tolist():
            if taken[j]:
                continue
            seeds.append(int(candidates[j]))
            if len(seeds) == self.n_emerging:
                break
            taken |= np.asarray((U @ U[j].T).todense()).ravel() >= self.seed_similarity
        Hem = R[seeds].toarray()
        return Hem / Hem.sum(axis=1, keepdims=True)

    def _prune(self) -> None:
        """Drop the evolving topics of least weight in the window beyond ``max_topics``.

        A topic's weight counts each window document for the documents it stands for
        (``doc_weights_``, as in the volumes ``S w``): unweighted, a sampled time point's
        story counted as its sample only, and a topic of a few old documents outlived it."""
        excess = self.topic_ids_.size - self.max_topics
        if excess <= 0:
            return
        mass = self.doc_weights_ @ self.weights_
        mass = mass + np.where(self.topic_kinds_ == EMERGING, np.inf, 0.0)
        keep = np.sort(np.argsort(mass, kind="stable")[excess:])
        for name in ("topic_ids_", "topic_kinds_", "topic_births_"):
            setattr(self, name, getattr(self, name)[keep])
        self.components_ = self.components_[keep]
        self.weights_ = self.weights_[:, keep]

    # ------------------------------------------------------------------ the solver
    def _temporal_operator(self) -> np.ndarray:
        """``S`` (``tau x N``): which window time point each document belongs to, with the
        number of documents it stands for."""
        first = self.n_steps_ - min(self.window, self.n_steps_)
        tau = self.n_steps_ - first
        S = np.zeros((tau, self.doc_times_.size))
        S[self.doc_times_ - first, np.arange(self.doc_times_.size)] = self.doc_weights_
        return S

    def _hinge_parts(self) -> tuple[np.ndarray, np.ndarray]:
        """``M = D F S`` and the weights ``c`` of the hinge."""
        S = self._temporal_operator()
        tau = S.shape[0]
        M = np.diff(hp_smoother(tau, self.hp_lambda) @ S, axis=0)
        c = np.arange(1, tau, dtype=np.float64) / max(tau - 1, 1)
        return M, c

    def _hinge(self, w: np.ndarray, M: np.ndarray, c: np.ndarray) -> float:
        gap = np.maximum(self.margin - M @ w, 0.0)
        return float(np.sum(c * gap * gap))

    def _solve(self, X: sp.csr_matrix, lo: np.ndarray, hi: np.ndarray) -> None:
        """Rank-one cyclic updates until the objective settles (at most ``max_iter`` sweeps; the
        number run is ``n_iter_``)."""
        XT = X.T.tocsr()
        W, H = self.weights_, self.components_
        M, c = self._hinge_parts()
        row_mass = np.asarray(X.sum(axis=1)).ravel()
        empty = row_mass <= 0  # zero-mass documents: out of the problem
        W[empty] = 0.0
        dw = self.doc_weights_  # documents each row stands for (module docstring)
        sq = float(dw @ np.asarray(X.multiply(X).sum(axis=1)).ravel())
        n_docs = max(float(dw[~empty].sum()), 1.0)
        mass = max(float(dw @ row_mass) / n_docs, 1e-300)
        M = M / mass
        M[:, empty] = 0.0  # S w counts no empty document, so the hinge cannot move its weights
        mu = self.mu * sq / n_docs
        lip_hinge = 2.0 * mu * (float(np.linalg.norm(M, 2)) ** 2 if M.size else 0.0)
        emerging = self.topic_kinds_ == EMERGING
        boxed = np.any(lo > 0, axis=1) | np.any(hi < 1, axis=1)
        unchecked = boxed.copy()  # a box stays the same all along: tested when first used only
        previous = np.inf
        theta = np.full(H.shape[0], np.nan)  # box thresholds, hot starts for the next sweep
        # X h_i for every topic: topic i's step reads h_i before changing it, so the products
        # of the sweep's start serve the whole sweep, and the objective's after it the next one
        XH = np.asarray(X @ np.ascontiguousarray(H.T))  # 4x faster than X @ H.T: C-order
        sweeps = 0
        for _ in range(self.max_iter):
            sweeps += 1
            for i in range(H.shape[0]):
                h = H[i]
                hh = float(h @ h)
                Rh = XH[:, i] - W @ (H @ h) + W[:, i] * hh
                if emerging[i]:
                    W[:, i] = self._emerging_w(W[:, i], Rh, hh, M, c, mu, lip_hinge, dw)
                else:
                    W[:, i] = np.maximum(Rh, 0.0) / max(hh, 1e-300)
                w = W[:, i]
                cw = dw * w
                ww = float(w @ cw)
                if ww <= 0.0:
                    continue
                v = XT @ cw  # v = (X^T cw - H^T W^T cw + h ww) / ww, in place
                v -= H.T @ (W.T @ cw)
                v += h * ww
                v /= ww
                if boxed[i]:
                    t0 = None if np.isnan(theta[i]) else theta[i]
                    theta[i] = simplex_box_threshold(
                        v, lo[i], hi[i], theta0=t0, check=bool(unchecked[i])
                    )
                    unchecked[i] = False
                    v -= theta[i]  # H[i] = clip(v - theta, lo, hi), without np.clip's overhead
                    np.minimum(np.maximum(v, lo[i], out=v), hi[i], out=H[i])
                else:
                    H[i] = project_simplex(v)
            XH = np.asarray(X @ np.ascontiguousarray(H.T))
            value = self._objective(XH, sq, W, H, dw, emerging, M, c, mu)
            if previous - value <= self.tol * max(abs(value), 1e-300):
                break
            previous = value
        self.weights_, self.components_, self.n_iter_ = W, H, sweeps

    def _emerging_w(
        self,
        w: np.ndarray,
        Rh: np.ndarray,
        hh: float,
        M: np.ndarray,
        c: np.ndarray,
        mu: float,
        lip_hinge: float,
        dw: np.ndarray | None = None,
    ) -> np.ndarray:
        """Projected gradient on problem (9) for one emerging topic's document weights (each
        document's squared residual weighted by the documents it stands for, ``dw``: 1 if
        ``None``)."""
        dw = np.ones_like(w) if dw is None else dw
        top = float(dw.max(initial=1.0))
        step = 1.0 / (2.0 * hh * top + lip_hinge * float(c.max(initial=0.0)) + 1e-300)
        # w <- max(w - step grad, 0), grad = 2 dw (hh w - Rh) - 2 mu M^T (c max(margin - M w, 0)):
        # the operations of those expressions in their order (the same weights, bit for bit), into
        # two buffers instead of a temporary each; the caller's w (a column of W) is only read
        grad, out = np.empty(w.shape), np.empty(w.shape)
        two_dw, two_mu = 2.0 * dw, 2.0 * mu
        for _ in range(self.pg_iter):
            np.multiply(hh, w, out=grad)
            np.subtract(grad, Rh, out=grad)
            np.multiply(two_dw, grad, out=grad)
            if M.size:
                grad -= two_mu * (M.T @ (c * np.maximum(self.margin - M @ w, 0.0)))
            np.multiply(step, grad, out=grad)
            np.subtract(w, grad, out=out)
            w = np.maximum(out, 0.0, out=out)
        return w

    def _objective(
        self,
        XH: np.ndarray,
        sq: float,
        W: np.ndarray,
        H: np.ndarray,
        dw: np.ndarray,
        emerging: np.ndarray,
        M: np.ndarray,
        c: np.ndarray,
        mu: float,
    ) -> float:
        cW = dw[:, None] * W
        cross = float(np.sum(XH * cW))  # XH = X H^T
        value = sq - 2.0 * cross + float(np.sum((W.T @ cW) * (H @ H.T)))
        if M.size:
            value += mu * sum(self._hinge(W[:, i], M, c) for i in np.flatnonzero(emerging))
        return value

    # ------------------------------------------------------------------ outputs
    def _tag_and_emit(
        self, X: sp.csr_matrix, sample: np.ndarray, vocabulary: list[str] | None
    ) -> None:
        """Labels and events of the time point ``X``, of which rows ``sample`` were solved for.

        Every row is labelled as :meth:`predict` labels it: the dominant topic of its NNLS
        weights on the final topics (-1 for a row no topic explains), so ``labels_`` and
        ``n_documents`` reflect the documents' terms. The solver's weights of the solved rows
        carry the hinge of problem (9), which raises every document of the latest time point on
        an emerging topic alike: a document sharing no term with any topic had its only weight
        (about 3e-5) there and was labelled with it (and counted in its ``n_documents``) while
        :meth:`predict` gave -1. An event's strength is the sample's solver weight on its topic,
        each document counted for those it stands for (its volume at the time point)."""
        W_solved = self.weights_[self.weights_.shape[0] - sample.size :]
        strength = self.doc_weights_[self.doc_weights_.size - sample.size :] @ W_solved
        self.labels_ = np.full(X.shape[0], -1, dtype=np.int64)
        for lo in range(0, X.shape[0], COLUMN_BLOCK):  # the weights of a block at a time
            self.labels_[lo : lo + COLUMN_BLOCK] = self.predict(X[lo : lo + COLUMN_BLOCK])
        S = self._temporal_operator()
        F = hp_smoother(S.shape[0], self.hp_lambda)
        events = []
        for i in np.flatnonzero(self.topic_kinds_ == EMERGING):
            volume = S @ self.weights_[:, i]
            trend = F @ volume
            top = np.argsort(-self.components_[i], kind="stable")[: self.n_top_terms]
            top = top[self.components_[i, top] > 0]  # a sparse topic has fewer terms than that
            names = [vocabulary[j] if vocabulary is not None else str(j) for j in top]
            events.append(
                EmergingTopicEvent(
                    time_index=self.n_steps_ - 1,
                    topic_id=int(self.topic_ids_[i]),
                    top_terms=tuple(names),
                    top_term_indices=tuple(int(j) for j in top),
                    top_weights=tuple(float(x) for x in self.components_[i, top]),
                    trend=tuple(float(x) for x in trend),
                    slope=float(trend[-1] - trend[-2]) if trend.size > 1 else 0.0,
                    strength=float(strength[i]),
                    n_documents=int(np.sum(self.labels_ == self.topic_ids_[i])),
                    volume=tuple(float(x) for x in volume),
                    rise=float(volume[-1] - (volume[-2] if volume.size > 1 else 0.0)),
                )
            )
        self.events_ = events
