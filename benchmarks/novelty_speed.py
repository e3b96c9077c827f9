"""Speed of the l1 novelty core: sparse coding vs HiGHS and dense ADMM, stream throughput, memory.

Usage::

    python benchmarks/novelty_speed.py [--quick] [--part a|b|c|s|r|all]

(a) Algorithm 5 (reduced, screened, batched) vs HiGHS (scipy.optimize.linprog) on identical
    instances at equal objective (relative 1e-3), and vs the naive dense ADMM.
(b) Scoring + update throughput on a synthetic tweet stream (k = 100, m about 6,000, windows of
    1,000) for ONLINE (matrix level and end to end from raw text), scikit-learn's
    MiniBatchDictionaryLearning (positive code and dictionary, lasso_cd; transform + partial_fit
    per window), MiniBatchNMF (transform + partial_fit) and the naive dense l1 ADMM (float64,
    float32; scoring a 200-document slice of each window plus the OIADMM update).
(c) Peak RSS of the end-to-end Detector after N and 10 N documents (separate subprocesses).
(s) Reuters-21578 AUC sanity check of the default representation and variants (``--part s``,
    not part of ``all``).
(r) The default Detector end to end on Reuters-21578, whose vocabulary reaches the 20,000-term
    cap: warm-up and per-window seconds against MiniBatchDictionaryLearning on the same windows
    (``--part r``, not part of ``all``).

Results: benchmarks/results/novelty_speed.json and novelty_speed.png.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog
from sklearn.decomposition import MiniBatchDictionaryLearning, MiniBatchNMF
from sparsewatch.consumers.detector_core import build_models
from sparsewatch.models.l1_coding import l1_objective, l1_sparse_code, l1_sparse_code_dense
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import DEFAULT_FEATURES, Detector
from sparsewatch.replay.evaluate import load_reuters

from sparsewatch.config import Config

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
# The Detector defaults these numbers were first measured with (k = 100 atoms, tf weighting,
# 5-term seeds, Eq. (3) loss, no growth), kept so that runs stay comparable
INSTANCE_FEATURES = {**DEFAULT_FEATURES, "idf_power": 0.0, "past_idf": False}
INSTANCE_MODEL = {
    "n_components": 100,
    "lam": 0.1,
    "atom_terms": 5,
    "over_weight": 1.0,
    "score_margin": False,
    "grow_threshold": None,
}


# ---------------------------------------------------------------- synthetic tweet stream
def tweet_stream(n_docs: int, seed: int = 0, n_words: int = 5500, n_topics: int = 400) -> list[str]:
    """Seeded tweet-length documents: a drifting set of active topics (12 keywords each), Zipf
    background words, hashtags, fresh @mentions and t.co links (the vocabulary never stops
    growing, so the cap and eviction are exercised)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = np.array(["".join(rng.choice(letters, rng.integers(4, 9))) for _ in range(n_words)])
    zipf = 1.0 / np.arange(1, n_words + 1) ** 1.1
    zipf /= zipf.sum()
    topics = rng.choice(n_words, size=(n_topics, 12))
    out = []
    for i in range(n_docs):
        t = (i // 2000 + rng.integers(0, 20)) % n_topics  # 20 active topics, drifting
        kw = words[rng.choice(topics[t], rng.integers(4, 7), replace=False)]
        bg = words[rng.choice(n_words, rng.integers(3, 6), p=zipf)]
        extra = []
        if rng.random() < 0.3:
            extra.append("#" + kw[0])
        if rng.random() < 0.3:
            extra.append(f"@user{rng.integers(0, 10**7)}")
        if rng.random() < 0.2:
            extra.append(f"https://t.co/{rng.integers(0, 10**9):x}")
        out.append(" ".join([*kw, *bg, *extra]))
    return out


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# ---------------------------------------------------------------- (a) coding vs HiGHS
def highs(p: np.ndarray, A: np.ndarray, lam: float) -> float:
    m, k = A.shape
    As = sp.csr_matrix(A)
    eye = sp.identity(m, format="csr")
    A_ub = sp.vstack([sp.hstack([As, -eye]), sp.hstack([-As, -eye])]).tocsr()
    r = linprog(
        np.r_[np.full(k, lam), np.ones(m)],
        A_ub=A_ub,
        b_ub=np.r_[p, -p],
        bounds=(0, None),
        method="highs",
    )
    return float(r.fun)


def part_a(quick: bool) -> dict:
    """Identical instances: Reuters (news) and synthetic tweets, dictionary from the detector."""
    out = {}
    n_lp = 40 if quick else 200
    corpora = {"tweets": tweet_stream(3000, seed=1)}
    path = DATA / "reuters21578.jsonl.gz"
    if path.exists():
        with gzip.open(path, "rt") as fh:
            rows = [json.loads(line) for line in fh]
        rows = sorted((r for r in rows if r["topics"]), key=lambda r: (r["date"], r["id"]))
        corpora["reuters"] = [r["title"] + "\n" + r["body"] for r in rows[:3000]]
    for name, texts in corpora.items():
        det = Detector(  # the instances of earlier runs: k = 100, tf, 5-term seeds, lambda = 0.1
            StreamingTfidf(**INSTANCE_FEATURES),
            OnlineL1NoveltyDetector(**INSTANCE_MODEL),
            warmup_docs=1000,
        )
        det.process_window(texts[:1000])
        det.process_window(texts[1000:2000])
        P = det.features.partial_fit_transform(texts[2000:])
        det.model.remap_features(det.features.kept_rows_, det.features.n_new_)
        A = det.model.components_.astype(np.float64)
        P_win = sp.csc_matrix(P, dtype=np.float64)  # one window of 1,000 documents
        P = P_win[:, :n_lp]
        for lam in (0.01, 0.05, 0.1, 0.3):
            t0 = time.perf_counter()
            ref = np.array([highs(P[:, j].toarray().ravel(), A, lam) for j in range(n_lp)])
            t_highs = time.perf_counter() - t0
            res = l1_sparse_code(P_win, A, lam, tol=1e-3)
            t_win = median_time(
                lambda W=P_win, A=A, lam=lam: l1_sparse_code(W, A, lam, tol=1e-3), 3
            )
            t_ours = median_time(lambda P=P, A=A, lam=lam: l1_sparse_code(P, A, lam, tol=1e-3), 3)
            admm = l1_sparse_code(P_win, A, lam, tol=1e-3, polish_after=None)
            t_admm = median_time(
                lambda W=P_win, A=A, lam=lam: l1_sparse_code(
                    W, A, lam, tol=1e-3, polish_after=None
                ),
                3,
            )
            rel_admm = (admm.objective[:n_lp] - ref) / np.maximum(ref, 1e-12)
            res_objective = res.objective[:n_lp]
            rel = (res_objective - ref) / np.maximum(ref, 1e-12)
            t_dense, obj_dense = {}, {}
            for dt in (np.float64, np.float32):
                sub = P[:, :20]
                t0 = time.perf_counter()
                X = l1_sparse_code_dense(sub, A.astype(dt), lam, max_iter=300, tol=1e-6, dtype=dt)
                t_dense[np.dtype(dt).name] = (time.perf_counter() - t0) / 20
                o, _ = l1_objective(sub, A, X.T, lam)
                obj_dense[np.dtype(dt).name] = float(np.max((o - ref[:20]) / ref[:20]))
            out[f"{name}/lam={lam}"] = {
                "m": int(A.shape[0]),
                "k": int(A.shape[1]),
                "n_docs": n_lp,
                "highs_ms_per_doc": 1e3 * t_highs / n_lp,
                "ours_ms_per_doc_in_window_batch": 1e3 * t_win / P_win.shape[1],
                "ours_ms_per_doc_lp_docs_only": 1e3 * t_ours / n_lp,
                "speedup_vs_highs": (t_highs / n_lp) / (t_win / P_win.shape[1]),
                "admm_only_ms_per_doc_in_window_batch": 1e3 * t_admm / P_win.shape[1],
                "admm_only_speedup_vs_highs": (t_highs / n_lp) / (t_admm / P_win.shape[1]),
                "admm_only_max_rel_objective_gap": float(rel_admm.max()),
                "admm_only_iterations": int(admm.n_iter),
                "polished_docs": int(res.n_polished),
                "speedup_vs_highs_lp_docs_only": t_highs / t_ours,
                "max_rel_objective_gap": float(rel.max()),
                "min_rel_objective_gap": float(rel.min()),
                "screened": int(res.n_screened),
                "dense_admm_ms_per_doc": {k: 1e3 * v for k, v in t_dense.items()},
                "dense_admm_300it_max_rel_gap": obj_dense,
                "speedup_vs_dense64": t_dense["float64"] / (t_win / P_win.shape[1]),
            }
            print(name, lam, json.dumps(out[f"{name}/lam={lam}"]), flush=True)
    return out


# ---------------------------------------------------------------- (b) throughput
def dictionary_learning_peer(window: int) -> MiniBatchDictionaryLearning:
    """scikit-learn's MiniBatchDictionaryLearning as the issue's peer: k = 100, positive code and
    dictionary, coordinate descent, lasso_cd coding, one window per batch."""
    return MiniBatchDictionaryLearning(
        n_components=100,
        alpha=0.1,
        transform_alpha=0.1,
        positive_code=True,
        positive_dict=True,
        fit_algorithm="cd",
        transform_algorithm="lasso_cd",
        batch_size=window,
        random_state=0,
    )


def _timed_windows(model, step, inputs: list, docs_per_window: int) -> dict:
    """Median seconds of ``step(model, x)`` over ``inputs`` (one window each), as documents/s."""
    seconds = []
    for x in inputs:
        t0 = time.perf_counter()
        step(model, x)
        seconds.append(time.perf_counter() - t0)
    median = float(np.median(seconds))
    return {"docs_per_s": docs_per_window / median, "median_window_s": median}


def _naive_dense_l1(Xs: list, slice_n: int, dtype: type) -> dict:
    """Dense Algorithm 5 coding of a ``slice_n``-document slice of one window (300 iterations),
    then one OIADMM step: the issue's naive peer."""
    model = OnlineL1NoveltyDetector(**INSTANCE_MODEL, dtype=dtype).fit(Xs[0])

    def step(est, X):
        P = X[:slice_n].T
        codes = l1_sparse_code_dense(
            P, est.components_, est.lam, max_iter=300, tol=1e-6, dtype=dtype
        )
        est.oiadmm_.partial_fit(sp.csc_matrix(P, dtype=dtype), sp.csr_matrix(codes))

    out = _timed_windows(model, step, Xs[1:2], slice_n)
    return {**out, "note": f"{slice_n}-document slice per window, 300 iterations"}


def part_b(quick: bool) -> dict:
    """Tweet-length documents at k = 100, m = 6,000: ours (matrices and the Detector end to end)
    against MiniBatchDictionaryLearning, MiniBatchNMF and a naive dense l1 ADMM, same windows."""
    n_win = 4 if quick else 8
    win = 1000
    texts = tweet_stream(win * (n_win + 1), seed=2)
    windows = [texts[i * win : (i + 1) * win] for i in range(n_win + 1)]
    feats = StreamingTfidf(**{**DEFAULT_FEATURES, "max_features": 6000})
    for w in windows:
        feats.partial_fit(w)
    Xs = [sp.csr_matrix(feats.transform(w).T) for w in windows]  # fixed vocabulary, m = 6000
    m = Xs[0].shape[1]
    res: dict[str, dict] = {}

    def ours_step(est, X):
        r = est.code(X)
        est.flag_novel(r.objective)
        est.partial_fit(X, codes=r.codes, scores=r.objective)

    ours = OnlineL1NoveltyDetector(**INSTANCE_MODEL).fit(Xs[0])
    res["online_l1 (matrices)"] = _timed_windows(ours, ours_step, Xs[1:], win)

    detector = Detector(
        StreamingTfidf(**{**DEFAULT_FEATURES, "max_features": 6000}), warmup_docs=win
    )
    detector.process_window(windows[0])
    res["online_l1 Detector (raw text, end to end)"] = _timed_windows(
        detector, lambda d, w: d.process_window(w), windows[1:], win
    )

    def mbdl_step(mb, X):
        D = X.toarray()
        mb.transform(D)
        mb.partial_fit(D)

    mbdl = dictionary_learning_peer(win).partial_fit(Xs[0].toarray())
    res["MiniBatchDictionaryLearning"] = _timed_windows(mbdl, mbdl_step, Xs[1:], win)

    def nmf_step(nmf, X):
        nmf.transform(X)
        nmf.partial_fit(X)

    nmf = MiniBatchNMF(n_components=100, batch_size=win, random_state=0, max_iter=1)
    res["MiniBatchNMF"] = _timed_windows(nmf.partial_fit(Xs[0]), nmf_step, Xs[1:], win)

    for dt in (np.float64, np.float32):
        res[f"naive dense l1 ADMM {np.dtype(dt).name}"] = _naive_dense_l1(
            Xs, 50 if quick else 100, dt
        )
    for name, row in res.items():
        print(name, row, flush=True)
    ref = res["MiniBatchDictionaryLearning"]["docs_per_s"]
    for v in res.values():
        v["ratio_vs_MiniBatchDictionaryLearning"] = v["docs_per_s"] / ref
    return {"m": int(m), "k": 100, "window": win, "windows_timed": n_win, "methods": res}


# ---------------------------------------------------------------- (r) large vocabulary
def part_r(quick: bool) -> dict:
    """The default Detector end to end on Reuters-21578 (topic-labelled stories in date order, as
    the offline evaluation feeds them): a 1,000-story warm-up, then windows of 1,000 while the
    vocabulary grows to its 20,000-term cap (tweets in part (b) stay near 6,000). Baseline in the
    same run: MiniBatchDictionaryLearning as in part (b) on the same windows' TF-IDF (the default
    features, vocabulary fixed after the last window)."""
    win, n_win = 1000, 3 if quick else 7
    texts = [d["text"] for d in load_reuters(DATA / "reuters21578.jsonl.gz")]
    windows = [texts[i * win : (i + 1) * win] for i in range(n_win + 1)]
    det = Detector()
    t0 = time.perf_counter()
    det.process_window(windows[0])
    warmup_s = time.perf_counter() - t0
    steps = []
    for w in windows[1:]:
        t0 = time.perf_counter()
        r = det.process_window(w)
        steps.append({"seconds": time.perf_counter() - t0, "terms": r.n_terms, "atoms": r.n_atoms})
        print("detector", steps[-1], flush=True)
    feats = StreamingTfidf(**DEFAULT_FEATURES)
    for w in windows:
        feats.partial_fit(w)
    Xs = [sp.csr_matrix(feats.transform(w).T).toarray() for w in windows]
    mb = dictionary_learning_peer(win).partial_fit(Xs[0])
    mb_s = []
    for X in Xs[1:]:
        t0 = time.perf_counter()
        mb.transform(X)
        mb.partial_fit(X)
        mb_s.append(time.perf_counter() - t0)
    det_median = float(np.median([s["seconds"] for s in steps]))
    mb_median = float(np.median(mb_s))
    out = {
        "warmup_s": warmup_s,
        "detector_steps": steps,
        "detector_docs_per_s": win / det_median,
        "MiniBatchDictionaryLearning_m": int(Xs[0].shape[1]),
        "MiniBatchDictionaryLearning_window_s": mb_s,
        "MiniBatchDictionaryLearning_docs_per_s": win / mb_median,
        "ratio_vs_MiniBatchDictionaryLearning": mb_median / det_median,
    }
    print({k: v for k, v in out.items() if not isinstance(v, list)}, flush=True)
    return out


# ---------------------------------------------------------------- (c) memory
def stream_rss(n_docs: int) -> dict:
    """Run the end-to-end Detector over ``n_docs`` tweets in windows of 1,000; report RSS. The
    novelty model is the product's default (``build_models``: growing dictionary, up to 1,500
    atoms); the vocabulary is capped at 6,000 terms so that eviction runs all the time."""
    model = build_models(Config().detector).detector.model
    det = Detector(
        StreamingTfidf(**{**DEFAULT_FEATURES, "max_features": 6000}), model=model, warmup_docs=1000
    )
    chunk = 10000
    for s in range(0, n_docs, chunk):
        texts = tweet_stream(chunk, seed=100 + s // chunk)
        for i in range(0, chunk, 1000):
            det.process_window(texts[i : i + 1000])
    return {
        "n_docs": n_docs,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "vocabulary": det.features.n_features_,
        "atoms": det.model.components_.shape[1],
    }


def part_c(quick: bool) -> dict:
    base = 10000 if quick else 20000
    out = {}
    for n in (base, 10 * base):
        cmd = [sys.executable, __file__, "--rss", str(n)]
        out[str(n)] = json.loads(
            subprocess.run(cmd, capture_output=True, text=True, check=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        print(out[str(n)], flush=True)
    a, b = out[str(base)]["peak_rss_mb"], out[str(10 * base)]["peak_rss_mb"]
    out["ratio_10x_over_1x"] = b / a
    return out


# ---------------------------------------------------------------- (s) Reuters AUC sanity check
SANITY_VARIANTS: dict[str, tuple[dict, dict]] = {
    "defaults": ({}, {}),
    "defaults with 100 initial atoms (the default until 2026-11)": ({}, {"n_components": 100}),
    "defaults, exemplar atoms without alternating minimisation": ({}, {"n_init_iter": 0}),
    "defaults without growth": ({}, {"grow_threshold": None}),
    "seed literal (TF-IDF, all terms, whole-document atoms, k=200, Eq. (3), lam=0.1)": (
        {"max_terms_per_doc": None, "past_idf": False},
        {
            "n_components": 200,
            "atom_terms": None,
            "lam": 0.1,
            "over_weight": 1.0,
            "score_margin": False,
            "grow_threshold": None,
        },
    ),
}


def part_s(quick: bool) -> dict:
    """Warm up on the first W topic-labelled stories by date, score the next 1,000 (one window);
    novel = none of its topics in the warm-up. AUC of the l1 score and of exact nearest neighbour
    (1 - max cosine to any earlier story, standard TF-IDF)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics import roc_auc_score

    with gzip.open(DATA / "reuters21578.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    rows = sorted((r for r in rows if r["topics"]), key=lambda r: (r["date"], r["id"]))
    texts = [r["title"] + "\n" + r["body"] for r in rows]
    out: dict[str, dict] = {}
    for W in (1000,) if quick else (1000, 500, 300):
        seen = {t for r in rows[:W] for t in r["topics"]}
        y = np.array([not set(r["topics"]) & seen for r in rows[W : W + 1000]])
        vec = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit(texts[:W])
        Xa = vec.transform(texts[: W + 1000])
        S = (Xa[W:] @ Xa.T).toarray()
        S[np.arange(W + 1000)[None, :] >= W + np.arange(1000)[:, None]] = 0  # earlier only
        out[f"W={W}"] = {
            "n_novel": int(y.sum()),
            "nearest_neighbour_auc": float(roc_auc_score(y, 1 - S.max(axis=1))),
        }
        for name, (fp, mp) in SANITY_VARIANTS.items():
            det = Detector(
                StreamingTfidf(**{**DEFAULT_FEATURES, **fp}),
                OnlineL1NoveltyDetector(**mp),
                warmup_docs=W,
            )
            det.process_window(texts[:W])
            t0 = time.perf_counter()
            s = det.process_window(texts[W : W + 1000]).scores
            out[f"W={W}"][name] = {
                "auc": float(roc_auc_score(y, s)),
                "share_ge_0.99": float(np.mean(s >= 0.99)),
                "median_score": float(np.median(s)),
                "window_s": time.perf_counter() - t0,
            }
        print(json.dumps(out[f"W={W}"]), flush=True)
    return out


def plot(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    if "b" in results:
        meth = results["b"]["methods"]
        names = list(meth)
        axes[0].barh(names, [meth[n]["docs_per_s"] for n in names])
        axes[0].set_xscale("log")
        axes[0].set_xlabel("documents / s (log)")
        axes[0].set_title("scoring + update, tweets, k=100, m=6000")
    if "a" in results:
        keys = list(results["a"])
        axes[1].barh(keys, [results["a"][k]["speedup_vs_highs"] for k in keys])
        axes[1].set_xscale("log")
        axes[1].set_xlabel("speed-up vs HiGHS at equal objective (log)")
    fig.tight_layout()
    fig.savefig(RESULTS / "novelty_speed.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", default="all", choices=["a", "b", "c", "s", "r", "all"])
    ap.add_argument("--rss", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss:
        print(json.dumps(stream_rss(args.rss)))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS / "novelty_speed.json"
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    parts = "abc" if args.part == "all" else args.part  # "s" and "r" only when asked for
    for p in parts:
        run = {"a": part_a, "b": part_b, "c": part_c, "s": part_s, "r": part_r}[p]
        results[p] = run(args.quick)
    results["machine"] = "2 cores, shared with other jobs; medians of repeated runs"
    out_path.write_text(json.dumps(results, indent=2))
    plot(results)


if __name__ == "__main__":
    main()
