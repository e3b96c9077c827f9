"""Emerging-topic alerts of the detector worker against the stories of a synthetic stream.

The worker's dynamic NMF (Saha and Sindhwani) adds ``detector.emerging_per_window`` emerging
topics (``K_em``) per window and the worker raises an ``emerging_topic`` alert for each one that
dominates at least ``emerging_min_documents`` of the window's documents. This benchmark runs the
transport-free core (windowing + ``process_window``, the product's configuration) over the
synthetic tweet stream of the sustained pipeline benchmark (stream ``alpha``, seed 21; topics
born at random times between 5% and 90% of the stream) and scores every alert against the truth:

* a topic's own words are the words of which at least 90% of the documents carry its label (the
  generator's own keywords; category, background and shared-pool words are spread wider);
* an alert names the topic whose own words are most among its terms (at least 2 of its at most
  8 terms of positive weight), else it is unmatched;
* a topic born after the first window (the warm-up) is **caught** when an alert names it within
  ``--horizon`` windows of its birth; recall is the fraction of those topics caught, the delay
  is counted in windows from the window of its first document.

    python benchmarks/emerging_topics.py --repeat-windows 3,0      # K_em = 1, 2, 3, 5
    python benchmarks/emerging_topics.py --documents 10000 --emerging 1

Writes ``benchmarks/results/emerging_topics.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from pipeline_throughput import _config, closed_windows
from sparsewatch.consumers.detector_core import build_models, process_window
from sparsewatch.replay.synthetic import generate_stream
from threadpoolctl import threadpool_limits

RESULTS = Path(__file__).resolve().parent / "results"
WORD = re.compile(r"[a-z]+")


def own_words(docs: list[dict]) -> dict[str, set[str]]:
    """Per topic, the words of which at least 90% of the documents (3 at least) carry its label:
    the topic's own keywords (category, background and shared-pool words are spread wider)."""
    with_topic: dict[str, Counter[str]] = defaultdict(Counter)
    count: Counter[str] = Counter()
    for d in docs:
        for w in set(WORD.findall(d["text"].lower())):
            with_topic[w].update(d["labels"])
            count[w] += 1
    out: dict[str, set[str]] = defaultdict(set)
    for w, topics in with_topic.items():
        topic, n = topics.most_common(1)[0]
        if count[w] >= 3 and n >= 0.9 * count[w]:
            out[topic].add(w)
    return out


def run(docs: list[dict], n_emerging: int, horizon: int, repeat_windows: int) -> dict:
    config = _config("unused", "unused", "sqlite://", 10)
    config.detector.emerging_per_window = n_emerging
    config.detector.emerging_repeat_windows = repeat_windows
    closed = closed_windows(docs, config, "alpha")
    models = build_models(config.detector)
    own = own_words(docs)
    birth_window: dict[str, int] = {}
    alerts = []
    cpu, topics_s = time.process_time(), 0.0
    for w, window in enumerate(closed):
        for b in window.items:
            for label in docs[b.offset]["labels"]:
                birth_window.setdefault(label, w)
        out = process_window(models, window, config.detector)
        topics_s += out.timings["topics_s"]
        terms = {row["topic_id"]: [t for t, _ in row["terms"]] for row in out.topics}
        for a in out.alerts:
            if a["kind"] != "emerging_topic":
                continue
            top = terms[int(a["subject_id"].removeprefix("topic-"))]
            hits = {t: len(own[t].intersection(top)) for t in own}
            best = max(hits, key=lambda t: (hits[t], t))
            alerts.append(
                {
                    "window": w,
                    "terms": top,
                    "topic": best if hits[best] >= 2 else None,
                    "own_terms": hits[best],
                }
            )
    cpu = time.process_time() - cpu
    new = {t: b for t, b in birth_window.items() if b >= 1}
    caught: dict[str, int] = {}
    for a in alerts:
        t = a["topic"]
        if t in new and 0 <= a["window"] - new[t] <= horizon:
            caught.setdefault(t, a["window"] - new[t])
    timely = sum(
        1 for a in alerts if a["topic"] in new and 0 <= a["window"] - new[a["topic"]] <= horizon
    )
    matched = sum(1 for a in alerts if a["topic"] is not None)
    named = [a["topic"] for a in alerts if a["topic"] is not None]
    return {
        "n_emerging": n_emerging,
        "repeat_windows": repeat_windows,
        "alerts_repeating_a_named_topic": len(named) - len(set(named)),
        "windows": len(closed),
        "alerts": len(alerts),
        "alerts_naming_a_topic": matched,
        "alerts_naming_a_new_topic_in_time": timely,
        "new_topics": len(new),
        "new_topics_caught": len(caught),
        "recall": len(caught) / max(len(new), 1),
        "median_delay_windows": float(np.median(list(caught.values()))) if caught else None,
        "mean_own_terms_per_alert": float(np.mean([a["own_terms"] for a in alerts]))
        if alerts
        else None,
        "cpu_s": cpu,
        "topics_s": topics_s,
        "alert_list": alerts,
        "caught": caught,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--documents", type=int, default=30000)
    ap.add_argument("--emerging", default="1,2,3,5", help="K_em values, comma-separated")
    ap.add_argument("--horizon", type=int, default=5, help="windows after a topic's birth")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument(
        "--repeat-windows",
        default="3",
        help="detector.emerging_repeat_windows values, comma-separated (0: every topic alerted)",
    )
    args = ap.parse_args()
    docs = generate_stream(args.documents, kind="tweet", stream="alpha", seed=args.seed)
    docs.sort(key=lambda d: d["timestamp"])
    out = {
        "command": "python benchmarks/emerging_topics.py "
        f"--documents {args.documents} --emerging {args.emerging} --horizon {args.horizon} "
        f"--seed {args.seed} --repeat-windows {args.repeat_windows}",
        "machine": f"{platform.machine()}, 2 cores; python {platform.python_version()}",
        "runs": [],
    }
    with threadpool_limits(1):
        for k in (int(x) for x in args.emerging.split(",")):
            for r in (int(x) for x in args.repeat_windows.split(",")):
                res = run(docs, k, args.horizon, r)
                out["runs"].append(res)
                print(
                    f"n_emerging={k}, repeat_windows={r}: {res['alerts']} alerts over "
                    f"{res['windows']} windows, {res['alerts_naming_a_topic']} name a topic "
                    f"({res['alerts_repeating_a_named_topic']} one already named), "
                    f"{res['alerts_naming_a_new_topic_in_time']} a new one in time; caught "
                    f"{res['new_topics_caught']}/{res['new_topics']} new topics, median delay "
                    f"{res['median_delay_windows']} windows; {res['cpu_s']:.1f} s CPU "
                    f"({res['topics_s']:.1f} s in the topic models)",
                    flush=True,
                )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "emerging_topics.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
