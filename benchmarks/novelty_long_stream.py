"""Novelty quality and per-step cost over a long stream, by the detector's dictionary cap.

The offline evaluation (``novelty_quality.py``) runs 7 steps of 1,000 documents, too short for
the product detector's dictionary to reach its cap (``max_components``, 1,500 atoms): the cap
only matters on long streams, where it bounds memory and the cost of a window, and where the
least recently used atoms give way to new ones. This benchmark runs the same protocol (1,000
warm-up documents, steps of 1,000, every method scores a step before learning it) over the
stream of the sustained pipeline benchmark (``pipeline_sustained.py``: the synthetic tweet
stream ``alpha``, seed 21, 60,000 documents = 59 steps) for the default detector under several
caps and for both nearest-neighbour peers, all on the same steps in one run (one BLAS thread).

    python benchmarks/novelty_long_stream.py                      # caps 600, 900, 1500, 3000
    python benchmarks/novelty_long_stream.py --documents 20000 --caps 600,1500   # quicker

Writes ``benchmarks/results/novelty_long_stream.json`` and ``.png`` (per-step time and atoms).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
import scipy.sparse as sp
from pipeline_sustained import fifths
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.window_detector import Detector
from sparsewatch.replay.eval_methods import DetectorMethod, SharedTfidf, build_methods
from sparsewatch.replay.evaluate import evaluate_corpus, make_corpus, to_json
from sparsewatch.replay.synthetic import generate_stream
from threadpoolctl import threadpool_limits

matplotlib.use("Agg")
import matplotlib.pyplot as plt

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_CAP = OnlineL1NoveltyDetector().max_components


class CappedDetector(DetectorMethod):
    """The default :class:`Detector` with another dictionary cap; records the atoms per step."""

    def __init__(self, cap: int) -> None:
        super().__init__(Detector(model=OnlineL1NoveltyDetector(max_components=cap)))
        self.cap = cap
        self.atoms: list[int] = []

    def step(self, X: sp.csr_matrix | None, texts: Sequence[str]) -> np.ndarray:
        scores = super().step(X, texts)
        self.atoms.append(int(self.detector.model.components_.shape[1]))
        return scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--documents", type=int, default=60000)
    ap.add_argument("--caps", default="600,900,1500,3000", help="comma-separated dictionary caps")
    ap.add_argument("--seed", type=int, default=21)
    args = ap.parse_args()
    caps = [int(c) for c in args.caps.split(",")]
    docs = generate_stream(args.documents, kind="tweet", stream="alpha", seed=args.seed)
    corpus = make_corpus("long-tweets", docs, 1000, 1000)
    capped = {
        f"detector, cap {c}" + (" (default)" if c == DEFAULT_CAP else ""): CappedDetector(c)
        for c in caps
    }
    methods = {**capped, **build_methods(["nn-exact", "nn-lsh"])}
    t0 = time.perf_counter()
    with threadpool_limits(1):
        result = to_json(evaluate_corpus(corpus, methods, SharedTfidf(), progress=print))
    out = {
        "command": "python benchmarks/novelty_long_stream.py "
        f"--documents {args.documents} --caps {args.caps} --seed {args.seed}",
        "machine": f"{platform.machine()}, 2 cores; python {platform.python_version()}",
        "wall_time_s": time.perf_counter() - t0,
        "n_steps": corpus.n_steps,
        "methods": {},
    }
    for name, r in result["methods"].items():
        row = {
            "stratified_auc_none": r["stratified_auc_none"],
            "stratified_auc_none_se": r["stratified_auc_none_se"],
            "stratified_auc_any": r["stratified_auc_any"],
            "stratified_auc_any_se": r["stratified_auc_any_se"],
            "pooled_auc_none": r["pooled_auc_none"],
            "pooled_auc_none_se": r["pooled_auc_none_se"],
            "pooled_auc_any": r["pooled_auc_any"],
            "pooled_auc_any_se": r["pooled_auc_any_se"],
            "auc_none": r["auc_none"],
            "auc_any": r["auc_any"],
            "step_time_s": r["time_s"],
            "step_time_fifths_median_s": fifths(r["time_s"]),
            "total_time_s": float(np.sum(r["time_s"])),
        }
        if name in capped:
            row["atoms"] = capped[name].atoms
            row["steps_to_cap"] = next(
                (i + 1 for i, k in enumerate(capped[name].atoms) if k >= capped[name].cap), None
            )
        out["methods"][name] = row
        print(
            f"{name}: AUC stratified {row['stratified_auc_none']:.4f} / "
            f"{row['stratified_auc_any']:.4f}, pooled {row['pooled_auc_none']:.4f} / "
            f"{row['pooled_auc_any']:.4f}, "
            f"step s by fifth {[round(x, 3) for x in row['step_time_fifths_median_s']]}"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "novelty_long_stream.json").write_text(json.dumps(out, indent=1))
    plot(out)


def plot(out: dict) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for name, row in out["methods"].items():
        steps = np.arange(1, len(row["step_time_s"]) + 1)
        label = f"{name} (stratified AUC {row['stratified_auc_none']:.3f})"
        axes[0].plot(steps, row["step_time_s"], label=label, lw=1)
        if "atoms" in row:
            axes[1].plot(steps, row["atoms"], label=name, lw=1)
    axes[0].set_xlabel("step (1,000 documents)")
    axes[0].set_ylabel("seconds per step (score + learn)")
    axes[0].set_title("cost per step over the stream")
    axes[0].legend(fontsize=7)
    axes[1].set_xlabel("step (1,000 documents)")
    axes[1].set_ylabel("dictionary atoms after the step")
    axes[1].set_title("dictionary fill")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "novelty_long_stream.png", dpi=110)


if __name__ == "__main__":
    main()
