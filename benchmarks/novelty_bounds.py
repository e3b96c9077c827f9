"""Memory of the default Detector on a burst window and on very long documents (Reuters-21578).

Each case runs in a fresh process (peak RSS is per process): the default Detector learns four
windows of 1,000 stories (the vocabulary reaches its 20,000-term cap), then processes the measured
window; reported are the peak RSS before and after it, its seconds, the size of the detector's
state (what a checkpoint stores) and the number of flagged documents.

* burst: one window of 8,000 stories, with ``max_step_documents`` = 1,000 (the default: coded in
  blocks, learnt in 8 OIADMM steps) against ``None`` (one step over the whole window, the
  baseline);
* long documents: a window of 1,000 whose last 20 documents are 100 kB concatenations of stories,
  against the same window of ordinary stories only.

    python benchmarks/novelty_bounds.py      # about 3 minutes; writes results/novelty_bounds.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time
from pathlib import Path
from typing import Any

from novelty_speed import DATA, load_reuters
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.window_detector import Detector
from threadpoolctl import threadpool_limits

RESULTS = Path(__file__).resolve().parent / "results"


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _case(kind: str, bound: int | None, out: Any) -> None:
    texts = [d["text"] for d in load_reuters(DATA / "reuters21578.jsonl.gz")]
    det = Detector(model=OnlineL1NoveltyDetector(max_step_documents=bound))
    with threadpool_limits(1):
        for i in range(4):
            det.process_window(texts[1000 * i : 1000 * (i + 1)])
        if kind == "burst":
            window = texts[4000:12000]
        elif kind == "long":
            longs = [" ".join(texts[5000 + 60 * j : 5060 + 60 * j])[:100_000] for j in range(20)]
            window = texts[4000:4980] + longs
        else:
            window = texts[4000:5000]
        before = _peak_mb()
        start = time.perf_counter()
        result = det.process_window(window)
        seconds = time.perf_counter() - start
    out.put(
        {
            "case": kind,
            "max_step_documents": bound,
            "documents": len(window),
            "seconds": seconds,
            "peak_rss_before_mb": before,
            "peak_rss_after_mb": _peak_mb(),
            "state_mb": sum(v.nbytes for v in det.get_state().values()) / 2**20,
            "flagged": int(result.novel.sum()),
            "terms": result.n_terms,
        }
    )


def run(kind: str, bound: int | None) -> dict:
    queue: mp.Queue = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=_case, args=(kind, bound, queue))
    proc.start()
    row = queue.get()
    proc.join()
    print(row, flush=True)
    return row


def main() -> None:
    # no options: --help says what it runs instead of starting the run
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    rows = [
        run("burst", 1000),
        run("burst", None),
        run("ordinary", 1000),
        run("long", 1000),
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "novelty_bounds.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
