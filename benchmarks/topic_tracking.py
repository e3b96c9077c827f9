"""Do the worker's MOR-NMF topics follow the stories of a drifting stream?

The detector core (the product's configuration, emerging topics off) runs over the synthetic tweet
stream of ``benchmarks/emerging_topics.py`` (stream ``alpha``, seed 21: stories born between 5%
and 90% of the stream). A topic names the story with the most own words among its 8 top terms (at
least 2; own words as in that benchmark). Per window:

* tagged: the share of documents whose dominant topic names one of their own stories;
* covered: the share of the window's large stories (30 documents or more) some topic names.

Against the same for ``detector.topic_reseeds_per_window`` = 0 (MOR-NMF as published) and, as a
reference that is not a streaming method, scikit-learn's batch NMF (same rank, NNDSVDa) fitted
afresh on each window's TF-IDF rows.

    python benchmarks/topic_tracking.py --reseeds 0,1,2

Writes ``benchmarks/results/topic_tracking.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from emerging_topics import own_words
from pipeline_throughput import _config, closed_windows
from sklearn.decomposition import NMF
from sklearn.exceptions import ConvergenceWarning
from sparsewatch.consumers.detector_core import build_models, process_window
from sparsewatch.replay.synthetic import generate_stream
from threadpoolctl import threadpool_limits

RESULTS = Path(__file__).resolve().parent / "results"


def name(terms: list[str], own: dict[str, set[str]]) -> str | None:
    hits = {s: len(own[s].intersection(terms)) for s in own}
    best = max(hits, key=lambda s: (hits[s], s))
    return best if hits[best] >= 2 else None


def scores(labels: list[list[str]], dominant: np.ndarray, names: dict[int, str | None]) -> tuple:
    tagged = sum(1 for ls, d in zip(labels, dominant, strict=True) if d >= 0 and names[d] in ls)
    live = Counter(label for ls in labels for label in ls)
    large = {s for s, n in live.items() if n >= 30}
    covered = len(set(names.values()) & large) / len(large) if large else None
    return tagged / len(labels), covered


def run(docs: list[dict], reseeds: int | None) -> dict:
    """One pass; ``reseeds`` None: batch NMF per window on the detector's features."""
    config = _config("unused", "unused", "sqlite://", 10)
    config.detector.emerging_topics = False
    config.detector.topic_reseeds_per_window = reseeds or 0
    closed = closed_windows(docs, config, "alpha")
    models = build_models(config.detector)
    own = own_words(docs)
    rows, topic_s = [], 0.0
    for w in closed:
        out = process_window(models, w, config.detector)
        topic_s += out.timings["topics_s"]
        if not out.topics:
            continue
        labels = [docs[b.offset]["labels"] for b in w.items]
        if reseeds is None:
            features = models.detector.features
            X = sp.csr_matrix(features.transform([b.doc.text for b in w.items]).T)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                nmf = NMF(config.detector.n_topics, init="nndsvda", max_iter=200, random_state=0)
                codes = nmf.fit_transform(X)
            names = {
                t: name([str(features.terms_[j]) for j in np.argsort(-c)[:8]], own)
                for t, c in enumerate(nmf.components_)
            }
            dominant = np.where(codes.max(axis=1) > 0, codes.argmax(axis=1), -1)
        else:
            names = {r["topic_id"]: name([t for t, _ in r["terms"]], own) for r in out.topics}
            dominant = out.documents.dominant_topic
        rows.append(scores(labels, dominant, names))
    tagged = [t for t, _ in rows]
    covered = [c for _, c in rows if c is not None]
    half = len(tagged) // 2
    return {
        "method": "batch NMF per window" if reseeds is None else f"MOR-NMF, {reseeds} reseeds",
        "reseeds_per_window": reseeds,
        "windows": len(rows),
        "tagged_mean": float(np.mean(tagged)),
        "tagged_mean_second_half": float(np.mean(tagged[half:])),
        "covered_mean": float(np.mean(covered)),
        "tagged": tagged,
        "covered": [c for _, c in rows],
        "topic_model_s": topic_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--documents", type=int, default=30000)
    ap.add_argument("--reseeds", default="0,1,2", help="topic_reseeds_per_window values")
    ap.add_argument("--seed", type=int, default=21)
    args = ap.parse_args()
    docs = generate_stream(args.documents, kind="tweet", stream="alpha", seed=args.seed)
    docs.sort(key=lambda d: d["timestamp"])
    out = {
        "command": f"python benchmarks/topic_tracking.py --documents {args.documents} "
        f"--reseeds {args.reseeds} --seed {args.seed}",
        "machine": f"{platform.machine()}, 2 cores; python {platform.python_version()}",
        "runs": [],
    }
    with threadpool_limits(1):
        for reseeds in [*(int(x) for x in args.reseeds.split(",")), None]:
            t0 = time.perf_counter()
            res = run(docs, reseeds)
            out["runs"].append(res)
            print(
                f"{res['method']}: documents tagged with their story {res['tagged_mean']:.3f} "
                f"(second half {res['tagged_mean_second_half']:.3f}), large stories covered "
                f"{res['covered_mean']:.3f}; {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "topic_tracking.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
