"""The per-window core's throughput, this checkout against a baseline commit, paired.

``pipeline_throughput.run_core`` (windowing and ``process_window`` over two synthetic tweet
streams, message parsing included, one BLAS thread) in a fresh process per run, alternating the
baseline (its package laid out from ``git archive``, :func:`window_memory._install`) and this
checkout; the ratio of each pair (this / baseline) is reported with its median, so that a
machine's load, which moves both runs of a pair alike, cancels out.

    python benchmarks/core_ab.py --baseline c82350f --documents 12000 --repeats 6
    python benchmarks/core_ab.py --baseline c82350f --documents 12000 --repeats 6 --fixed-dictionary

Writes ``benchmarks/results/core_ab[_fixed].json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _child(documents: int, fixed: bool) -> None:
    """One run of the core in this process; prints its result as JSON."""
    sys.path.insert(0, str(HERE))
    import pipeline_throughput as pt
    from threadpoolctl import threadpool_limits

    if fixed:
        pt.DETECTOR_ENV.update(pt.FIXED_DICTIONARY)
    docs = pt._documents(documents)
    with threadpool_limits(1):
        print(json.dumps(pt.run_core(docs, 10)))


def _run(site: str | None, documents: int, fixed: bool, cwd: str) -> float:
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site
    command = [sys.executable, __file__, "--child", "--documents", str(documents)]
    out = subprocess.run(
        command + (["--fixed-dictionary"] if fixed else []),
        env=env,
        capture_output=True,
        text=True,
        cwd=cwd,  # not the checkout: its sparsewatch/ would shadow the baseline's site
    )
    if out.returncode != 0:
        raise SystemExit(f"the run of {site or 'this checkout'} failed:\n{out.stderr}")
    return float(json.loads(out.stdout)["docs_per_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="c82350f", help="git commit to compare with")
    ap.add_argument("--documents", type=int, default=12000)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--fixed-dictionary", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.documents, args.fixed_dictionary)
        return
    sys.path.insert(0, str(HERE))
    from window_memory import _install

    tmp = tempfile.mkdtemp()
    site = _install(args.baseline, Path(tmp))
    runs: dict[str, list[float]] = {"baseline": [], "this": []}
    for _ in range(args.repeats):
        for key, where in (("baseline", site), ("this", None)):
            runs[key].append(_run(where, args.documents, args.fixed_dictionary, tmp))
            print(key, round(runs[key][-1]), flush=True)
    ratios = [a / b for a, b in zip(runs["this"], runs["baseline"], strict=True)]
    out = {
        "command": " ".join(["python benchmarks/core_ab.py", *sys.argv[1:]]),
        "baseline": args.baseline,
        "documents": args.documents,
        "fixed_dictionary": args.fixed_dictionary,
        "docs_per_s": runs,
        "median_docs_per_s": {k: statistics.median(v) for k, v in runs.items()},
        "ratios_this_over_baseline": ratios,
        "median_ratio": statistics.median(ratios),
    }
    print(json.dumps({k: out[k] for k in ("median_docs_per_s", "median_ratio")}))
    RESULTS.mkdir(exist_ok=True)
    name = "core_ab_fixed.json" if args.fixed_dictionary else "core_ab.json"
    (RESULTS / name).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
