"""Novelty quality and speed: ONLINE vs BATCH vs L2-BATCH vs nearest neighbour (issue 3, item 7).

    python benchmarks/novelty_quality.py --corpus synthetic
    python benchmarks/novelty_quality.py --corpus synthetic-news --parts main
    python benchmarks/novelty_quality.py --corpus reuters
    python benchmarks/novelty_quality.py --corpus all --tables-only   # no run: the .md again

Writes ``benchmarks/results/novelty_quality_<corpus>.json`` (+ ``.md`` tables) and
``..._roc.png``/``..._steps.png``.

Part 1 runs the paper's methods and the peers on the same steps with the same shared features
(``sparsewatch.replay.eval_methods``): per-step ROC AUC, SRE, wall time, and the BATCH/ONLINE time
ratio per step. Part 2 runs variants of the l1 detector (representation, lambda, dictionary size
and initialisation) on the same steps, to find what makes the l1 score competitive with exact
nearest neighbour; every variant tried is reported.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sparsewatch.models.l1_coding import l1_sparse_code
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import DEFAULT_FEATURES, Detector
from sparsewatch.replay.eval_methods import (
    FACTORIES,
    DetectorMethod,
    SharedTfidf,
    build_methods,
)
from sparsewatch.replay.evaluate import (
    Corpus,
    EstimatorMethod,
    evaluate_corpus,
    load_reuters,
    make_corpus,
    plot_results,
    stratified_auc,
    to_json,
)
from sparsewatch.replay.synthetic import generate_stream

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
MAIN_METHODS = ["online", "batch", "l2-batch", "nn-exact", "nn-lsh", "detector"]


CORPORA = ["synthetic", "synthetic-news", "reuters"]


def load_corpus(name: str, steps: int) -> Corpus:
    """``synthetic``: the generator's tweets (6-18 words); ``synthetic-news``: the same stream
    process with news-length documents (the generator's ``kind="news"``); ``reuters``."""
    if name in ("synthetic", "synthetic-news"):
        kind = "tweet" if name == "synthetic" else "news"
        return make_corpus(name, generate_stream(8000, kind=kind, seed=0), 1000, 1000, steps)
    return make_corpus("reuters", load_reuters(DATA / "reuters21578.jsonl.gz"), 1000, 1000, steps)


class VocabularyAtomsMethod(DetectorMethod):
    """Variant: after the usual warm-up, the dictionary is one singleton atom per frequent term.

    ``n_atoms`` terms with the largest document frequency get an atom ``e_i``; after each step,
    ``grow`` singleton atoms are added for the most frequent terms that no atom covers yet (new
    vocabulary), then OIADMM updates as usual. The l1 score is then the TF-IDF mass on terms the
    dictionary does not cover (plus ``lambda`` times the covered mass).
    """

    def __init__(self, detector: Detector, n_atoms: int, grow: int) -> None:
        super().__init__(detector)
        self.n_atoms = n_atoms
        self.grow = grow

    def _singletons(self, rows: np.ndarray) -> np.ndarray:
        A = np.zeros((self.detector.features.n_features_, rows.size), dtype=np.float32)
        A[rows, np.arange(rows.size)] = 1.0
        return A

    def warm_up(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> None:
        super().warm_up(X, texts)
        df = self.detector.features.df_
        rows = np.argsort(-df, kind="stable")[: self.n_atoms]
        self.detector.model.oiadmm_.initialize(self._singletons(rows[df[rows] > 0]))

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        scores = super().step(X, texts)
        if self.grow:
            A = self.detector.model.components_
            A = A.toarray() if sp.issparse(A) else A
            df = self.detector.features.df_
            uncovered = np.flatnonzero((A.max(axis=1) <= 0) & (df >= 2))
            rows = uncovered[np.argsort(-df[uncovered], kind="stable")[: self.grow]]
            if rows.size:
                self.detector.model.oiadmm_.add_atoms(self._singletons(rows))
        return scores


class KnownTermAtoms:
    """Variant: one singleton atom per term seen in earlier steps (document frequency >= min_df),
    rebuilt each step, no learning. With unit-l1 documents the l1 score is then exactly
    ``lambda * (covered mass) + (mass on unseen or rare terms)``: a new-vocabulary detector, the
    limit the singleton variants tend to. A probe of what the corpora reward, not a proposal.
    """

    uses_text = False

    def __init__(self, lam: float, min_df: int) -> None:
        self.lam = lam
        self.min_df = min_df

    def warm_up(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> None:
        self.df = np.asarray((X > 0).sum(axis=0)).ravel()

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        m = X.shape[1]
        df = np.r_[self.df, np.zeros(m - self.df.size)]
        rows = np.flatnonzero(df >= self.min_df)
        A = np.zeros((m, rows.size), dtype=np.float32)
        A[rows, np.arange(rows.size)] = 1.0
        scores = l1_sparse_code(sp.csc_matrix(X.T), A, self.lam).objective
        self.df = df + np.asarray((X > 0).sum(axis=0)).ravel()
        return scores

    def sre(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> float | None:
        return None


def screening_margin(P: sp.csc_matrix, A: np.ndarray | sp.spmatrix, lam: float) -> np.ndarray:
    """``max(0, min_j ||a_j||_1 + lam - 2 m_j)`` per document column of ``P``.

    ``m_j`` is atom ``j``'s mass on the document's terms; the minimum is the smallest directional
    derivative of Eq. (3) at ``x = 0`` (DESIGN.md's screening rule). It is positive exactly when
    ``x = 0`` is optimal (score 1): how far the best atom is from helping. Added to the score it
    breaks the ties at 1 with an l1-native quantity, and changes nothing when an atom is used.
    """
    A = A.toarray() if sp.issparse(A) else np.asarray(A)
    support = sp.csc_matrix((np.ones(P.nnz), P.indices, P.indptr), shape=P.shape)
    mass = np.asarray(support.T @ A)
    return np.maximum((A.sum(axis=0)[None, :] + lam - 2 * mass).min(axis=1, initial=np.inf), 0)


class GradedOnline(EstimatorMethod):
    """Variant: ONLINE (Algorithm 3) with score = Eq. (3) optimum + :func:`screening_margin`."""

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        est = self.estimator
        res = est.code(X)
        P = sp.csc_matrix(X.T, dtype=np.float64)
        A = est.padded_components(P.shape[0])  # the step's new terms: zero rows
        scores = res.objective + screening_margin(P, A, est.lam)
        est.partial_fit(X, codes=res.codes, scores=res.objective)
        return scores


class ExemplarAtoms:
    """Variant: atoms = the last ``memory`` documents (optionally truncated to ``atom_terms``
    salient terms, unit l1), no learning; score = Eq. (3) optimum (+ :func:`screening_margin`)."""

    uses_text = False

    def __init__(self, lam: float, memory: int, atom_terms: int | None, graded: bool) -> None:
        self.lam = lam
        self.memory = memory
        self.atom_terms = atom_terms
        self.graded = graded

    def warm_up(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> None:
        self.M = X[-self.memory :]

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        m = X.shape[1]
        M = sp.csr_matrix((self.M.data, self.M.indices, self.M.indptr), shape=(self.M.shape[0], m))
        A = M.T.toarray()
        if self.atom_terms is not None:
            drop = np.argpartition(-A, self.atom_terms - 1, axis=0)[self.atom_terms :]
            np.put_along_axis(A, drop, 0.0, axis=0)
            A /= np.maximum(A.sum(axis=0, keepdims=True), 1e-12)
        P = sp.csc_matrix(X.T, dtype=np.float64)
        scores = l1_sparse_code(P, A.astype(np.float32), self.lam).objective
        if self.graded:
            scores = scores + screening_margin(P, A, self.lam)
        self.M = sp.vstack([M, X], format="csr")[-self.memory :]
        return scores

    def sre(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> float | None:
        return None


def inner_methods() -> dict[str, Any]:
    """ONLINE with 1, 3, 5 inner rounds per window; ONLINE growing by BATCH's ``eta = 10`` atoms
    a step (seeded, like BATCH's, from the step's worst-represented whole documents) after its
    update, or by 10 or 30 atoms seeded before 3 inner rounds (``grow_first``); 3 rounds with
    and without 30 atoms seeded first, their re-codings loose (``recode_tol = 1e-2``); BATCH.
    The runs before 2026-11-28 also had ONLINE without its OIADMM update (``update_steps=0``,
    refused by the model since): their rows stay in the committed JSON."""
    out: dict[str, Any] = {
        f"online, {n} inner round(s)": FACTORIES["online"](update_passes=n) for n in (1, 3, 5)
    }
    eta = {"grow_threshold": 0.0, "grow_fraction": 0.0, "grow_size": 10, "max_components": 10**6}
    out["online + eta = 10 atoms a step (BATCH's growth)"] = FACTORIES["online"](**eta)
    for size in (10, 30):  # new atoms learn from the step that seeded them (session ten)
        out[f"online + eta = {size} atoms seeded before 3 inner rounds"] = FACTORIES["online"](
            **{**eta, "grow_size": size}, grow_first=True, update_passes=3
        )
    # the re-codings between rounds warm-started, to 1e-2, unpolished (session nineteen)
    loose = {"update_passes": 3, "recode_tol": 1e-2}
    out["online, 3 inner rounds, loose re-coding"] = FACTORIES["online"](**loose)
    out["online + eta = 30 atoms seeded before 3 inner rounds, loose re-coding"] = FACTORIES[
        "online"
    ](**{**eta, "grow_size": 30}, grow_first=True, **loose)
    out.update(build_methods(["batch"]))
    return out


def variant_methods() -> dict[str, Any]:
    """Every l1 variant tried (name -> method); names say what changed from the paper."""

    def det(features: dict, model: dict) -> Detector:
        return Detector(
            features=StreamingTfidf(**{"max_features": 10**9, **features}),
            model=OnlineL1NoveltyDetector(**{**PREVIOUS_MODEL, **model}),
        )

    paper = {"n_components": 100, "lam": 0.1, "atom_terms": None}
    full = {"df_half_life": None}
    out: dict[str, Any] = {
        "l1 paper (k=100, lam=0.1, whole-doc seeds)": DetectorMethod(det(full, paper)),
        "l1 lam=0.01": DetectorMethod(det(full, {**paper, "lam": 0.01})),
        "l1 seeds=10 salient terms": DetectorMethod(det(full, {**paper, "atom_terms": 10})),
        "l1 k=300 seeds=3 terms lam=0.01": DetectorMethod(
            det(full, {"n_components": 300, "lam": 0.01, "atom_terms": 3})
        ),
        "l1 k=1000 seeds=3 terms lam=0.01 init=2": DetectorMethod(
            det(full, {"n_components": 1000, "lam": 0.01, "atom_terms": 3, "n_init_iter": 2})
        ),
        "l1 docs truncated to 20 terms, seeds=10": DetectorMethod(
            det({**full, "max_terms_per_doc": 20}, {**paper, "atom_terms": 10})
        ),
        "l1 docs truncated to 10 terms, k=300 seeds=3 lam=0.01": DetectorMethod(
            det(
                {**full, "max_terms_per_doc": 10},
                {"n_components": 300, "lam": 0.01, "atom_terms": 3},
            )
        ),
    }
    for n_atoms, grow in ((2000, 0), (5000, 500)):
        out[f"l1 singleton atoms: top {n_atoms} terms, +{grow}/step, lam=0.1"] = (
            VocabularyAtomsMethod(det(full, {**paper, "n_init_iter": 0}), n_atoms, grow)
        )
    for graded in (False, True):
        tag = "score + screening margin" if graded else "score"
        for atom_terms in (None, 5):
            out[f"exemplar atoms: last 2000 docs, {atom_terms or 'all'} terms, lam=0.1, {tag}"] = (
                ExemplarAtoms(0.1, 2000, atom_terms, graded)
            )
    out["l1 paper + screening margin"] = GradedOnline(
        OnlineL1NoveltyDetector(**{**PREVIOUS_MODEL, **paper})
    )
    out["l1 k=300 seeds=3 terms lam=0.01 + screening margin"] = GradedOnline(
        OnlineL1NoveltyDetector(
            **{**PREVIOUS_MODEL, "n_components": 300, "lam": 0.01, "atom_terms": 3}
        )
    )
    for min_df in (1, 3):
        out[f"probe: singleton atoms for every term with df>={min_df} so far, no update"] = (
            KnownTermAtoms(0.1, min_df)
        )
    return out


def _grow(size: int, cap: int, atom_terms: int | None, w: float, **extra: Any) -> dict[str, Any]:
    """Model parameters of a growing-dictionary variant (score margin on, growth every window)."""
    return {
        "over_weight": w,
        "score_margin": True,
        "grow_threshold": 0.9,
        "grow_fraction": 0.0,
        "grow_size": size,
        "max_components": cap,
        "atom_terms": atom_terms,
        **extra,
    }


# The Detector defaults before this tuning (features and model), to which the rows below add
PREVIOUS_FEATURES = {**DEFAULT_FEATURES, "idf_power": 0.0, "past_idf": False}
PREVIOUS_MODEL = {
    "n_components": 100,
    "lam": 0.1,
    "atom_terms": 5,
    "over_weight": 1.0,
    "score_margin": False,
    "grow_threshold": None,
    "grow_fraction": 0.5,
    "grow_size": 10,
    "max_components": 300,
}
IDF = {"idf_power": 1.0}
PAST_IDF = {"idf_power": 1.0, "past_idf": True}
# = the class defaults
NEW_MODEL = _grow(1000, 1500, 8, 0.1, lam=0.01, grow_threshold=0.7, n_components=200)
TUNING: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name -> (overrides of PREVIOUS_FEATURES, overrides of PREVIOUS_MODEL)
    "previous default (tf, k=100, a5, lam=0.1, w=1, no growth)": ({}, {}),
    "previous default + margin": ({}, {"score_margin": True}),
    "w=0.2 + margin": ({}, {"over_weight": 0.2, "score_margin": True}),
    "idf + margin": (IDF, {"score_margin": True}),
    "idf, w=0.2 + margin": (IDF, {"over_weight": 0.2, "score_margin": True}),
    "tf, grow 200/window, cap 1500, a3, w=1": ({}, _grow(200, 1500, 3, 1.0)),
    "tf, grow 500/window, cap 1500, a8, w=0.2": ({}, _grow(500, 1500, 8, 0.2)),
    "idf, grow 500/window, cap 1500, a8, w=0.2": (IDF, _grow(500, 1500, 8, 0.2)),
    "past idf, grow 500/window (thr 0.9), cap 1500, a8, w=0.2, lam=0.1": (
        PAST_IDF,
        _grow(500, 1500, 8, 0.2),
    ),
    "past idf, grow 1000/window (thr 0.7), w=0.1, lam=0.1": (
        PAST_IDF,
        {**NEW_MODEL, "lam": 0.1},
    ),
    "past idf, grow 1000/window (thr 0.7), w=0.1, lam=0.05": (
        PAST_IDF,
        {**NEW_MODEL, "lam": 0.05},
    ),
    "new default with w=1": (PAST_IDF, {**NEW_MODEL, "over_weight": 1.0}),
    "new default with w=0.2": (PAST_IDF, {**NEW_MODEL, "over_weight": 0.2}),
    "new default without margin": (PAST_IDF, {**NEW_MODEL, "score_margin": False}),
    "new default with idf (not past idf)": (IDF, NEW_MODEL),
    "new default with tf (no idf)": ({}, NEW_MODEL),
    "new default without growth": (PAST_IDF, {**NEW_MODEL, "grow_threshold": None}),
    **{
        f"new default with k={k} initial atoms{' (the default until 2026-11)' * (k == 100)}": (
            PAST_IDF,
            {**NEW_MODEL, "n_components": k},
        )
        for k in (100, 300, 600)
    },
}


def tuning_methods() -> dict[str, Any]:
    """The product's Detector under every setting tried while tuning the default (issue 3)."""
    out: dict[str, Any] = {"product default": DetectorMethod(Detector())}
    for name, (features, model) in TUNING.items():
        out[name] = DetectorMethod(
            Detector(
                features=StreamingTfidf(**{**PREVIOUS_FEATURES, **features}),
                model=OnlineL1NoveltyDetector(**{**PREVIOUS_MODEL, **model}),
            )
        )
    return out


def speed_table(methods: dict[str, Any]) -> list[dict[str, float]]:
    online, batch = methods["online"]["time_s"], methods["batch"]["time_s"]
    return [
        {"step": i + 1, "online_s": o, "batch_s": b, "batch_over_online": b / o}
        for i, (o, b) in enumerate(zip(online, batch, strict=True))
    ]


def run(corpus_name: str, steps: int, parts: str) -> dict[str, Any]:
    """Run part 1 (``main``), part 2 (``variants``) or both; the JSON is written after each part
    (a variants-only run adds to the JSON of an earlier main run)."""
    corpus = load_corpus(corpus_name, steps)
    prefix = RESULTS / f"novelty_quality_{corpus_name}"
    path = prefix.with_suffix(".json")
    out: dict[str, Any] = {}
    if parts in ("main", "all"):
        t0 = time.perf_counter()
        main = evaluate_corpus(corpus, build_methods(MAIN_METHODS), SharedTfidf(), progress=print)
        plot_results(main, prefix)
        prev = json.loads(path.read_text()) if path.exists() else {}
        out = {**prev, **to_json(main)}  # keeps the variants/inner/tuning tables of other runs
        out["speed"] = speed_table(out["methods"])
        out["machine"] = (
            f"{platform.machine()}, 2 cores shared with other jobs; python "
            f"{platform.python_version()}"
        )
        out["main_wall_time_s"] = time.perf_counter() - t0
        path.write_text(json.dumps(out, indent=1))
    else:
        out = json.loads(path.read_text())
    if parts == "tuning":
        t0 = time.perf_counter()
        tun = evaluate_corpus(corpus, tuning_methods(), SharedTfidf(), progress=print)
        out["tuning"] = to_json(tun)["methods"]
        out["tuning_wall_time_s"] = time.perf_counter() - t0
        path.write_text(json.dumps(out, indent=1))
    if parts == "inner":
        inner = to_json(evaluate_corpus(corpus, inner_methods(), SharedTfidf(), progress=print))
        out["inner"] = inner["methods"]
        path.write_text(json.dumps(out, indent=1))
    if parts in ("variants", "all"):
        t0 = time.perf_counter()
        var = evaluate_corpus(corpus, variant_methods(), SharedTfidf(), progress=print)
        out["variants"] = to_json(var)["methods"]
        out["variants_wall_time_s"] = time.perf_counter() - t0
        path.write_text(json.dumps(out, indent=1))
    return out


def stratify(out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with the stratified AUCs (:func:`~sparsewatch.replay.evaluate.stratified_auc`)
    of every method of every table, from its per-step AUCs and the steps' counts: results
    written before they were computed get them as a run now would (the same numbers)."""
    for rule in ("none", "any"):
        positives = [s[f"n_novel_{rule}"] for s in out["steps"]]
        negatives = [s["n_evaluated"] - p for s, p in zip(out["steps"], positives, strict=True)]
        for group in ("methods", "variants", "inner", "tuning"):
            for m in out.get(group, {}).values():
                auc, se = stratified_auc(m[f"auc_{rule}"], positives, negatives)
                m[f"stratified_auc_{rule}"], m[f"stratified_auc_{rule}_se"] = auc, se
    return out


def _fmt(x: float | None, se: float | None = None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3f}" if se is None else f"{x:.3f} ± {se:.3f}"


def markdown(out: dict[str, Any]) -> str:
    """Result tables (quality, per-step AUC, speed, variants) as markdown."""
    lines = [
        f"### {out['corpus']}",
        "",
        "| step | docs | novel (none) | novel (any) | terms |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {s['step']} | {s['n_evaluated']} | {s['n_novel_none']} | {s['n_novel_any']} | "
        f"{s['n_features']} |"
        for s in out["steps"]
    ]
    head = (
        "| method | stratified AUC (none) | stratified AUC (any) | pooled AUC (none) | "
        "pooled AUC (any) | mean step AUC (any) | total s |"
    )
    for group in ("methods", "variants", "inner", "tuning"):
        if group not in out:
            continue
        lines += ["", head, "|---|---|---|---|---|---|---|"]
        for name, m in out[group].items():
            lines.append(
                f"| {name} | {_fmt(m['stratified_auc_none'], m['stratified_auc_none_se'])} | "
                f"{_fmt(m['stratified_auc_any'], m['stratified_auc_any_se'])} | "
                f"{_fmt(m['pooled_auc_none'], m['pooled_auc_none_se'])} | "
                f"{_fmt(m['pooled_auc_any'], m['pooled_auc_any_se'])} | "
                f"{_fmt(m['mean_auc_any'])} | {sum(m['time_s']):.1f} |"
            )
    steps = [s["step"] for s in out["steps"]]
    lines += [
        "",
        "| per-step AUC (any) | " + " | ".join(map(str, steps)) + " |",
        "|---|" + "---|" * len(steps),
    ]
    for name, m in out["methods"].items():
        lines.append(f"| {name} | " + " | ".join(_fmt(a) for a in m["auc_any"]) + " |")
    lines += [
        "",
        "| step | ONLINE s | BATCH s | BATCH / ONLINE | SRE ONLINE | SRE BATCH |",
        "|---|---|---|---|---|---|",
    ]
    sre_o, sre_b = out["methods"]["online"]["sre"], out["methods"]["batch"]["sre"]
    for row, so, sb in zip(out["speed"], sre_o, sre_b, strict=True):
        lines.append(
            f"| {row['step']} | {row['online_s']:.2f} | {row['batch_s']:.2f} | "
            f"{row['batch_over_online']:.1f}x | {so:.4f} | {sb:.4f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=[*CORPORA, "all"], default="all")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument(
        "--parts", choices=["main", "variants", "inner", "tuning", "all"], default="all"
    )
    parser.add_argument(
        "--tables-only",
        action="store_true",
        help="run nothing: write the .md tables (and stratified AUCs) of the committed JSON",
    )
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    names = CORPORA if args.corpus == "all" else [args.corpus]
    for name in names:
        if args.tables_only:
            path = RESULTS / f"novelty_quality_{name}.json"
            out = stratify(json.loads(path.read_text()))
            path.write_text(json.dumps(out, indent=1))
            (RESULTS / f"novelty_quality_{name}.md").write_text(markdown(out))
            continue
        out = run(name, args.steps, args.parts)
        (RESULTS / f"novelty_quality_{name}.md").write_text(markdown(out))
        for row in out["speed"]:
            print(f"{name} step {row['step']}: BATCH/ONLINE time {row['batch_over_online']:.1f}x")
        for group in ("methods", "variants", "inner", "tuning"):
            for method, m in out.get(group, {}).items():
                print(
                    f"{name} {method}: pooled AUC none={m['pooled_auc_none']} "
                    f"any={m['pooled_auc_any']} mean-any={m['mean_auc_any']}"
                )


if __name__ == "__main__":
    main()
