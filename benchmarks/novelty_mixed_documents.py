"""Where the product detector and nearest neighbour part ways: documents that mix a known topic
with one born in their own step (issue 3, quality against the peer).

    python benchmarks/novelty_mixed_documents.py --corpus synthetic-news

Under the issue's novelty rule ``none`` such a document is *not* novel (one of its labels was
seen before); under rule ``any`` it is. The script runs the product's default ``Detector`` and
exact nearest-neighbour first-story detection on the same steps as ``novelty_quality.py`` (same
corpora, same warm-up and steps, same shared features) and reports, per method, the pooled AUC
under rule ``none`` on all evaluated documents, without the mixed documents, and the AUC of the
mixed documents against the other known-topic documents (how far above the known documents the
method ranks them). Writes ``benchmarks/results/novelty_mixed_documents.json``.

It also runs the detector with its documents truncated to their 20 most salient terms
(``detector-20-terms``, the default until session seventeen): the truncation is what put the mixed
documents of the news-length corpus among the wholly new ones (past-idf weighting gives a mixed
document's never-seen words most of its weight, so its 20 heaviest terms are mostly the new
story's, and the known half that an atom would explain is cut away).
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
from novelty_quality import CORPORA, RESULTS, load_corpus
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import DEFAULT_FEATURES, Detector
from sparsewatch.replay.eval_methods import DetectorMethod, SharedTfidf, build_methods
from sparsewatch.replay.evaluate import (
    Corpus,
    evaluate_corpus,
    novelty_labels,
    roc_auc,
    to_json,
)

METHODS = ["detector", "nn-exact"]
TRUNCATED = "detector-20-terms"


def mixed_documents(corpus: Corpus) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the evaluated documents of steps ``1..n`` in step order: their corpus indices, the
    rule-``none`` truth, and whether a known-topic document carries a label first seen in its
    own step (a "mixed" document)."""
    labels: list[Sequence[str]] = [list(d.get("labels", [])) for d in corpus.docs]
    novel, evaluable = novelty_labels(labels, corpus.step_of, "none")
    first: dict[str, int] = {}
    for lab, s in zip(labels, corpus.step_of, strict=True):
        for label in lab:
            if s >= 0:
                first[label] = min(first.get(label, int(s)), int(s))
    in_steps = np.concatenate([corpus.step_indices(s) for s in range(1, corpus.n_steps + 1)])
    index = in_steps[evaluable[in_steps]]
    mixed = np.array(
        [
            not novel[i] and any(first[label] == corpus.step_of[i] for label in labels[i])
            for i in index
        ],
        dtype=bool,
    )
    return index, novel[index], mixed


def run(name: str, steps: int) -> dict[str, Any]:
    corpus = load_corpus(name, steps)
    t0 = time.perf_counter()
    methods = build_methods(METHODS)
    features = StreamingTfidf(**{**DEFAULT_FEATURES, "max_terms_per_doc": 20})
    methods[TRUNCATED] = DetectorMethod(Detector(features=features))
    result = evaluate_corpus(corpus, methods, SharedTfidf())
    pooled = to_json(result)["methods"]
    _, y, mixed = mixed_documents(corpus)
    out: dict[str, Any] = {
        "documents_evaluated": int(y.size),
        "novel": int(y.sum()),
        "mixed": int(mixed.sum()),
        "known_not_mixed": int((~y & ~mixed).sum()),
        "methods": {},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    for method in methods:
        scores = np.concatenate(result["_scores"][method])
        keep = ~mixed
        out["methods"][method] = {
            "pooled_auc_none": pooled[method]["pooled_auc_none"],
            "pooled_auc_any": pooled[method]["pooled_auc_any"],
            "auc_none_all": roc_auc(y, scores),
            "auc_none_without_mixed": roc_auc(y[keep], scores[keep]),
            "auc_mixed_over_known": roc_auc(mixed[~y], scores[~y]),
            "auc_novel_over_mixed": roc_auc(y[y | mixed], scores[y | mixed]),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=[*CORPORA, "all"], default="all")
    parser.add_argument("--steps", type=int, default=7)
    args = parser.parse_args()
    path = RESULTS / "novelty_mixed_documents.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    names = CORPORA if args.corpus == "all" else [args.corpus]
    for name in names:
        saved[name] = run(name, args.steps)
        saved[name]["machine"] = platform.node()
        saved[name]["command"] = f"python benchmarks/novelty_mixed_documents.py --corpus {name}"
        for method, m in saved[name]["methods"].items():
            print(name, method, {k: None if v is None else round(v, 5) for k, v in m.items()})
    Path(path).write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
