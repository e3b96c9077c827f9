"""Offline evaluation of novelty detectors on a labelled corpus fed in time steps (issue 3, item 7).

Protocol
--------
Documents are sorted by timestamp (ties by corpus position; by NEWID for Reuters) and cut into a
warm-up of ``warmup`` documents (step 0) and steps of ``step_size`` documents (steps 1, 2, ...);
documents with equal timestamps are never split between two steps: a step (the warm-up too)
ends after the documents that share its last one's timestamp, so it may hold a few more (one of
two same-day first stories was novel or not by file order). A document of step ``s >= 1`` is
*novel* when none of its labels occurs among the documents of steps ``< s`` (``rule="none"``, the
issue's definition); ``rule="any"`` (some label is new) is reported as well because it has more
positives on Reuters. Documents without labels are fed to the models but not evaluated (a corpus
without a label after the warm-up is refused: it has nothing to evaluate), except Reuters
stories without TOPICS, which :func:`load_reuters` drops by default (``labelled_only``): they are
neither fed nor evaluated, and the run's ``protocol`` says how many.
A document without terms (nothing left after tokenisation) scores 0 under every method of
:mod:`sparsewatch.replay.eval_methods`, as in the product (see "Documents without terms" there),
so it ranks alike in every AUC.

At every step each method first scores the step's documents with the state learned from earlier
steps, then updates (the paper's Algorithm 3 order). Features are shared: one featurizer learns the
step's texts (vocabulary growth, document frequencies), then every method receives the same TF-IDF
matrix, and only the method's own score + update is timed. A method may instead consume raw texts
(the product's :class:`Detector`), in which case its featurisation is inside its time.

Reported per step and method: ROC AUC under both rules (``None`` when a step has no positive or no
negative), wall time, SRE (the paper's sparse reconstruction error, when the method defines it);
over all steps: the AUC of the pooled scores (with the Hanley-McNeil standard error, which is large
when a corpus has few novel documents) and the mean of per-step AUCs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
from scipy.stats import rankdata
from sparsewatch.consumers.field_mapping import parse_labels
from sparsewatch.consumers.messages import RecordError
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.replay.readers import Rejected, SourceRecord, read_csv, read_jsonl

from sparsewatch.errors import SparsewatchError

RULES = ("none", "any")


# --------------------------------------------------------------------------- corpora and labels
@dataclass
class Corpus:
    """A labelled stream cut into steps. ``step_of[i]`` is document ``i``'s step (0 = warm-up)."""

    name: str
    docs: list[dict]
    step_of: np.ndarray
    protocol: dict[str, Any] = field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        return int(self.step_of.max())

    def step_indices(self, step: int) -> np.ndarray:
        return np.flatnonzero(self.step_of == step)


def assign_steps(
    n_docs: int,
    warmup: int,
    step_size: int,
    max_steps: int | None = None,
    times: Sequence[int] | None = None,
) -> np.ndarray:
    """Step of each document in time order: ``warmup`` docs in step 0, then ``step_size`` each.

    With ``times`` (the documents' event times, in their order) a step never ends between two
    documents of the same time: each step, the warm-up too, goes on to the last document that
    shares its last one's time, so it may hold more than ``warmup`` or ``step_size`` documents,
    and the next step's count starts after it. Documents beyond ``max_steps`` get step ``-1``
    (not used).

    >>> assign_steps(7, 2, 2).tolist()
    [0, 0, 1, 1, 2, 2, 3]
    >>> assign_steps(7, 2, 2, times=[1, 2, 2, 3, 4, 4, 4]).tolist()
    [0, 0, 0, 1, 1, 1, 1]
    """
    if warmup < 1 or step_size < 1:
        raise SparsewatchError("warm-up and step size must be positive")
    steps = np.full(n_docs, -1)
    start, step, size = 0, 0, warmup
    while start < n_docs and (max_steps is None or step <= max_steps):
        end = min(start + size, n_docs)
        while times is not None and end < n_docs and times[end] == times[end - 1]:
            end += 1
        steps[start:end] = step
        start, step, size = end, step + 1, step_size
    return steps


def novelty_labels(
    labels: Sequence[Sequence[str]], step_of: np.ndarray, rule: str = "none"
) -> tuple[np.ndarray, np.ndarray]:
    """Ground truth ``(novel, evaluable)`` per document.

    ``novel[i]``: document ``i`` (in a step ``>= 1``) has no label (``rule="none"``) or not all its
    labels (``rule="any"``) among the labels of documents of earlier steps. ``evaluable[i]``: the
    document is in a step ``>= 1`` and has at least one label.

    >>> labels = [["grain"], ["grain", "ship"], ["ship"], ["oil"], []]
    >>> step_of = np.array([0, 1, 2, 2, 2])
    >>> novel, evaluable = novelty_labels(labels, step_of, "none")
    >>> novel.tolist(), evaluable.tolist()
    ([False, False, False, True, False], [False, True, True, True, False])
    >>> novelty_labels(labels, step_of, "any")[0].tolist()  # "ship" is new in step 1
    [False, True, False, True, False]
    """
    if rule not in RULES:
        raise SparsewatchError(f"novelty rule must be one of {RULES}, not {rule!r}")
    step_of = np.asarray(step_of)
    first_step: dict[str, int] = {}
    for lab, s in zip(labels, step_of, strict=True):
        if s >= 0:
            for label in lab:
                first_step[label] = min(first_step.get(label, s), int(s))
    novel = np.zeros(len(step_of), dtype=bool)
    evaluable = np.array([len(lab) > 0 for lab in labels]) & (step_of >= 1)
    for i in np.flatnonzero(evaluable).tolist():
        seen = [first_step[label] < step_of[i] for label in labels[i]]
        novel[i] = not any(seen) if rule == "none" else not all(seen)
    return novel, evaluable


def roc_auc(y_true: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties).

    Scores are compared at float32 precision, the models' own: a document no atom explains
    scores its l1 norm, 1 up to about 1e-8 of rounding, and compared in float64 those ties
    (most documents under the paper's settings) were ordered by the rounding of each document's
    norm (up to 0.03 AUC on Reuters, ``benchmarks/novelty_reuters_ties.py``).
    ``None`` when ``y_true`` has no positive or no negative.
    """
    y = np.asarray(y_true, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    # (summed in float64: SciPy 1.18 ranks float32 scores in float32, whose sum of thousands of
    # ranks is off by whole ranks)
    ranks = rankdata(np.asarray(scores, dtype=np.float32)).astype(np.float64, copy=False)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def auc_standard_error(auc: float | None, n_pos: int, n_neg: int) -> float | None:
    """Standard error of an AUC estimate (Hanley and McNeil 1982, Radiology 143, Eq. (1))."""
    if auc is None or n_pos == 0 or n_neg == 0:
        return None
    q1, q2 = auc / (2 - auc), 2 * auc**2 / (1 + auc)
    var = auc * (1 - auc) + (n_pos - 1) * (q1 - auc**2) + (n_neg - 1) * (q2 - auc**2)
    return float(np.sqrt(max(var, 0.0) / (n_pos * n_neg)))


def stratified_auc(
    aucs: Sequence[float | None], positives: Sequence[int], negatives: Sequence[int]
) -> tuple[float | None, float | None]:
    """The AUC over the pairs (novel, known) of the same step, and its standard error: each
    step's AUC weighted by its number of such pairs, ``p_s q_s`` (the Mann-Whitney statistic
    stratified by step), the steps' Hanley-McNeil variances (:func:`auc_standard_error`)
    combined with the squared weights. ``(None, None)`` when no step has both kinds.

    The pooled AUC (every score of every step in one ranking) also compares a novel document of
    one step with a known one of another, so a score that drifts over the steps (the dictionary
    or the memory grows, the vocabulary with it) moves it though the ranking within every step
    is the same: on Reuters, whose novel stories sit in the first three steps, a method whose
    scores fall from step to step gained up to 0.17 that way."""
    weights = [
        p * q if a is not None else 0 for a, p, q in zip(aucs, positives, negatives, strict=True)
    ]
    total = sum(weights)
    if total == 0:
        return None, None
    auc = sum(w * a for w, a in zip(weights, aucs, strict=True) if a is not None) / total
    variance = sum(
        (w / total) ** 2 * (auc_standard_error(a, p, q) or 0.0) ** 2
        for w, a, p, q in zip(weights, aucs, positives, negatives, strict=True)
        if a is not None
    )
    return float(auc), float(np.sqrt(variance))


class LoadedCorpus(list[dict]):
    """Documents in time order, as a loader read them, with ``protocol``: how it ordered them and
    what it left out, which :func:`make_corpus` records in the run's protocol."""

    def __init__(self, docs: Iterable[dict], protocol: dict[str, Any]) -> None:
        super().__init__(docs)
        self.protocol = protocol


def load_reuters(path: str | Path, labelled_only: bool = True) -> LoadedCorpus:
    """Reuters-21578 JSONL(.gz) as stream documents in time order (ties by NEWID).

    With ``labelled_only`` (the default) stories without TOPICS are dropped, neither fed to the
    models nor evaluated; the corpus' ``protocol`` records that, how many, and the tie order.
    ``text`` is title and body, ``labels`` the TOPICS codes, ``timestamp`` the story date. The
    file is read as ``replay`` reads JSONL (:func:`~sparsewatch.replay.readers.read_jsonl`:
    gzip known by its first bytes, a byte-order mark and blank lines skipped). Dates are
    ordered as the times they read as (:func:`~sparsewatch.consumers.timestamps.parse_timestamp_ms`:
    ISO-8601 or Reuters' own ``26-FEB-1987 15:01:01.79``, as ``read_reuters_sgml`` writes it),
    not as text, which put Reuters' dates among ISO ones by day of the month and a missing date
    after every other; a missing or unreadable date is an error naming its line.
    """
    path = Path(path)
    if not path.is_file():
        raise SparsewatchError(f"Reuters corpus not found at {path}")
    docs = []
    dropped = 0
    for record in read_jsonl(path):
        if isinstance(record, Rejected):
            raise SparsewatchError(
                f"{path}: cannot be read as the Reuters-21578 JSONL at line {record.line}: "
                f"{record.reason}"
            )
        doc = _reuters_document(path, record, labelled_only)
        dropped += doc is None
        if doc is not None:
            try:
                time_ms = parse_timestamp_ms(doc["timestamp"])
            except RecordError as exc:
                raise SparsewatchError(f"{path}: line {record.line}: 'date': {exc}") from None
            docs.append(((time_ms, int(doc["id"])), doc))
    docs.sort(key=lambda item: item[0])
    protocol = {
        "order": "timestamp, ties by NEWID",
        "labelled_only": labelled_only,
        "unlabelled_dropped": dropped,
    }
    return LoadedCorpus((doc for _, doc in docs), protocol)


def _reuters_document(path: Path, record: SourceRecord, labelled_only: bool) -> dict | None:
    """The stream document of one record (``None``: no topics, with ``labelled_only``)."""
    r = record.fields
    try:
        if not isinstance(r["topics"], list):  # a string's labels were its characters
            raise TypeError(f"'topics' is {type(r['topics']).__name__}, not a list")
        if labelled_only and not r["topics"]:
            return None
        int(r["id"])  # (the tie order)
        return {
            "id": str(r["id"]),
            "text": f"{r['title']}\n{r['body']}".strip(),
            "timestamp": r["date"],
            "stream": "reuters21578",
            "labels": list(r["topics"]),
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise SparsewatchError(
            f"{path}: line {record.line} is not a record of the Reuters-21578 JSONL "
            f"(id, title, body, date, topics): {type(exc).__name__}: {exc}"
        ) from None


def load_jsonl(path: str | Path) -> list[dict]:
    """Documents ``{"id", "text", "timestamp", "labels", ...}`` from JSONL(.gz), in time order;
    a file named ``.csv`` or ``.csv.gz`` is read as CSV with a header row (it was refused as
    "line 1: invalid JSON").

    Timestamps and labels are read as the replay tool reads them: epoch milliseconds, ISO-8601
    (any offset; naive is UTC) or a Reuters date, and labels as a list or a ``;``/``|``-separated
    string. A line that is not such a document is an error naming the line.
    """
    path = Path(path)
    if not path.is_file():
        raise SparsewatchError(f"corpus file not found: {path}")
    is_csv = path.name.lower().removesuffix(".gz").endswith(".csv")
    docs: list[dict] = []
    times: list[int] = []
    for record in read_csv(path) if is_csv else read_jsonl(path):
        where = f"{path}: line {record.line}"
        if isinstance(record, Rejected):
            raise SparsewatchError(f"{where}: {record.reason}")
        doc = dict(record.fields)
        if "text" not in doc or "timestamp" not in doc:
            raise SparsewatchError(f"{where} lacks 'text' or 'timestamp'")
        if not isinstance(doc["text"], str):
            raise SparsewatchError(f"{where}: 'text' is {type(doc['text']).__name__}, not a string")
        try:
            times.append(parse_timestamp_ms(doc["timestamp"]))
            doc["labels"] = parse_labels(doc.get("labels"))
        except RecordError as exc:
            raise SparsewatchError(f"{where}: {exc}") from None
        docs.append(doc)
    return [docs[i] for i in np.argsort(np.array(times, dtype=np.int64), kind="stable")]


def make_corpus(
    name: str, docs: list[dict], warmup: int, step_size: int, max_steps: int | None = None
) -> Corpus:
    """A :class:`Corpus` from time-ordered documents with the warm-up/step protocol; documents
    of one timestamp share a step (:func:`assign_steps`). The protocol records the order and what
    was left out as a :class:`LoadedCorpus` says (else: ties by corpus position)."""
    if len(docs) <= warmup:
        raise SparsewatchError(
            f"{name}: {len(docs)} documents, need more than the warm-up {warmup}"
        )
    times = [_time_ms(name, i, doc) for i, doc in enumerate(docs)]
    step_of = assign_steps(len(docs), warmup, step_size, max_steps, times)
    if not any(doc.get("labels") for doc, step in zip(docs, step_of, strict=True) if step >= 1):
        # every AUC was null, exit status 0: a corpus whose labels are under another field name
        raise SparsewatchError(
            f"{name}: no document after the warm-up has a label (field 'labels': a list, or a "
            "string split on ';' or '|'), so there is no novelty to evaluate"
        )
    protocol = {
        "order": "timestamp, ties by corpus position",
        **(docs.protocol if isinstance(docs, LoadedCorpus) else {}),
        "warmup_docs": warmup,
        "step_docs": step_size,
        "ties": "never split between steps: a step (and the warm-up) goes on to the last "
        "document of its last timestamp, so it may hold more documents",
        "n_steps": int(step_of.max()),
        "novel": "no label seen in an earlier step (rule 'none'); rule 'any': some label unseen",
    }
    return Corpus(name, docs, step_of, protocol)


def _time_ms(name: str, index: int, doc: dict) -> int:
    """Epoch milliseconds of document ``index`` of corpus ``name`` (its ``timestamp``)."""
    if "timestamp" not in doc:
        raise SparsewatchError(f"{name}: document {index + 1} has no 'timestamp'")
    try:
        return parse_timestamp_ms(doc["timestamp"])
    except RecordError as exc:
        raise SparsewatchError(f"{name}: document {index + 1}: {exc}") from None


# --------------------------------------------------------------------------- methods
class Featurizer(Protocol):
    """What the harness needs from the shared text features (e.g. ``StreamingTfidf``)."""

    def partial_fit(self, texts: Sequence[str]) -> Any: ...

    def transform(self, texts: Sequence[str]) -> sp.spmatrix: ...


class StepMethod(Protocol):
    """A detector run step by step: ``warm_up`` once, then ``step`` = score, then update.

    A ``warm_up`` that leaves the method with nothing learned raises :class:`NothingToLearnError`.
    """

    uses_text: bool

    def warm_up(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> None: ...

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray: ...

    def sre(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> float | None: ...


class NothingToLearnError(SparsewatchError):
    """Raised by a method's ``warm_up`` whose own features found no term in the warm-up (the
    product's detector, which reads raw texts): :func:`evaluate_corpus` refuses the corpus as
    it refuses a warm-up without shared features, naming the corpus and the method."""


@dataclass
class EstimatorMethod:
    """Adapter for estimators with ``fit``/``partial_fit``/``score_samples`` on feature rows.

    ``sre_fn(estimator, X)`` (optional) returns the paper's SRE on the step's documents after the
    update; ``score_fn(estimator, X)`` replaces ``score_samples`` for the scores only: the update
    ``partial_fit(X)`` follows as for every method (it was skipped, so the estimator never learnt
    past the warm-up). A scoring that also learns (such as the first-story ``score_stream``,
    which stores ``X`` itself) is a :class:`StepMethod` of its own, not a ``score_fn``.
    """

    estimator: Any
    sre_fn: Callable[[Any, sp.csr_matrix], float] | None = None
    score_fn: Callable[[Any, sp.csr_matrix], np.ndarray] | None = None
    uses_text: bool = False

    def warm_up(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> None:
        self.estimator.fit(X)

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        if self.score_fn is None:
            scores = np.asarray(self.estimator.score_samples(X))
        else:
            scores = np.asarray(self.score_fn(self.estimator, X))
        self.estimator.partial_fit(X)
        return scores

    def sre(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> float | None:
        return None if self.sre_fn is None else float(self.sre_fn(self.estimator, X))


# --------------------------------------------------------------------------- the run
@dataclass
class MethodResult:
    """Per-step and overall results of one method (JSON-ready through :meth:`to_dict`)."""

    name: str
    warmup_time_s: float = 0.0
    time_s: list[float] = field(default_factory=list)
    sre: list[float | None] = field(default_factory=list)
    auc: dict[str, list[float | None]] = field(default_factory=lambda: {r: [] for r in RULES})
    scores: list[np.ndarray] = field(default_factory=list)

    def summary(self, truth: dict[str, list[np.ndarray]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "warmup_time_s": self.warmup_time_s,
            "time_s": self.time_s,
            "sre": self.sre,
        }
        for rule in RULES:
            per = [a for a in self.auc[rule] if a is not None]
            y = np.concatenate(truth[rule])
            pooled = roc_auc(y, np.concatenate(self.scores))
            positives = [int(t.sum()) for t in truth[rule]]
            negatives = [t.size - p for t, p in zip(truth[rule], positives, strict=True)]
            stratified, stratified_se = stratified_auc(self.auc[rule], positives, negatives)
            out[f"auc_{rule}"] = self.auc[rule]
            out[f"mean_auc_{rule}"] = float(np.mean(per)) if per else None
            out[f"stratified_auc_{rule}"] = stratified
            out[f"stratified_auc_{rule}_se"] = stratified_se
            out[f"pooled_auc_{rule}"] = pooled
            out[f"pooled_auc_{rule}_se"] = auc_standard_error(pooled, int(y.sum()), int((~y).sum()))
        return out


def evaluate_corpus(
    corpus: Corpus,
    methods: dict[str, StepMethod],
    featurizer: Featurizer,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every method on the same steps; return a JSON-ready result dictionary.

    Also returns, under ``"_scores"`` and ``"_truth"``, the evaluated scores and labels per
    step (numpy arrays, for ROC plots; drop them before serialising).
    """
    texts = [d["text"] for d in corpus.docs]
    labels = [list(d.get("labels", [])) for d in corpus.docs]
    truth_all = {rule: novelty_labels(labels, corpus.step_of, rule) for rule in RULES}
    results = {name: MethodResult(name) for name in methods}
    truth: dict[str, list[np.ndarray]] = {rule: [] for rule in RULES}
    step_rows: list[dict[str, Any]] = []

    def features(idx: np.ndarray) -> tuple[sp.csr_matrix, list[str], float]:
        t0 = time.perf_counter()
        step_texts = [texts[i] for i in idx]
        featurizer.partial_fit(step_texts)
        X = sp.csr_matrix(featurizer.transform(step_texts))
        return X, step_texts, time.perf_counter() - t0

    idx0 = corpus.step_indices(0)
    X0, t0_texts, feat_time = features(idx0)
    _check_warm_up_terms(corpus.name, X0, methods)
    for name, method in methods.items():
        t = time.perf_counter()
        try:
            method.warm_up(None if method.uses_text else X0, t0_texts)
        except NothingToLearnError:
            raise _nothing_to_learn(corpus.name, idx0.size, [name]) from None
        results[name].warmup_time_s = time.perf_counter() - t
        if progress:
            progress(f"{corpus.name}: {name} warm-up {results[name].warmup_time_s:.2f}s")
    for step in range(1, corpus.n_steps + 1):
        idx = corpus.step_indices(step)
        X, step_texts, feat_time = features(idx)
        evaluable = truth_all["none"][1][idx]
        row = {
            "step": step,
            "n_docs": int(idx.size),
            "n_evaluated": int(evaluable.sum()),
            "n_features": int(X.shape[1]),
            "featurize_time_s": feat_time,
        }
        for rule in RULES:
            y = truth_all[rule][0][idx][evaluable]
            truth[rule].append(y)
            row[f"n_novel_{rule}"] = int(y.sum())
        step_rows.append(row)
        for name, method in methods.items():
            t = time.perf_counter()
            scores = method.step(None if method.uses_text else X, step_texts)
            elapsed = time.perf_counter() - t
            res = results[name]
            res.time_s.append(elapsed)
            # a step without documents has no SRE (the mean over none was NaN: invalid JSON)
            sre = method.sre(None if method.uses_text else X, step_texts) if idx.size else None
            res.sre.append(sre)
            assert len(scores) == idx.size, (name, len(scores), idx.size)
            s = np.asarray(scores, dtype=np.float64)[evaluable]
            res.scores.append(s)
            for rule in RULES:
                res.auc[rule].append(roc_auc(truth[rule][-1], s))
            if progress:
                aucs = " ".join(f"auc_{r}={_shown_auc(res.auc[r][-1])}" for r in RULES)
                progress(f"{corpus.name} step {step}: {name} {elapsed:.2f}s {aucs}")
    return {
        "corpus": corpus.name,
        "protocol": corpus.protocol,
        "steps": step_rows,
        "methods": {name: r.summary(truth) for name, r in results.items()},
        "_scores": {name: r.scores for name, r in results.items()},
        "_truth": truth,
    }


def _check_warm_up_terms(name: str, X0: sp.csr_matrix, methods: dict[str, StepMethod]) -> None:
    """A SparsewatchError when the warm-up has no term at all (empty texts, or only stop words)
    and a method learns from the shared features: each failed with "ValueError: Found array
    with 0 feature(s)". A method on raw texts (the product's detector) says so itself, after its
    warm-up, with :class:`NothingToLearnError`."""
    featured = [n for n, m in methods.items() if not m.uses_text]
    if X0.shape[1] == 0 and featured:
        raise _nothing_to_learn(name, X0.shape[0], featured)


def _nothing_to_learn(name: str, n_docs: int, methods: Sequence[str]) -> SparsewatchError:
    """The one-line refusal of corpus ``name`` whose warm-up of ``n_docs`` documents gave
    ``methods`` no term to learn from."""
    return SparsewatchError(
        f"{name}: the warm-up's {n_docs} documents have no terms (empty texts or only stop "
        f"words), nothing for {', '.join(methods)} to learn from; give a larger --warmup"
    )


_NO_ROC = "no ROC curve:\nno document evaluated is novel,\nor every one is"


def _shown_auc(auc: float | None) -> str:
    """An AUC for a progress line: three decimals, ``n/a`` when undefined."""
    return "n/a" if auc is None else f"{auc:.3f}"


def plot_results(result: dict[str, Any], out_prefix: str | Path) -> list[Path]:
    """ROC curves (pooled over steps, rule 'none' and 'any'), per-step AUC and time: PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    out_prefix = Path(out_prefix)
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, rule in zip(axes, RULES, strict=True):
        y = np.concatenate(result["_truth"][rule])
        for name, scores in result["_scores"].items():
            s = np.concatenate(scores)
            auc = result["methods"][name][f"pooled_auc_{rule}"]
            if auc is None:
                continue
            fpr, tpr, _ = roc_curve(y, s.astype(np.float32))  # as the AUC compares them
            ax.plot(fpr, tpr, label=f"{name} ({auc:.3f})")
        ax.plot([0, 1], [0, 1], "k:", lw=0.8)
        ax.set_title(f"{result['corpus']}: pooled ROC, novelty rule '{rule}'")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        if ax.get_legend_handles_labels()[0]:  # without a curve, legend() warned on stderr
            ax.legend(fontsize=7, loc="lower right")
        else:
            ax.text(0.5, 0.5, _NO_ROC, ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    paths.append(out_prefix.with_name(out_prefix.name + "_roc.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    steps = [r["step"] for r in result["steps"]]
    for name, m in result["methods"].items():
        auc = [np.nan if a is None else a for a in m["auc_any"]]
        axes[0].plot(steps, auc, marker="o", label=name)
        axes[1].plot(steps, m["time_s"], marker="o", label=name)
    axes[0].set_title("ROC AUC per step (rule 'any')")
    axes[1].set_title("score + update wall time per step (s)")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("time step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_prefix.with_name(out_prefix.name + "_steps.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    """The result without its private numpy entries."""
    return {k: v for k, v in result.items() if not k.startswith("_")}
