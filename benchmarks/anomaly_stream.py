"""The anomaly worker's flag rate over a stream, against a baseline commit's anomaly worker.

The anomaly worker fits DL-OCSVM on a reference period of the detector's output and flags the
documents of every later window that fall outside it; ``anomaly.contamination`` (default 0.05)
is the fraction it is meant to flag. The detector's representation is not stationary: its
dictionary grows from 200 atoms to its cap and its vocabulary turns over, so a model fitted on
the first documents flags ever more of the stream until it is refitted.

For each corpus, the transport-free detector core (the product's default configuration; the
working tree's code) computes every window and its ``<prefix>.scores`` messages, once. The
messages are then fed, window by window and as the worker parses them, to the anomaly worker's
per-stream state (:class:`~sparsewatch.consumers.anomaly_worker.AnomalyStreamState`, default
configuration) of the working tree and of ``--baseline REF`` (its package laid out from
``git archive``, imported in a child process instead of the working tree's). Two runs each:

* **calibration**: the stream as it is; per window of at least 100 documents, the fraction
  flagged (total, median, 90th percentile and largest over the windows);
* **foreign documents**: every fifth scored window also carries 5% more documents, drawn
  (seeded) from the other corpus's messages (news stories in a tweet stream, tweets in a news
  stream); reported: the fraction of them flagged (recall at the operating point), the ranking
  AUC of their anomaly scores against the window's own documents (median over those windows),
  and the own documents' flag rate.

Corpora: Reuters-21578 (``../shared/data``, all 21,577 non-empty stories in time order, one-day
windows, the default) and 60,000 synthetic tweets (``generate_stream(seed=21)``, 6-hour windows).

    python benchmarks/anomaly_stream.py --baseline 2c92237   # ~4 min; results/anomaly_stream.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
INJECT_EVERY = 5
INJECT_FRACTION = 0.05
MIN_WINDOW = 100


def _corpus(name: str) -> tuple[list[dict], str]:
    from sparsewatch.replay.evaluate import load_reuters
    from sparsewatch.replay.synthetic import generate_stream

    if name == "reuters":
        docs = load_reuters(DATA / "reuters21578.jsonl.gz", labelled_only=False)
        return [{**d, "stream": "s"} for d in docs if d["text"]], "1d"
    return generate_stream(60_000, kind="tweet", stream="s", seed=21), "6h"


def detector_messages(name: str) -> list[list[bytes]]:
    """Per window, the ``<prefix>.scores`` messages the detector core sends (working tree)."""
    from pipeline_throughput import closed_windows
    from sparsewatch.consumers.detector_core import build_models, process_window
    from threadpoolctl import threadpool_limits

    from sparsewatch.config import load_config

    docs, size = _corpus(name)
    config = load_config(env={"SPARSEWATCH_WINDOWS_SIZE": size})
    models = build_models(config.detector)
    windows = []
    with threadpool_limits(1):
        for window in closed_windows(docs, config, "s"):
            computed = process_window(models, window, config.detector)
            if computed.messages is not None:
                windows.append([value for _, value in computed.messages])
    return windows


def _with_foreign(windows: list[list[bytes]], foreign: list[bytes]) -> list[list[dict]]:
    """Every ``INJECT_EVERY``-th window with ``INJECT_FRACTION`` more documents drawn from
    ``foreign`` (renumbered into the window; ``"foreign": true`` marks them for the report)."""
    out = []
    for w, msgs in enumerate(windows):
        own = [json.loads(m) for m in msgs]
        extra = []
        if w % INJECT_EVERY == INJECT_EVERY - 1:
            rng = np.random.default_rng(w)
            picks = rng.choice(len(foreign), max(1, round(INJECT_FRACTION * len(own))), False)
            extra = [{**json.loads(foreign[i]), "foreign": True} for i in picks.tolist()]
        n, seq = len(own) + len(extra), own[0]["window_seq"]
        out.append(
            [
                {**m, "stream": "s", "window_seq": seq, "doc_id": f"{w}-{i}", "index": i, "n": n}
                for i, m in enumerate(own + extra)
            ]
        )
    return out


def replay_anomaly(windows: list[list[dict]]) -> dict:
    """Feed the windows to the anomaly worker's state (this process's package, default
    configuration); per window: its size, flags, scores and foreign marks."""
    from sparsewatch.consumers.anomaly_worker import AnomalyStreamState

    from sparsewatch.config import load_config

    try:
        from sparsewatch.consumers.score_messages import parse_scored
    except ImportError:  # a baseline from before the consumers were split (a408e36)
        from sparsewatch.consumers.anomaly_worker import parse_scored  # type: ignore[no-redef]

    state = AnomalyStreamState("s", load_config(env={}), None)
    per_window = []
    cpu = time.process_time()
    offset = 0
    for msgs in windows:
        outputs = []
        for m in msgs:
            outputs += state.add(parse_scored(json.dumps(m).encode()), 0, offset, now=0.0)
            offset += 1
        (out,) = outputs
        calls = dict(out.calls)
        if "upsert_anomaly_scores" not in calls:
            continue
        rows = calls["upsert_anomaly_scores"][0]
        per_window.append(
            {
                "flags": [r["anomaly"] for r in rows],
                "scores": [r["anomaly_score"] for r in rows],
                "foreign": [bool(m.get("foreign")) for m in msgs],
            }
        )
    return {"cpu_s": time.process_time() - cpu, "windows": per_window}


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a foreign document scores above an own one), ties counted half."""
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def summarise(replayed: dict) -> dict:
    rates, own_flags, own_n, caught, foreign_n, aucs = [], 0, 0, 0, 0, []
    for w in replayed["windows"]:
        flags, scores = np.array(w["flags"]), np.array(w["scores"])
        foreign = np.array(w["foreign"])
        own = ~foreign
        own_flags += int(flags[own].sum())
        own_n += int(own.sum())
        if own.sum() >= MIN_WINDOW:
            rates.append(float(flags[own].mean()))
        if foreign.any():
            caught += int(flags[foreign].sum())
            foreign_n += int(foreign.sum())
            aucs.append(_auc(scores[foreign], scores[own]))
    r = np.array(rates)
    out = {
        "windows_scored": len(replayed["windows"]),
        "documents_scored": own_n,
        "flag_rate_total": own_flags / max(own_n, 1),
        "flag_rate_median": float(np.median(r)),
        "flag_rate_p90": float(np.quantile(r, 0.9)),
        "flag_rate_max": float(r.max()),
        "cpu_s": replayed["cpu_s"],
    }
    if foreign_n:
        out |= {
            "foreign_documents": foreign_n,
            "foreign_recall": caught / foreign_n,
            "foreign_auc_median": float(np.median(aucs)),
        }
    return out


def _install(ref: str, folder: Path) -> str:
    """The package of commit ``ref`` laid out for import under ``folder``."""
    from window_memory import _install as install

    return install(ref, folder)


def _child(site: str | None, windows_file: Path) -> dict:
    """:func:`replay_anomaly` in a child process importing ``site``'s package (or ours)."""
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(windows_file)],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # not the checkout: its sparsewatch/ would shadow the site
    )
    if out.returncode != 0:
        raise SystemExit(f"the child for {site or 'this checkout'} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--baseline", default=None, help="git commit to compare with")
    ap.add_argument("--corpora", default="reuters,tweets")
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(replay_anomaly(json.loads(args.child.read_text()))))
        return
    corpora = args.corpora.split(",")
    detector_s: dict[str, float] = {}
    messages: dict[str, list[list[bytes]]] = {}
    for name in ("reuters", "tweets"):
        t = time.perf_counter()
        messages[name] = detector_messages(name)
        detector_s[name] = time.perf_counter() - t
        print(f"{name}: {len(messages[name])} windows in {detector_s[name]:.0f} s", flush=True)
    result: dict = {
        "command": "python benchmarks/anomaly_stream.py " + " ".join(sys.argv[1:]),
        "baseline": args.baseline,
        "machine": platform.platform(),
        "detector_seconds": detector_s,
        "corpora": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        site = _install(args.baseline, Path(tmp)) if args.baseline else None
        for name in corpora:
            other = "tweets" if name == "reuters" else "reuters"
            foreign = [m for w in messages[other] for m in w]
            runs = {
                "calibration": [[json.loads(m) for m in w] for w in messages[name]],
                "foreign": _with_foreign(messages[name], foreign),
            }
            for run, windows in runs.items():
                path = Path(tmp) / f"{name}-{run}.json"
                path.write_text(json.dumps(windows))
                for key, where in (("current", None), ("baseline", site)):
                    if key == "baseline" and site is None:
                        continue
                    summary = summarise(_child(where, path))
                    result["corpora"].setdefault(name, {}).setdefault(run, {})[key] = summary
                    print(name, run, key, json.dumps(summary), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "anomaly_stream.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
