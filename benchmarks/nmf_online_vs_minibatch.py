"""Objective against CPU time: OR-/WOR-NMF (chunk form) and MOR-NMF vs sklearn MiniBatchNMF.

Same data, rank, initialisation (NNDSVDa of the whole matrix, sklearn's own), mini-batches and
batch order for every method. Clocked: only the ``partial_fit`` calls (``time.process_time``,
BLAS limited to one thread so CPU time is wall time of one core). Off the clock, after every
batch: the objective ``1/2 ||X - H W^T||_F^2 / n`` on a fixed evaluation sample, with ``H`` the
exact NNLS coefficients (block principal pivoting) for each method's bases, so all methods are
scored by the same yardstick. Reported per data set and number of passes: each method's final
objective, CPU time and time per step, and the CPU time each online-RSA method needs to reach
MiniBatchNMF's final objective, as a ratio to MiniBatchNMF's total time measured in the same
repetition (the issue's target is <= 0.5 for OR-NMF); medians over repetitions.

A diagnostic row (Reuters only, one repetition, not a contender) minimises OR-NMF's surrogate
exactly at every step: the best any step rule could do with OR-NMF's summed statistics.

Usage: python benchmarks/nmf_online_vs_minibatch.py [--epochs 1,2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import MiniBatchNMF
from sklearn.decomposition._nmf import _initialize_nmf
from sklearn.feature_extraction.text import TfidfVectorizer
from sparsewatch.models.nmf_online import MORNMF, ORNMF
from sparsewatch.models.nnls import solve_nnls
from sparsewatch.models.projections import project_simplex
from threadpoolctl import threadpool_limits

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results"
Matrix = np.ndarray | sp.csr_matrix


def reuters_tfidf() -> sp.csr_matrix:
    """TF-IDF (l2 rows) of every Reuters-21578 story with a non-empty title or body."""
    with gzip.open(DATA / "reuters21578.jsonl.gz", "rt", encoding="utf-8") as fh:
        texts = [f"{d.get('title') or ''} {d.get('body') or ''}" for d in map(json.loads, fh)]
    texts = [t for t in texts if t.strip()]
    vec = TfidfVectorizer(min_df=5, max_df=0.5, stop_words="english", dtype=np.float64)
    return vec.fit_transform(texts).tocsr()


def planted_dense(n: int = 6000, m: int = 400, r: int = 20, seed: int = 0) -> np.ndarray:
    """Planted rank-``r`` non-negative matrix with 5% uniform noise (dense)."""
    rng = np.random.default_rng(seed)
    W0 = rng.random((m, r)) ** 4
    H0 = rng.random((n, r)) * (rng.random((n, r)) < 0.3)
    X = H0 @ W0.T
    return X + 0.05 * X.std() * rng.random((n, m))


def objective(X: Matrix, bases: np.ndarray) -> float:
    """``1/2 ||X - H W^T||^2 / n`` with exact NNLS ``H`` for bases ``W`` (``m x r``)."""
    W = bases / np.maximum(bases.sum(axis=0), 1e-300)
    H = solve_nnls(W, np.asarray(X @ W).T).T
    sq = X.multiply(X).sum() if sp.issparse(X) else np.sum(X * X)
    XW = np.asarray(X @ W)
    return 0.5 * (float(sq) - 2 * float(np.sum(XW * H)) + float(np.sum((H.T @ H) * (W.T @ W))))


class ExactSurrogateORNMF(ORNMF):
    """Diagnostic only: OR-NMF whose Algorithm 2 is replaced by an exact minimisation.

    Each step minimises the same surrogate ``f_t`` (statistics summed over the stream) over the
    simplex columns by accelerated projected gradient (300 iterations, step ``1 / ||A_t||``),
    so its objective trace is what OR-NMF's statistics allow whatever the step-size rule.
    """

    def _update_bases_frobenius(self) -> np.ndarray:
        n = max(self._stat_count(), 1)
        A, Bt = self.A_ / n, self.B_.T / n
        L = max(float(np.linalg.eigvalsh(A)[-1]), 1e-300)
        W = Z = self.components_.copy()
        t = 1.0
        for _ in range(300):
            W_new = project_simplex(Z - (A @ Z - Bt) / L, axis=1, method="pivot")
            t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
            Z = W_new + ((t - 1.0) / t_new) * (W_new - W)
            W, t = W_new, t_new
        return W


def run(
    name: str,
    make: Callable[[], Any],
    X: Matrix,
    X_eval: Matrix,
    batches: list[np.ndarray],
    epochs: int,
    W_init: np.ndarray,
    H_init: np.ndarray,
) -> list[tuple[float, float]]:
    """Clock ``partial_fit`` over the batches; objective trace ``(cpu seconds, objective)``."""
    model = make()
    trace = [(0.0, objective(X_eval, W_init) / X_eval.shape[0])]
    cpu = 0.0
    for epoch in range(epochs):
        for i, rows in enumerate(batches):
            Xb = X[rows]
            t0 = time.process_time()
            if name == "MiniBatchNMF" and epoch == i == 0:
                model.partial_fit(Xb, W=H_init[rows], H=W_init.T.copy())
            else:
                model.partial_fit(Xb)
            cpu += time.process_time() - t0
            trace.append((cpu, objective(X_eval, model.components_.T) / X_eval.shape[0]))
    return trace


def time_to_reach(trace: list[tuple[float, float]], target: float) -> float | None:
    for t, f in trace:
        if f <= target:
            return t
    return None


def bench(
    label: str,
    X: Matrix,
    r: int,
    batch_size: int,
    epochs: int,
    repeats: int,
    diagnostic: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """All methods on one data set, ``repeats`` times; medians and ratios to MiniBatchNMF."""
    rng = np.random.default_rng(seed)
    n = X.shape[0]
    eval_rows = np.sort(rng.choice(n, size=min(n, 3000), replace=False))
    X_eval = X[eval_rows]
    H_init, W_t = _initialize_nmf(X, r, init="nndsvda", random_state=seed)
    scale = W_t.sum(axis=1)
    W_init = (W_t / scale[:, None]).T  # m x r, simplex columns
    H_init = H_init * scale[None, :]
    order = rng.permutation(n)
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    horizon = epochs * len(batches)  # a bounded run: T = its number of steps (paper's setting)
    methods = {
        "MiniBatchNMF": lambda: MiniBatchNMF(
            r, init="custom", batch_size=batch_size, random_state=seed, max_iter=epochs
        ),
        "OR-NMF = WOR-NMF (chunk)": lambda: ORNMF(
            r, batch_size=None, horizon=horizon, init=W_init, random_state=seed
        ),
        "MOR-NMF (buffer 10)": lambda: MORNMF(
            r, buffer_size=10, batch_size=None, horizon=horizon, init=W_init, random_state=seed
        ),
    }
    args = (X, X_eval, batches, epochs, W_init, H_init)
    runs: dict[str, list] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, make in methods.items():
            runs[name].append(run(name, make, *args))
    mb_final = float(np.median([tr[-1][1] for tr in runs["MiniBatchNMF"]]))
    mb_times = [tr[-1][0] for tr in runs["MiniBatchNMF"]]
    steps = epochs * len(batches)
    out: dict[str, Any] = {
        "data": label,
        "shape": list(X.shape),
        "rank": r,
        "batch_size": batch_size,
        "epochs": epochs,
        "steps": steps,
        "repeats": repeats,
        "minibatch_final_objective": mb_final,
        "minibatch_cpu_seconds": float(np.median(mb_times)),
        "methods": {},
    }
    for name, traces in runs.items():
        reach = [time_to_reach(tr, mb_final) for tr in traces]
        ratios = [x / t for x, t in zip(reach, mb_times, strict=True) if x is not None]
        step = next((i for i, (_, f) in enumerate(traces[0]) if f <= mb_final), None)
        out["methods"][name] = {
            "final_objective_median": float(np.median([tr[-1][1] for tr in traces])),
            "cpu_seconds_median": float(np.median([tr[-1][0] for tr in traces])),
            "ms_per_step_median": 1e3 * float(np.median([tr[-1][0] for tr in traces])) / steps,
            "time_to_minibatch_final_median": float(np.median([x for x in reach if x]))
            if any(x is not None for x in reach)
            else None,
            "step_reaching_minibatch_final": step,
            "reached_in_runs": len(ratios),
            "ratio_to_minibatch_time_median": float(np.median(ratios)) if ratios else None,
            "ratio_to_minibatch_time_runs": ratios,
            "trace_first_run": traces[0],
        }
    if diagnostic:
        trace = run("exact", lambda: ExactSurrogateORNMF(r, batch_size=None, init=W_init), *args)
        out["diagnostic_exact_surrogate_or_nmf"] = {
            "objective_after_each_pass": [trace[(e + 1) * len(batches)][1] for e in range(epochs)],
            "step_reaching_minibatch_final": next(
                (i for i, (_, f) in enumerate(trace) if f <= mb_final), None
            ),
            "trace": trace,
        }
    return out


def plot(results: list[dict], path: Path) -> None:
    """One panel per data set (columns) and number of passes (rows)."""
    labels = list(dict.fromkeys(res["data"] for res in results))
    rows = len(results) // len(labels)
    fig, axes = plt.subplots(rows, len(labels), figsize=(6 * len(labels), 4 * rows), squeeze=False)
    for k, res in enumerate(results):
        ax = axes[k // len(labels), labels.index(res["data"])]
        for name, m in res["methods"].items():
            t, f = zip(*m["trace_first_run"], strict=True)
            ax.plot(t, f, marker=".", ms=3, label=name)
        target = res["minibatch_final_objective"]
        ax.axhline(target, color="grey", ls=":", lw=1, label="MiniBatchNMF final")
        ax.set_xlabel("CPU seconds (1 thread, partial_fit calls only)")
        ax.set_ylabel("1/2 ||X - H W^T||^2 / n (exact NNLS H)")
        ax.set_title(
            f"{res['data']} {res['shape'][0]}x{res['shape'][1]}, r={res['rank']}, "
            f"{res['epochs']} pass(es), first run",
            fontsize=9,
        )
        if res["data"] == "Reuters TF-IDF":
            ax.set_ylim(0.995 * target, 1.02 * target)
        else:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", default="1,2", help="comma-separated numbers of passes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    load_before = os.getloadavg()
    results = []
    planted, reuters = planted_dense(), reuters_tfidf()
    with threadpool_limits(1):
        for epochs in map(int, args.epochs.split(",")):
            results.append(bench("planted dense", planted, args.rank, 500, epochs, args.repeats))
            results.append(
                bench("Reuters TF-IDF", reuters, args.rank, 1024, epochs, args.repeats, True)
            )
    RESULTS.mkdir(exist_ok=True)
    meta = {"load_average_before": load_before, "load_average_after": os.getloadavg()}
    (RESULTS / "nmf_online_vs_minibatch.json").write_text(
        json.dumps({"machine": meta, "results": results}, indent=1)
    )
    plot(results, RESULTS / "nmf_online_vs_minibatch.png")
    for res in results:
        print(
            f"{res['data']} {res['shape']} passes {res['epochs']}: MiniBatchNMF final "
            f"{res['minibatch_final_objective']:.6g} in {res['minibatch_cpu_seconds']:.3f} s"
        )
        for name, m in res["methods"].items():
            print(
                f"  {name:26s} final {m['final_objective_median']:.6g} "
                f"cpu {m['cpu_seconds_median']:.3f}s ({m['ms_per_step_median']:.1f} ms/step) "
                f"reach {m['time_to_minibatch_final_median']} at step "
                f"{m['step_reaching_minibatch_final']} ratio {m['ratio_to_minibatch_time_median']}"
            )
        if "diagnostic_exact_surrogate_or_nmf" in res:
            d = res["diagnostic_exact_surrogate_or_nmf"]
            print(f"  exact-surrogate OR-NMF per pass {d['objective_after_each_pass']}")
    print("load average before/after", meta)


if __name__ == "__main__":
    main()
