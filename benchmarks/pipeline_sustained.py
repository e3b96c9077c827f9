"""Sustained replay through the detector worker: is resident memory and window latency flat?

One long synthetic tweet stream (two streams, 30 s apart on average: ``--documents`` 120,000 span
about 500 hours of event time per stream and would take an hour to arrive at 33 documents/s) goes
through Kafka, the detector worker and SQLite as fast as they go (each stream ending with its
end-of-stream marker; one BLAS thread, as ``sparsewatch run``). Resident memory (the worker's
process plus its writer process) is sampled every 0.5 s and every window's latency (close to
committed) is kept; the first and last fifths are compared, as is the second fifth (after the
capped model state has filled up) with the last.

    python benchmarks/pipeline_sustained.py --documents 120000
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import matplotlib
import numpy as np
from pipeline_throughput import RESULTS, _documents, broker_bootstrap, run_pipeline
from threadpoolctl import threadpool_limits

from sparsewatch.config import Config

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _fifths(values: list[float]) -> list[float]:
    return [float(np.median(part)) for part in np.array_split(np.asarray(values), 5)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=120_000)
    parser.add_argument("--checkpoint-every", type=int, default=Config().windows.checkpoint_every)
    args = parser.parse_args()
    docs = _documents(args.documents)
    tmp = Path(tempfile.mkdtemp(prefix="sw-sustained-"))
    # What ``sparsewatch run`` does (``blas_threads``), as in pipeline_throughput's runs.
    blas = threadpool_limits(limits=Config().blas_threads or None, user_api="blas")
    with broker_bootstrap(tmp / "kafka") as bootstrap, blas:
        run = run_pipeline(
            bootstrap, docs, f"sqlite:///{tmp / 'sustained.db'}", args.checkpoint_every, True
        )
    rss = [m for t, m in run.pop("rss_samples_mb") if 0 <= t <= run["seconds"]]
    lat = run.pop("window_latencies_s")
    rss5, lat5 = _fifths(rss), _fifths(lat)
    result = {
        "documents": len(docs),
        "checkpoint_every": args.checkpoint_every,
        **run,
        "rss_median_per_fifth_mb": rss5,
        "latency_median_per_fifth_s": lat5,
        "rss_last_vs_first_fifth": rss5[-1] / rss5[0] - 1.0,
        "rss_last_vs_second_fifth": rss5[-1] / rss5[1] - 1.0,
        "latency_last_vs_first_fifth": lat5[-1] / lat5[0] - 1.0,
        "latency_last_vs_second_fifth": lat5[-1] / lat5[1] - 1.0,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pipeline_sustained.json").write_text(json.dumps(result, indent=2) + "\n")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=False)
    ax1.plot(np.arange(len(rss)) * 0.5, rss)
    ax1.set_xlabel("seconds since the first message")
    ax1.set_ylabel("RSS (MB)")
    ax1.set_ylim(0, max(rss) * 1.1)
    ax2.plot(lat, ".", markersize=3)
    ax2.set_xlabel("window (in commit order)")
    ax2.set_ylabel("latency close to commit (s)")
    fig.suptitle(f"detector worker, {len(docs):,} documents, Kafka + SQLite")
    fig.tight_layout()
    fig.savefig(RESULTS / "pipeline_sustained.png", dpi=110)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
