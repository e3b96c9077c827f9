"""Memory of one big window through the detector's per-window core, against a baseline commit.

A worker holds a window's documents until the window closes, and then computes it whole, so a
window's close is the peak of a stream's memory, and it grows with the window's size (the
default window is a day). Measured here: what computing the window adds on top of its documents.

For each window size (synthetic tweets, ``generate_stream(seed=0)``), in a fresh process with
one BLAS thread: three windows of 2,000 warm the models up (default detector configuration:
novelty, MOR-NMF topics, dynamic-NMF emerging topics), then the measured window, already built,
goes through :func:`~sparsewatch.consumers.detector_core.process_window`, and its results are
then handed over as the detector worker hands them to its writer process (the write job built and
pickled, the results still held) and written as the writer writes them (the job unpickled, its
calls in one transaction of a fresh SQLite database, its messages encoded but not sent; in the
same process, so that rise is the two processes' together). Reported: the rise of the process's
peak resident memory over its peak before the window (MB, and kB a document) after each of the
three stages, the seconds of each, the pickled job's and the messages' sizes, and the number of
novel flags and emerging-topic alerts (the two versions should agree).
The same cases run on the baseline: the package of ``--baseline REF``, laid out from
``git archive`` in a temporary folder and imported instead of the working tree's.

    python benchmarks/window_memory.py --baseline 88b3c7c   # ~6 min; results/window_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import tracemalloc
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
WARM_WINDOWS, WARM_SIZE = 3, 2000


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Meter:
    """Memory since :meth:`start`: the rise of the process's peak RSS over its peak then (MB), or,
    ``traced``, the peak of the Python and numpy allocations made since (tracemalloc: the same
    in every run, where the RSS peak varies by 10 MB from run to run with the heap's layout)."""

    def __init__(self, traced: bool) -> None:
        self.traced = traced
        self.base = 0.0

    def start(self) -> None:
        if self.traced:
            tracemalloc.start()
        else:
            self.base = _peak_mb()

    def rise_mb(self) -> float:
        if self.traced:
            return tracemalloc.get_traced_memory()[1] / 2**20
        return _peak_mb() - self.base


def _case(n: int, traced: bool) -> dict:
    """One window of ``n`` tweets after the warm-up, in this process."""
    from multiprocessing.reduction import ForkingPickler

    from sparsewatch.consumers.detector_core import build_models, process_window
    from sparsewatch.consumers.detector_worker import _store_calls
    from sparsewatch.consumers.messages import Document
    from sparsewatch.consumers.timestamps import parse_timestamp_ms
    from sparsewatch.consumers.windowing import Buffered, ClosedWindow
    from sparsewatch.consumers.writer import WriteJob
    from sparsewatch.replay.synthetic import generate_stream
    from sparsewatch.storage.store import Store
    from threadpoolctl import threadpool_limits

    import sparsewatch
    from sparsewatch.config import DetectorConfig

    config = DetectorConfig()
    models = build_models(config)
    docs = generate_stream(n_docs=WARM_WINDOWS * WARM_SIZE + n, seed=0)

    def window(seq: int, part: list[dict]) -> ClosedWindow:
        items = [
            Buffered(Document(d["id"], d["text"], parse_timestamp_ms(d["timestamp"])), 0, i)
            for i, d in enumerate(part)
        ]
        times = [b.doc.timestamp_ms for b in items]
        return ClosedWindow("s", seq, min(times), max(times) + 1, items, "count")

    windows = [window(k, docs[k * WARM_SIZE : (k + 1) * WARM_SIZE]) for k in range(WARM_WINDOWS)]
    measured = window(WARM_WINDOWS, docs[WARM_WINDOWS * WARM_SIZE :])
    del docs
    with threadpool_limits(1):
        for w in windows:
            process_window(models, w, config)
        before = _peak_mb()
        meter = _Meter(traced)
        meter.start()
        start = time.perf_counter()
        comp = process_window(models, measured, config)
        seconds = time.perf_counter() - start
    rise = meter.rise_mb()
    # What the worker then does with it: the writer's job, pickled as the process writer sends it
    # (``ProcessWriter.submit``), while the window's results are still held.
    start = time.perf_counter()
    messages = comp.messages or []
    batches = [messages] if hasattr(messages, "codes") else list(messages)  # a baseline: tuples
    job = WriteJob(calls=_store_calls(comp), messages=batches)
    sent = ForkingPickler.dumps(job)
    handover_seconds = time.perf_counter() - start
    handover_rise = meter.rise_mb()
    # ... and what the writer process does with the job (here in the same process, so the rise
    # is the two processes' together): unpickle it, write its calls into a fresh SQLite database
    # in one transaction, encode its messages (not sent).
    start = time.perf_counter()
    received = pickle.loads(sent)  # the bytes this process pickled just above, as the writer does
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/window.db")
        with store.transaction() as tx:
            for name, args in received.calls:
                getattr(tx, name)(*args)
        store.dispose()
    flat = received.messages and isinstance(received.messages[0], tuple)  # a baseline's
    encoded = sum(
        len(v) for batch in ([received.messages] if flat else received.messages) for _, v in batch
    )
    writer_seconds = time.perf_counter() - start
    writer_rise = meter.rise_mb()
    return {
        "package": str(Path(sparsewatch.__file__).parent.parent),
        "documents": n,
        "measure": "tracemalloc peak" if traced else "peak RSS rise",
        "seconds": seconds,
        "peak_rss_before_mb": before,
        "peak_rise_mb": rise,
        "peak_rise_kb_per_document": 1024 * rise / n,
        "handover_seconds": handover_seconds,
        "handover_pickle_bytes_per_document": len(sent) / n,
        "peak_rise_with_handover_mb": handover_rise,
        "peak_rise_with_handover_kb_per_document": 1024 * handover_rise / n,
        "writer_seconds": writer_seconds,
        "message_bytes_per_document": encoded / n,
        "peak_rise_with_writer_mb": writer_rise,
        "peak_rise_with_writer_kb_per_document": 1024 * writer_rise / n,
        "novel": int(comp.documents.novel.sum())
        if hasattr(comp.documents, "novel")
        else sum(r["novel"] for r in comp.documents),  # a baseline before 2026-11-27: dict rows
        "emerging_alerts": sum(a["kind"] == "emerging_topic" for a in comp.alerts),
    }


def _run(n: int, site: str | None, traced: bool) -> dict:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, __file__, "--case", str(n), *(["--traced"] if traced else [])],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    row = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(row), flush=True)
    return row


def _measured(row: dict, measure: str) -> dict:
    return row["traced"] if measure == "traced" else row


def _install(ref: str, folder: Path) -> str:
    """The package of commit ``ref`` laid out for import under ``folder`` (its folders placed as
    its ``pyproject.toml`` maps them into the ``sparsewatch`` namespace; no dependencies)."""
    src, site = folder / "src", folder / "site"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    mapping = tomllib.loads((src / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, path in sorted(mapping["package-dir"].items()):  # parents before children
        shutil.copytree(src / path, site / package.replace(".", "/"), dirs_exist_ok=True)
    return str(site)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="10000,40000,160000", help="window sizes, in documents")
    ap.add_argument("--baseline", default=None, help="git commit to compare with")
    args = ap.parse_args()
    if args.case is not None:
        print(json.dumps(_case(args.case, args.traced)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: dict[str, list[dict]] = {"current": []}
    with tempfile.TemporaryDirectory() as tmp:
        site = _install(args.baseline, Path(tmp)) if args.baseline else None
        for n in sizes:
            for key, where in (("current", None), ("baseline", site)):
                if key == "current" or site is not None:
                    row = _run(n, where, traced=False)
                    row["traced"] = _run(n, where, traced=True)
                    rows.setdefault(key, []).append(row)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    result = {
        "command": "python benchmarks/window_memory.py " + " ".join(sys.argv[1:]),
        "head": commit,
        "baseline": args.baseline,
        "rows": rows,
    }
    if "baseline" in rows:
        for stage in ("peak_rise_mb", "peak_rise_with_handover_mb", "peak_rise_with_writer_mb"):
            for measure in ("rss", "traced"):
                result[f"ratio_current_vs_baseline.{measure}.{stage}"] = [
                    _measured(c, measure)[stage] / max(_measured(b, measure)[stage], 1e-9)
                    for c, b in zip(rows["current"], rows["baseline"], strict=True)
                ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "window_memory.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
