"""Sustained replay through the detector worker: is resident memory and window latency flat?

One long synthetic tweet stream (two streams, 30 s apart on average: ``--documents`` 120,000 span
about 500 hours of event time per stream and would take an hour to arrive at 33 documents/s) goes
through Kafka, the detector worker and SQLite as fast as they go (each stream ending with its
end-of-stream marker; one BLAS thread, as ``sparsewatch run``). Resident memory (the worker's
process plus its writer process) is sampled every 0.5 s and every window's latency (close to
committed) is kept; the first and last fifths are compared, as is the second fifth with the last.

With ``--warm-documents W`` the measured replay continues a stream whose model has already
filled its caps (dictionary atoms, emerging topics, vocabulary), as a worker does after running
for a while: the first W documents (cut at a window boundary) go through a worker in a separate
process first, unmeasured; the measured worker then starts in this process, restores that
worker's checkpoints and offsets from the database and consumes the next ``--documents``.

    python benchmarks/pipeline_sustained.py --documents 120000
    python benchmarks/pipeline_sustained.py --documents 120000 --warm-documents 120000
    python benchmarks/pipeline_sustained.py --documents 120000 --warm-documents 120000 \
        --initial-atoms 100    # A/B: writes pipeline_sustained_warm_initial100.json/.png
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import matplotlib
import numpy as np
from pipeline_throughput import (
    DETECTOR_ENV,
    RESULTS,
    _config,
    _documents,
    _isolated,
    broker_bootstrap,
    run_pipeline,
)
from sparsewatch.consumers.detector_worker import window_spec
from sparsewatch.storage.store import Store

from sparsewatch.config import Config
from sparsewatch.runtime import worker_process

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def fifths(values: Sequence[float]) -> list[float]:
    """Medians of the five consecutive fifths of ``values`` (fewer parts for fewer values)."""
    parts = np.array_split(np.asarray(values, dtype=np.float64), min(5, max(len(values), 1)))
    return [float(np.median(part)) for part in parts]


def _split_warm(docs: list[dict], n_warm: int) -> tuple[list[dict], list[dict]]:
    """The time-ordered ``docs`` cut at the window boundary nearest after the first ``n_warm``:
    the unmeasured replay closes its last windows whole (by the idle timeout), and the measured
    one starts with a new window rather than with late documents."""
    if n_warm == 0:
        return [], docs
    size_ms = int(window_spec(_config("unused", "unused", "sqlite://", 1)).size_ms or 0)

    def ms(doc: dict) -> int:
        return int(datetime.fromisoformat(doc["timestamp"]).timestamp() * 1000)

    cut = (ms(docs[n_warm - 1]) // size_ms + 1) * size_ms
    n = sum(1 for d in docs if ms(d) < cut)
    return docs[:n], docs[n:]


def core_times(db_url: str, n_windows: int) -> dict[str, list[float]]:
    """Per window of the measured run (its last ``n_windows`` windows, by event time), the
    seconds ``process_window`` spent on novelty and on topics, as the worker stored them."""
    store = Store.open(db_url)
    try:
        rows = sorted(store.windows(limit=None), key=lambda w: (w["end_time"], w["stream"]))
    finally:
        store.dispose()
    rows = rows[-n_windows:]
    novelty = [float(w["timings"]["novelty_s"]) for w in rows]
    topics = [float(w["timings"]["topics_s"]) for w in rows]
    return {
        "core": [a + b for a, b in zip(novelty, topics, strict=True)],
        "novelty": novelty,
        "topics": topics,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=120_000)
    parser.add_argument("--checkpoint-every", type=int, default=Config().windows.checkpoint_every)
    parser.add_argument(
        "--warm-documents",
        type=int,
        default=0,
        help="documents replayed (unmeasured, by another worker process) before the measured ones",
    )
    parser.add_argument(
        "--initial-atoms",
        type=int,
        default=None,
        help="detector.initial_atoms for both workers (default: the configuration's); for A/Bs",
    )
    args = parser.parse_args()
    if args.documents <= 0 or args.warm_documents < 0:
        parser.error("--documents must be positive and --warm-documents non-negative")
    if args.initial_atoms is not None and args.initial_atoms < 1:
        parser.error("--initial-atoms must be positive")
    detector_env = (
        {"SPARSEWATCH_DETECTOR_INITIAL_ATOMS": str(args.initial_atoms)}
        if args.initial_atoms is not None
        else {}
    )
    DETECTOR_ENV.update(detector_env)  # the measured worker runs in this process
    warm, docs = _split_warm(_documents(args.warm_documents + args.documents), args.warm_documents)
    tmp = Path(tempfile.mkdtemp(prefix="sw-sustained-"))
    db_url = f"sqlite:///{tmp / 'sustained.db'}"
    prefix = f"sustained-{uuid.uuid4().hex[:8]}"
    # What ``sparsewatch run`` does (BLAS threads, garbage collector), as in pipeline_throughput.
    config = Config()
    runtime = worker_process(config.blas_threads, config.gc_threshold)
    with broker_bootstrap(tmp / "kafka") as bootstrap, runtime:
        warm_run = (
            _isolated(
                detector_env,
                run_pipeline,
                bootstrap,
                warm,
                db_url,
                args.checkpoint_every,
                False,
                False,
                prefix,
            )
            if warm
            else None
        )
        run = run_pipeline(bootstrap, docs, db_url, args.checkpoint_every, True, True, prefix)
    rss = [m for t, m in run.pop("rss_samples_mb") if 0 <= t <= run["seconds"]]
    lat = run.pop("window_latencies_s")
    rss5, lat5 = fifths(rss), fifths(lat)
    parts = core_times(db_url, len(lat))
    result = {
        "documents": len(docs),
        "warm_documents": len(warm),
        "warm_run": warm_run and {k: warm_run[k] for k in ("seconds", "windows", "docs_per_s")},
        "checkpoint_every": args.checkpoint_every,
        **run,
        "rss_median_per_fifth_mb": rss5,
        "latency_median_per_fifth_s": lat5,
        "rss_last_vs_first_fifth": rss5[-1] / rss5[0] - 1.0,
        "rss_last_vs_second_fifth": rss5[-1] / rss5[1] - 1.0,
        "latency_last_vs_first_fifth": lat5[-1] / lat5[0] - 1.0,
        "latency_last_vs_second_fifth": lat5[-1] / lat5[1] - 1.0,
        # the per-window core's share of the latency (process_window: novelty, then topics)
        **{f"{name}_median_per_fifth_s": fifths(values) for name, values in parts.items()},
        "core_last_vs_first_fifth": fifths(parts["core"])[-1] / fifths(parts["core"])[0] - 1.0,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "pipeline_sustained" + ("_warm" if warm else "")
    if args.initial_atoms is not None:
        name += f"_initial{args.initial_atoms}"
        result["initial_atoms"] = args.initial_atoms
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=False)
    ax1.plot(np.arange(len(rss)) * 0.5, rss)
    ax1.set_xlabel("seconds since the first message")
    ax1.set_ylabel("RSS (MB)")
    ax1.set_ylim(0, max(rss) * 1.1)
    ax2.plot(lat, ".", markersize=3)
    ax2.set_xlabel("window (in commit order)")
    ax2.set_ylabel("latency close to commit (s)")
    after = f", after {len(warm):,} (model filled)" if warm else ", cold start"
    fig.suptitle(f"detector worker, {len(docs):,} documents{after}, Kafka + SQLite")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
