"""The detector's per-window computation: plain functions over one stream's models, no I/O.

For each closed window of a stream (Kasiviswanathan et al. 2012, Algorithm 3, one time step):

1. :class:`~sparsewatch.models.window_detector.Detector`: streaming TF-IDF, l1 sparse-coding novelty
   scores (Algorithm 5), novel flags (threshold or top-q), one OIADMM dictionary update
   (Algorithm 2);
2. MOR-NMF (Guan et al. 2012, Algorithm 3) on the window's TF-IDF rows: topic tracking and each
   document's dominant topic;
3. dynamic NMF (Saha and Sindhwani): emerging-topic events.

:func:`process_window` returns every row the store needs and every message for ``<prefix>.scores``
as plain data, the per-document results as columns (a window may hold a day of tweets):
:class:`~sparsewatch.storage.document_columns.DocumentColumns` for the ``documents`` table and
:class:`~sparsewatch.consumers.score_messages.ScoreMessages`, which the writer encodes as it
sends them. The worker only writes and sends them. The same function drives the offline
equivalence test of the pipeline.

Example: two count windows of a synthetic stream through the core, no broker or database (the
first window warms the models up; the second is scored, flagged, learnt from):

>>> from sparsewatch.config import DetectorConfig
>>> from sparsewatch.consumers.messages import Document
>>> from sparsewatch.consumers.windowing import Buffered, ClosedWindow
>>> from sparsewatch.consumers.timestamps import parse_timestamp_ms
>>> from sparsewatch.replay.synthetic import generate_stream
>>> config = DetectorConfig(warmup_documents=200, initial_atoms=20)
>>> models = build_models(config)
>>> def window(seq, docs):
...     items = [Buffered(Document(d["id"], d["text"], parse_timestamp_ms(d["timestamp"])), 0, i)
...              for i, d in enumerate(docs)]
...     times = [b.doc.timestamp_ms for b in items]
...     return ClosedWindow("default", seq, min(times), max(times) + 1, items, "count")
>>> docs = generate_stream(n_docs=600, seed=0)
>>> warm_up = process_window(models, window(0, docs[:300]), config)
>>> result = process_window(models, window(1, docs[300:]), config)
>>> len(result.documents), int(result.documents.novel.sum())  # top 5% flagged
(300, 15)
>>> sorted({alert["kind"] for alert in result.alerts})  # a story born in window 1 emerges
['emerging_topic', 'novel_document']
>>> len(result.messages)  # one message per document for <prefix>.scores, encoded when sent
300
>>> key, value = next(iter(result.messages))
>>> key  # the stream id
'default'
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sparsewatch.consumers.score_messages import ScoreMessages
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.models.dynamic_nmf import DynamicNMF
from sparsewatch.models.nmf_online import MORNMF
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.stories import similar_groups
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import (
    DEFAULT_FEATURES,
    Detector,
    WindowResult,
    pack_texts,
    unpack_texts,
)
from sparsewatch.storage.document_columns import DocumentColumns

from sparsewatch.config import DetectorConfig

SUMMARY_CHARS = 120

log = logging.getLogger(__name__)


@dataclass
class StreamModels:
    """The models of one stream. ``windows_done`` counts processed windows (empty ones too).

    Topic ids: MOR-NMF's topic ``t`` is ``topics_id_base + t`` (``0 .. n_topics - 1`` until
    ``n_topics`` changes); the dynamic NMF's topic ``i`` is ``emerging_id_base + i``;
    ``next_topic_id`` is the smallest id this stream has not used. A topic model started afresh
    over earlier topics (``n_topics`` changed; the dynamic NMF also when enabled again) is based
    there, so an id never names two topics of one stream.

    ``emerging_seq`` is the window number (``seq``) of the dynamic NMF's last time point (-1:
    none yet, or a checkpoint from before it was kept): the windows numbered between it and the
    next window's are empty time points (:func:`_empty_time_points`).
    """

    detector: Detector
    topics: MORNMF | None
    emerging: DynamicNMF | None
    n_topics: int
    windows_done: int = 0
    topics_id_base: int = 0
    emerging_id_base: int = -1  # -1: after the MOR-NMF's ids
    next_topic_id: int = 0
    # emerging topics announced lately: topic id -> (window, {term: weight}) of their alert (the
    # dynamic NMF may drop a topic while its story goes on: see :func:`_repeats_an_alert`)
    announced: dict[int, tuple[int, dict[str, float]]] = field(default_factory=dict)
    emerging_seq: int = -1

    def __post_init__(self) -> None:
        if self.emerging_id_base < 0:
            self.emerging_id_base = self.topics_id_base + self.n_topics
        self.next_topic_id = max(self.next_topic_id, self.topics_id_base + self.n_topics)

    def get_state(self) -> dict[str, np.ndarray]:
        """All model state, prefixed per model (npz-safe)."""
        state = {f"detector.{k}": v for k, v in self.detector.get_state().items()}
        for name, model in (("topics", self.topics), ("emerging", self.emerging)):
            if model is not None and hasattr(model, "components_"):
                state.update({f"{name}.{k}": v for k, v in model.get_state().items()})
        state["windows_done"] = np.asarray(self.windows_done, np.int64)
        state["n_topics"] = np.asarray(self.n_topics, np.int64)
        state["topics_id_base"] = np.asarray(self.topics_id_base, np.int64)
        state["emerging_id_base"] = np.asarray(self.emerging_id_base, np.int64)
        state["next_topic_id"] = np.asarray(self.next_topic_id, np.int64)
        state["emerging_seq"] = np.asarray(self.emerging_seq, np.int64)
        state.update(_announced_state(self.announced))
        return state

    def set_state(self, state: dict[str, np.ndarray]) -> StreamModels:
        """Restore :meth:`get_state`. A topic model the checkpoint has no state for starts
        afresh (as it was when the checkpoint was taken), and so do both topic models when the
        checkpoint was taken with another ``n_topics`` (the configuration changed: its MOR-NMF
        had the old rank), with a warning; a topic model started afresh over earlier topics
        gets ids no earlier topic of the stream had. Checkpoints from before topic ids were
        kept: the ids as the configuration gives them, as then. A checkpoint from before
        ``emerging_seq`` was kept fills no gap before the next window."""

        def part(prefix: str) -> dict[str, np.ndarray]:
            return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}

        self.detector.set_state(part("detector."))
        self.windows_done = int(state["windows_done"])
        saved_n_topics = int(state.get("n_topics", self.n_topics))
        changed = saved_n_topics != self.n_topics
        had_topics = any(k.startswith(("topics.", "emerging.")) for k in state)
        if changed and had_topics and (self.topics is not None or self.emerging is not None):
            log.warning(
                "the checkpoint's topic models have %d topics, the configuration %d: they "
                "start afresh",
                saved_n_topics,
                self.n_topics,
            )
        base = int(state.get("emerging_id_base", self.n_topics))
        next_id = int(state.get("next_topic_id", self.n_topics))
        emerging_state = part("emerging.")
        if "next_topic_id" not in state and "next_topic_id_" in emerging_state:
            next_id = base + int(emerging_state["next_topic_id_"])  # (an older checkpoint)
        self.topics_id_base = int(state.get("topics_id_base", 0))
        if changed:  # the MOR-NMF's ids: from the stream's first unused one
            self.topics_id_base = max(next_id, saved_n_topics, self.topics_id_base)
        self.next_topic_id = max(next_id, self.topics_id_base + self.n_topics)
        self.announced = _announced_from(state)
        self.emerging_seq = int(state.get("emerging_seq", -1))
        if self.topics is not None:
            sub = part("topics.")
            self.topics = self.topics.set_state(sub) if sub and not changed else clone(self.topics)
        if self.emerging is not None:
            if emerging_state and not changed:
                self.emerging = self.emerging.set_state(emerging_state)
                self.emerging_id_base = base
            else:
                self.emerging = clone(self.emerging)
                self.emerging_id_base = self.next_topic_id
        return self


def build_models(config: DetectorConfig) -> StreamModels:
    """Fresh models for a new stream, from the detector configuration."""
    growth: dict[str, Any] = {"max_components": config.max_atoms}
    if config.new_atoms_per_window > 0:
        growth["grow_size"] = config.new_atoms_per_window
    else:
        growth["grow_threshold"] = None
    model = OnlineL1NoveltyDetector(
        n_components=min(config.initial_atoms, config.max_atoms),
        flag=config.novel_mode,
        top_q=config.novel_top_q,
        threshold=config.novel_threshold,
        score_margin=config.score_margin,
        max_step_documents=config.max_step_documents or None,
        **growth,
    )
    feature_params: dict[str, Any] = {
        **DEFAULT_FEATURES,
        "max_features": config.max_vocabulary,
        "max_token_chars": config.max_token_chars,
        "unsegmented": config.unsegmented,
        "max_terms_per_doc": config.max_terms_per_doc or None,
    }
    features = StreamingTfidf(**feature_params)
    detector = Detector(
        features=features,
        model=model,
        warmup_docs=config.warmup_documents,
        n_novel_terms=config.top_terms,
    )
    topics = MORNMF(n_components=config.n_topics, random_state=0) if config.topics else None
    emerging = (
        DynamicNMF(
            n_initial_topics=config.n_topics,
            n_emerging=config.emerging_per_window,
            n_top_terms=config.top_terms,
            max_topics=config.max_topics,
            max_step_documents=config.emerging_max_documents or None,
            random_state=0,
        )
        if config.emerging_topics
        else None
    )
    return StreamModels(detector, topics, emerging, n_topics=config.n_topics)


@dataclass
class WindowComputation:
    """Everything one window produces, as plain rows and messages."""

    window: dict[str, Any]
    documents: DocumentColumns
    alerts: list[dict[str, Any]]
    topics: list[dict[str, Any]]
    messages: ScoreMessages | None
    snapshot: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _sparse_dictionary(A: Any) -> dict[str, np.ndarray]:
    """The dictionary (terms x atoms; atoms keep a few terms) as CSC arrays, npz-safe: a dense
    snapshot of 1,500 atoms over 20,000 terms would be 120 MB, its nonzeros are kilobytes."""
    csc = sp.csc_matrix(A)
    return {
        "dictionary_data": csc.data,
        "dictionary_indices": csc.indices,
        "dictionary_indptr": csc.indptr,
        "dictionary_shape": np.asarray(csc.shape, dtype=np.int64),
    }


def _volume(values: tuple[float, ...]) -> str:
    """An emerging topic's raw volume over the dynamic NMF's window, oldest first
    (``0.5 1.21 3.4``)."""
    return " ".join(f"{v:.3g}" for v in values)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _summary(text: str | None) -> str:
    """An alert's summary of a document's text (empty for a row stored without its text)."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= SUMMARY_CHARS else flat[: SUMMARY_CHARS - 1] + "…"


def _document_rows(
    stream: str,
    seq: int,
    items: list[Buffered],
    result: WindowResult,
    topics: np.ndarray,
    emerging: np.ndarray,
    late: bool,
) -> DocumentColumns:
    n = len(items)
    top = np.asarray(result.top_atoms, dtype=np.int64).reshape(n, -1) if n else np.zeros((0, 0))
    kept = top >= 0
    return DocumentColumns(
        stream=[stream] * n,
        doc_id=[b.doc.id for b in items],
        event_time=[b.doc.event_time for b in items],
        window_seq=np.full(n, seq, dtype=np.int64),
        novelty_score=_nan_unless_finite(result.scores),
        reconstruction_error=_nan_unless_finite(result.reconstruction_errors),
        novel=np.asarray(result.novel, dtype=bool),
        late=np.full(n, late),
        dominant_topic=np.where(topics >= 0, topics, -1).astype(np.int64),
        emerging_topic=np.where(emerging >= 0, emerging, -1).astype(np.int64),
        top_atoms_indptr=np.r_[0, np.cumsum(kept.sum(axis=1))].astype(np.int64),
        top_atoms=top[kept].astype(np.int64),
        labels=[b.doc.labels for b in items],
        text=[b.doc.text for b in items],
    )


# Most ids of a story's other documents its alert lists (``related_ids``; ``n_documents`` counts
# them all).
RELATED_IDS = 100


def novel_alerts(
    docs: DocumentColumns,
    terms: Mapping[int, list[tuple[str, float]]] | None = None,
    features: sp.spmatrix | None = None,
    min_similarity: float = 0.0,
) -> list[dict[str, Any]]:
    """The ``novel_document`` alerts of the documents of ``docs`` flagged novel, late ones
    included (window ``window_seq`` of the row: a late document's own window by its event time):
    one per story, the novel documents whose ``features`` (terms x documents, the columns of
    ``docs``) are alike (:func:`~sparsewatch.models.stories.similar_groups` at
    ``min_similarity``; 0 or no features: one per document). A story's alert is its document of
    highest score (ties: the earlier row), with its unexplained terms (``terms``, by row:
    :attr:`WindowResult.novel_terms`) as ``[term, mass]`` pairs, the story's document count
    and the other documents' ids by event time (at most :data:`RELATED_IDS`)."""
    terms = terms or {}
    alerts = []
    for i, rows in _stories(docs, features, min_similarity):
        alerts.append(
            {
                "kind": "novel_document",
                "stream": docs.stream[i],
                "subject_id": docs.doc_id[i],
                "score": _finite(docs.novelty_score[i]),
                "window_seq": int(docs.window_seq[i]),
                "event_time": docs.event_time[i],
                "summary": _summary(docs.text[i]),
                "terms": [[t, w] for t, w in terms.get(i, ())],
                "n_documents": len(rows),
                "related_ids": [docs.doc_id[j] for j in rows if j != i][:RELATED_IDS],
            }
        )
    return alerts


def _stories(
    docs: DocumentColumns, features: sp.spmatrix | None, min_similarity: float
) -> list[tuple[int, list[int]]]:
    """The stories of :func:`novel_alerts`, in the order of their leads: (lead row, the story's
    rows by event time, then row)."""
    novel = np.flatnonzero(docs.novel)
    if novel.size == 0:
        return []
    if features is not None and min_similarity > 0 and novel.size > 1:
        groups = similar_groups(sp.csc_matrix(features)[:, novel], min_similarity)
    else:
        groups = np.arange(novel.size)
    scores = np.nan_to_num(np.asarray(docs.novelty_score, np.float64)[novel], nan=-np.inf)
    times = np.array([docs.event_time[i].timestamp() for i in novel.tolist()], dtype=np.float64)
    by_story = np.lexsort((novel, times, groups))
    stories = []
    for members in np.split(by_story, np.flatnonzero(np.diff(groups[by_story])) + 1):
        lead = int(novel[members[np.lexsort((novel[members], -scores[members]))[0]]])
        stories.append((lead, novel[members].tolist()))
    return sorted(stories)


def _nan_unless_finite(values: np.ndarray) -> np.ndarray:
    """``values`` as float64, NaN (stored as NULL) where they are not finite."""
    out = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(out), out, np.nan)


def _score_messages(
    stream: str, seq: int, items: list[Buffered], result: WindowResult, doc_ids: Sequence[str]
) -> ScoreMessages:
    """Per-document results for the anomaly worker (encoded as the writer sends them); ``doc_ids``
    are the items' ids (the document rows' list, shared)."""
    return ScoreMessages(
        stream,
        seq,
        doc_ids,
        np.array([b.doc.timestamp_ms for b in items], dtype=np.int64),
        result.scores,
        result.reconstruction_errors,
        result.novel,
        result.codes.tocsr(),
        np.array([len(b.doc.text.split()) for b in items], dtype=np.int64),
    )


def _fits(model: object, n_documents: int, rank: int) -> bool:
    """Whether a topic model takes a window of ``n_documents``: its first fit needs at least
    ``rank`` of them (its initial NMF); once fitted, every window with a document does, so a
    small window still gets its documents' topics and is a time point of the dynamic NMF."""
    return n_documents >= (1 if hasattr(model, "components_") else rank)


def _empty_time_points(models: StreamModels, seq: int, n_features: int) -> None:
    """Give the dynamic NMF an empty time point (no documents) for each window numbered between
    its last time point's (:attr:`StreamModels.emerging_seq`) and ``seq``, at most ``omega``
    (its ``window``: so many empty time points leave none of its documents in the window, and
    a longer gap would cost time for nothing).

    A duration window opens only when a document arrives, and a window without documents is no
    time point of the dynamic NMF (:func:`_fits`): hourly windows at hours 0, 1, 2 and 9 reached
    it as four consecutive time points, so the documents of hour 0 stayed in its omega = 7
    window at hour 9 and the volumes (problem (9)'s ``S w``) had no silent hours. Count windows
    are numbered consecutively: no gap. Window numbers that go down (``windows.size`` changed)
    fill nothing."""
    model = models.emerging
    if model is None or not hasattr(model, "components_") or models.emerging_seq < 0:
        return
    empty = sp.csr_matrix((0, n_features))
    for _ in range(min(seq - models.emerging_seq - 1, model.window)):
        model.partial_fit(empty)


def _update_topics(
    models: StreamModels,
    result: WindowResult,
    config: DetectorConfig,
    window: ClosedWindow,
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]], list[dict[str, Any]]]:
    """MOR-NMF and dynamic NMF on the window: each document's dominant MOR-NMF topic and its
    announced emerging topic (-1: none), the topic rows, the emerging-topic alerts. An alert's
    event time is the newest of the documents its topic dominates (the window's newest when it
    dominates none): a time inside the window, so that ``alerts --by event`` over the window's
    range finds it (the window's end, the first instant after it, put it in the next range).
    Its score is its event's ``rise`` and its summary lists the event's raw ``volume`` (the
    smoothed ``trend``, not the volume, rose over the whole window for a story only in the
    last one: :class:`~sparsewatch.models.dynamic_nmf.EmergingTopicEvent`)."""
    stream, seq = window.stream, window.seq
    times_ms = np.fromiter((b.doc.timestamp_ms for b in window.items), np.int64, len(window.items))
    assert result.features is not None, "a fitted detector's result holds its features"
    n = len(result.scores)
    features = models.detector.features
    X = sp.csr_matrix(result.features.T)  # documents x terms, as the detector saw them
    terms = features.terms_
    n_features = X.shape[1]
    dominant = np.full(n, -1)
    emerging = np.full(n, -1)
    rows: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    for model in (models.topics, models.emerging):
        if model is not None and hasattr(model, "components_"):
            model.resize_features(n_features, keep_index=features.kept_rows_)
    if models.topics is not None and _fits(models.topics, X.shape[0], models.topics.n_components):
        models.topics.partial_fit(X)
        H = models.topics.transform(X)
        if reseed_topics(models.topics, X, H, config.topic_reseeds_per_window):
            H = models.topics.transform(X)
        dominant = np.where(H.max(axis=1) > 0, models.topics_id_base + H.argmax(axis=1), -1)
        strength = H.sum(axis=0) / max(H.sum(), 1e-12)
        for t, w in enumerate(models.topics.components_):
            idx = np.argsort(-w, kind="stable")[: config.top_terms]
            rows.append(
                {
                    "stream": stream,
                    "window_seq": seq,
                    "topic_id": models.topics_id_base + t,
                    "terms": [[str(terms[j]), float(w[j])] for j in idx if w[j] > 0],
                    "strength": float(strength[t]),
                    "emerging": False,
                }
            )
    if models.emerging is not None and _fits(
        models.emerging, X.shape[0], models.emerging.n_initial_topics
    ):
        _empty_time_points(models, seq, n_features)
        models.emerging.partial_fit(X, vocabulary=[str(t) for t in terms])
        models.emerging_seq = seq
        models.next_topic_id = max(
            models.next_topic_id, models.emerging_id_base + models.emerging.next_topic_id_
        )
        for event in models.emerging.events_:
            if event.n_documents < config.emerging_min_documents or event.rise <= 0:
                continue  # not news yet: dominating no document, or its volume not rising
            topic_id = models.emerging_id_base + int(event.topic_id)
            emerging[models.emerging.labels_ == event.topic_id] = topic_id
            named = dict(zip(event.top_terms, event.top_weights, strict=True))
            repeat = _repeats_an_alert(models.announced, named, seq, config.emerging_repeat_windows)
            rows.append(
                {
                    "stream": stream,
                    "window_seq": seq,
                    "topic_id": topic_id,
                    "terms": [[t, float(w)] for t, w in named.items()],
                    # the share of the window's documents it dominates: on the scale of a
                    # MOR-NMF topic's share (its event's strength is a weighted volume)
                    "strength": event.n_documents / max(n, 1),
                    "emerging": True,
                }
            )
            if repeat is not None:
                continue  # the story of an alert raised lately: its documents carry this id
            models.announced[topic_id] = (seq, named)
            alerts.append(
                {
                    "kind": "emerging_topic",
                    "stream": stream,
                    "subject_id": f"topic-{topic_id}",
                    "score": float(event.rise),
                    "window_seq": seq,
                    "event_time": _newest(times_ms[emerging == topic_id], times_ms),
                    # its terms first: what the topic is about survives a cut summary
                    "summary": f"emerging topic: {', '.join(event.top_terms)} "
                    f"({event.n_documents} docs, rise {event.rise:.3g}, "
                    f"volume {_volume(event.volume)})",
                    "terms": [[t, float(w)] for t, w in named.items()],
                    "n_documents": int(event.n_documents),
                }
            )
    return dominant, emerging, rows, alerts


def _newest(times_ms: np.ndarray, otherwise_ms: np.ndarray) -> datetime:
    """The newest of ``times_ms`` (of ``otherwise_ms`` when empty) as a UTC datetime."""
    newest = int((times_ms if times_ms.size else otherwise_ms).max())
    return datetime.fromtimestamp(newest / 1000, tz=UTC)


# A MOR-NMF topic used this little (share of the window's topic weight, relative to 1 / r), or
# this close to a more used one (cosine of the bases), is re-seeded; from documents the bases
# explain worst, at least RESEED_MIN_DOCUMENTS of one story (cosine to the worst one).
RESEED_USAGE = 0.5
RESEED_DUPLICATE = 0.8
RESEED_STORY = 0.3
RESEED_MIN_DOCUMENTS = 3
RESEED_RESIDUAL = 0.5  # documents the bases leave at least half of (squared norm) unexplained
RESEED_KNOWN = 0.5  # a story whose mean has this cosine with a topic is that topic's
# At most this many of the worst-explained tenth take part (evenly spaced ranks, the worst first):
# the story search compares every pair of them, so a window of n documents otherwise costs
# (n / 10)^2 in time and memory (a window of 40,000 tweets peaked at 164 MB here, one of a million
# would need 80 GB); the tenth of any window up to 20,000 documents is used whole.
RESEED_POOL_MAX = 2000


def reseed_topics(model: MORNMF, X: sp.csr_matrix, H: np.ndarray, max_new: int) -> list[int]:
    """Re-seed up to ``max_new`` of ``model``'s topics that the window ``X`` (codes ``H``)
    barely uses or that duplicate another, from the window's worst-explained story; the
    topics replaced (:meth:`~sparsewatch.models.nmf_online.ORNMF.replace_components`).

    MOR-NMF's averaged steps keep the topics of the warm-up: on the synthetic stream of
    ``benchmarks/emerging_topics.py`` the share of documents whose dominant topic named their
    own story fell from 0.43 to 0.16 over the stream, and no topic named the stories born late
    (``benchmarks/topics.md``, section 4). A story counts when at least
    :data:`RESEED_MIN_DOCUMENTS` of the worst-explained tenth of the documents (at most
    :data:`RESEED_POOL_MAX` of them) are close to its worst-explained one; its topic starts as
    their mean and learns from the next windows.
    """
    if max_new < 1:
        return []
    W = model.components_
    r = W.shape[0]
    usage = H.sum(axis=0) / max(float(H.sum()), 1e-300)
    unit = W / np.maximum(np.linalg.norm(W, axis=1, keepdims=True), 1e-300)
    cosine = unit @ unit.T
    np.fill_diagonal(cosine, 0.0)
    # topic i duplicates topic j when j is used more, or as much with a lower index (each of two
    # topics used alike was the other's duplicate: both re-seeded, their story lost its topic)
    index = np.arange(r)
    more_used = (usage[None, :] > usage[:, None]) | (
        (usage[None, :] == usage[:, None]) & (index[None, :] < index[:, None])
    )
    duplicate = np.flatnonzero(((cosine >= RESEED_DUPLICATE) & more_used).any(axis=1)).tolist()
    candidates = sorted(
        set(duplicate) | set(np.flatnonzero(usage < RESEED_USAGE / r).tolist()),
        key=lambda i: usage[i],
    )
    replaced: list[int] = []
    Xd = X.tocsr()
    norms = np.asarray(Xd.multiply(Xd).sum(axis=1)).ravel()
    # ||x - h W||^2 without forming h W (documents x terms): ||x||^2 - 2 x.(h W) + h (W W^T) h
    residual = norms - 2.0 * ((Xd @ W.T) * H).sum(axis=1) + ((H @ (W @ W.T)) * H).sum(axis=1)
    share = np.where(norms > 0, residual / np.maximum(norms, 1e-300), -np.inf)
    pool = np.argsort(-share, kind="stable")[: max(RESEED_MIN_DOCUMENTS, X.shape[0] // 10)]
    pool = pool[share[pool] >= RESEED_RESIDUAL]
    if pool.size > RESEED_POOL_MAX:
        pool = pool[np.linspace(0, pool.size - 1, RESEED_POOL_MAX).round().astype(np.int64)]
    unit_rows = sp.diags(1.0 / np.sqrt(norms[pool])) @ Xd[pool]
    close = np.zeros((pool.size, pool.size), dtype=bool)
    for lo in range(0, pool.size, 256):  # the products a block of rows at a time
        close[lo : lo + 256] = (unit_rows[lo : lo + 256] @ unit_rows.T).toarray() >= RESEED_STORY
    free = np.ones(pool.size, dtype=bool)
    topics = iter(candidates[:max_new])
    for i in range(pool.size):  # the worst-explained first
        story = close[i] & free
        if not free[i] or story.sum() < RESEED_MIN_DOCUMENTS:
            continue  # a document without a story of its own: the next worst
        free &= ~story
        seed = np.asarray(Xd[pool[story]].mean(axis=0)).ravel()
        if float((unit @ seed).max()) >= RESEED_KNOWN * float(np.linalg.norm(seed)):
            continue  # a story a topic has (its documents only partly explained): not new
        topic = next(topics, None)
        if topic is None:
            break
        model.replace_components([topic], seed[None, :])
        unit[topic] = seed / float(np.linalg.norm(seed))
        replaced.append(topic)
    return replaced


# An emerging topic this close (cosine of the term distributions) to one announced lately is the
# same story again: on the synthetic stream of benchmarks/emerging_topics.py, 4 of the 11 alerts
# that named an already announced story, and no new story caught (topics.md).
REPEAT_COSINE = 0.5
ANNOUNCED_KEPT = 64


def _repeats_an_alert(
    announced: dict[int, tuple[int, dict[str, float]]],
    terms: dict[str, float],
    seq: int,
    windows: int,
) -> int | None:
    """The id of an emerging topic announced in this window or the ``windows`` before it
    whose alert's terms those of a new one, ``terms``, repeat (cosine of the top-term weights
    at least :data:`REPEAT_COSINE`), or None (always, with ``windows = 0``). Older announcements
    are forgotten, and so are those of windows numbered after ``seq``: window numbers go down
    when ``windows.size`` changes (they count sizes since the epoch), and such an announcement,
    of a window long past, never grew old enough to be forgotten."""
    for pid in [pid for pid, (window, _) in announced.items() if not 0 <= seq - window <= windows]:
        del announced[pid]
    if windows == 0:
        announced.clear()
        return None
    while len(announced) >= ANNOUNCED_KEPT:
        del announced[next(iter(announced))]
    norm = math.sqrt(sum(w * w for w in terms.values()))
    for pid, (_, other) in announced.items():
        dot = sum(w * other.get(t, 0.0) for t, w in terms.items())
        other_norm = math.sqrt(sum(w * w for w in other.values()))
        if dot >= REPEAT_COSINE * norm * other_norm > 0:
            return pid
    return None


def _announced_state(announced: dict[int, tuple[int, dict[str, float]]]) -> dict[str, np.ndarray]:
    """:attr:`StreamModels.announced` as npz-safe arrays (terms packed by :func:`pack_texts`)."""
    utf8, offsets = pack_texts([t for _, named in announced.values() for t in named])
    return {
        "announced_ids": np.fromiter(announced, np.int64, len(announced)),
        "announced_windows": np.asarray([w for w, _ in announced.values()], np.int64),
        "announced_n_terms": np.asarray([len(n) for _, n in announced.values()], np.int64),
        "announced_terms_utf8": utf8,
        "announced_terms_offsets": offsets,
        "announced_weights": np.asarray(
            [w for _, named in announced.values() for w in named.values()], np.float64
        ),
    }


def _announced_from(state: dict[str, np.ndarray]) -> dict[int, tuple[int, dict[str, float]]]:
    """The inverse of :func:`_announced_state` (nothing from a checkpoint without it)."""
    if "announced_ids" not in state:
        return {}
    terms = unpack_texts(state["announced_terms_utf8"], state["announced_terms_offsets"])
    weights = np.asarray(state["announced_weights"], np.float64).tolist()
    out: dict[int, tuple[int, dict[str, float]]] = {}
    at = 0
    for pid, window, n in zip(
        np.asarray(state["announced_ids"]).tolist(),
        np.asarray(state["announced_windows"]).tolist(),
        np.asarray(state["announced_n_terms"]).tolist(),
        strict=True,
    ):
        out[pid] = (window, dict(zip(terms[at : at + n], weights[at : at + n], strict=True)))
        at += n
    return out


def _in_canonical_order(items: Sequence[Buffered]) -> list[Buffered]:
    """``items`` in the order the models see a window's documents: by event time, then by
    document id (Python's string order), stable.

    The models' results depend on the order of their rows: the novelty warm-up starts from the
    documents it picks by position, ties in picking the documents of new atoms go to the earlier
    row, and the topic models' initial fit depends on the row order. In arrival order, a window's
    documents read in another order (two partitions, a producer's retries, a replay) were flagged
    and given topics otherwise, in that window and the next ones. Ids are compared only among
    documents of equal event time (as objects: a fixed-width array of ids up to
    ``MAX_ID_CHARS`` long would take 2 KB a document)."""
    n = len(items)
    times = np.fromiter((b.doc.timestamp_ms for b in items), np.int64, n)
    order = np.argsort(times, kind="stable")
    ordered = times[order]
    same = ordered[1:] == ordered[:-1]
    tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same])
    if tied.size:  # each run of equal times keeps its places, sorted by id within
        at = order[tied]
        ids = np.array([items[i].doc.id for i in at.tolist()], dtype=object)
        order[tied] = at[np.lexsort((ids, ordered[tied]))]
    return [items[i] for i in order.tolist()]


def process_window(
    models: StreamModels, window: ClosedWindow, config: DetectorConfig
) -> WindowComputation:
    """Score, flag and learn from one closed window of one stream (see the module docstring).
    The models see the window's documents in :func:`_in_canonical_order`, and so do its results
    (rows, messages, alerts): the same documents give the same results whatever order they
    arrived in."""
    t0 = time.perf_counter()
    window = replace(window, items=_in_canonical_order(window.items))
    texts = [b.doc.text for b in window.items]
    result = models.detector.process_window(texts)
    t1 = time.perf_counter()
    dominant, emerging = np.full(len(texts), -1), np.full(len(texts), -1)
    topic_rows: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    if models.detector.fitted:
        dominant, emerging, topic_rows, alerts = _update_topics(models, result, config, window)
    t2 = time.perf_counter()
    docs = _document_rows(
        window.stream, window.seq, window.items, result, dominant, emerging, late=False
    )
    alerts += novel_alerts(docs, result.novel_terms, result.features, config.novel_similarity)
    models.windows_done += 1
    snapshot = None
    if models.detector.fitted and models.windows_done % max(config.snapshot_every, 1) == 0:
        dictionary = models.detector.model.components_  # as learnt from this window
        snapshot = {
            "model_kind": "l1_dictionary",
            "arrays": {
                **_sparse_dictionary(dictionary),
                "terms": np.asarray(models.detector.features.terms_, dtype=str),
            },
            "meta": {
                "layout": "dictionary_* = scipy.sparse CSC (terms x atoms)",
                "n_terms": dictionary.shape[0],
                "n_atoms": dictionary.shape[1],
                "threshold": _finite(result.threshold),
            },
            "vocabulary_version": models.windows_done,
        }
    messages = (
        _score_messages(window.stream, window.seq, window.items, result, docs.doc_id)
        if np.isfinite(result.scores).all() and len(texts)
        else None
    )
    timings = {"novelty_s": t1 - t0, "topics_s": t2 - t1}
    return WindowComputation(
        window={
            "stream": window.stream,
            "window_seq": window.seq,
            "start": datetime.fromtimestamp(window.start_ms / 1000, tz=UTC),
            "end": datetime.fromtimestamp(window.end_ms / 1000, tz=UTC),
            "n_documents": len(texts),
            "threshold": _finite(result.threshold),
            "timings": timings,
            "closed_by": window.closed_by,
        },
        documents=docs,
        alerts=alerts,
        topics=topic_rows,
        messages=messages,
        snapshot=snapshot,
        timings=timings,
    )


def score_late(
    models: StreamModels, stream: str, items: list[Buffered], size_ms: int | None
) -> tuple[DocumentColumns, list[dict[str, Any]]]:
    """Rows for late documents, scored against the current model and learned from by nothing,
    and the ``novel_document`` alerts of those flagged novel: one each, not one per story, as
    which late documents are handed over together depends on when the worker polled (a
    restart would group them otherwise, and its alerts would differ from an uninterrupted
    run's)."""
    texts = [b.doc.text for b in items]
    if models.detector.fitted:
        result = models.detector.score(texts)
    else:
        n = len(texts)
        result = WindowResult(
            np.full(n, np.nan),
            np.full(n, np.nan),
            np.zeros(n, dtype=bool),
            math.inf,
            sp.csr_matrix((n, 0)),
            np.full((n, 1), -1),
            True,
            0,
            0,
        )
    none = np.full(len(items), -1)
    rows = _document_rows(stream, -1, items, result, none, none, late=True)
    if size_ms:  # the window the document belongs to by its event time
        times = np.array([b.doc.timestamp_ms for b in items], dtype=np.int64)
        rows.window_seq[:] = times // size_ms
    return rows, novel_alerts(rows, result.novel_terms)
