"""Novel documents grouped into stories: alerts per window against ``detector.novel_similarity``.

    python benchmarks/novel_stories.py

Runs the detector worker's per-window core (:func:`sparsewatch.consumers.detector_core.
process_window`, default :class:`~sparsewatch.config.DetectorConfig`) over three corpora in
windows of 1,000 documents in time order: the synthetic tweet and news streams
(``generate_stream(8000, seed=3)``, ``kind="news"``) and Reuters-21578 (``../shared/data``, by
date, the first 11,000 stories). For each ``novel_similarity`` it counts the novel documents,
the ``novel_document`` alerts they raise (one per story, :mod:`sparsewatch.models.stories`), the
grouped ones among them (of 2 or more documents) and the purity of those grouped stories (share
of an alert's documents carrying its most common label set: the synthetic topic, Reuters' TOPICS;
1.0 = the alert mixes no stories), and the time the grouping takes per window against the
window's whole computation (medians). Purity is judged only where the labels can judge it: a
single-document alert is pure by construction, and a Reuters story without TOPICS (43% of them)
has no label to compare, so ``grouped_purity_mean`` and ``grouped_mixed_alerts`` cover only the
grouped alerts whose documents all carry labels; ``grouped_alerts_unjudged`` counts the grouped
alerts with an untagged document. The novel flags do not depend on the setting, only the alerts
do. Writes ``benchmarks/results/novel_stories.json``; ``benchmarks/novelty_quality.md`` has the
table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from novelty_quality import RESULTS
from sparsewatch.consumers.detector_core import build_models, novel_alerts, process_window
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow
from sparsewatch.replay.synthetic import generate_stream

from sparsewatch.config import DetectorConfig

SIMILARITIES = (0.0, 0.3, 0.5, 0.7, 0.9)
WINDOW = 1000
REUTERS = Path(__file__).resolve().parents[2] / "shared" / "data" / "reuters21578.jsonl.gz"


def _synthetic(kind: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(d["text"], tuple(d["labels"])) for d in generate_stream(8000, seed=3, kind=kind)]


def _reuters() -> list[tuple[str, tuple[str, ...]]]:
    with gzip.open(REUTERS, "rt", encoding="utf-8") as f:
        stories = [json.loads(line) for line in f]
    stories.sort(key=lambda d: (str(d.get("date")), d["id"]))
    out = []
    for d in stories[:11000]:
        text = " ".join(str(d.get(k) or "") for k in ("title", "body"))
        out.append((text, tuple(sorted(d.get("topics") or ()))))  # () = untagged: unjudged
    return out


def _windows(corpus: list[tuple[str, tuple[str, ...]]]) -> list[ClosedWindow]:
    hour = 3_600_000
    windows = []
    for seq, start in enumerate(range(0, len(corpus) - WINDOW + 1, WINDOW)):
        items = [
            Buffered(Document(f"{start + i}", text, seq * hour + i, "s"), 0, start + i)
            for i, (text, _) in enumerate(corpus[start : start + WINDOW])
        ]
        windows.append(ClosedWindow("s", seq, seq * hour, (seq + 1) * hour, items, "count"))
    return windows


def corpus_report(corpus: list[tuple[str, tuple[str, ...]]]) -> dict[str, Any]:
    """Alerts, grouped alerts, their purity and grouping time per similarity, over the corpus's
    windows."""
    labels = {str(i): lab for i, (_, lab) in enumerate(corpus)}
    config = DetectorConfig()
    models = build_models(config)
    stats: dict[float, dict[str, Any]] = {
        s: {"alerts": 0, "grouped": 0, "unjudged": 0, "purity": [], "grouping_s": []}
        for s in SIMILARITIES
    }
    novel_total, window_s = 0, []
    results = []  # the detector's result of each window: its features, as the core groups by
    score = models.detector.process_window
    models.detector.process_window = lambda texts: results.append(score(texts)) or results[-1]
    for window in _windows(corpus):
        t0 = time.perf_counter()
        comp = process_window(models, window, config)
        window_s.append(time.perf_counter() - t0)
        if not comp.documents.novel.any():
            continue
        novel_total += int(comp.documents.novel.sum())
        features = results[-1].features
        for s in SIMILARITIES:
            t1 = time.perf_counter()
            alerts = novel_alerts(comp.documents, features=features, min_similarity=s)
            stats[s]["grouping_s"].append(time.perf_counter() - t1)
            stats[s]["alerts"] += len(alerts)
            for a in alerts:
                story = [labels[d] for d in (a["subject_id"], *a["related_ids"])]
                if len(story) < 2:
                    continue  # one document: pure by construction, judges nothing
                stats[s]["grouped"] += 1
                if not all(story):
                    stats[s]["unjudged"] += 1  # an untagged document: the labels cannot judge
                    continue
                stats[s]["purity"].append(Counter(story).most_common(1)[0][1] / len(story))
    return {
        "documents": len(corpus),
        "novel_documents": novel_total,
        "window_s_median": statistics.median(window_s),
        "by_similarity": {
            str(s): {
                "alerts": v["alerts"],
                "documents_per_alert": novel_total / max(v["alerts"], 1),
                # alerts of 2+ documents; of them, those with an untagged document (no label
                # set to compare) and, over the rest, the purity and the count of mixed ones
                "grouped_alerts": v["grouped"],
                "grouped_alerts_unjudged": v["unjudged"],
                "grouped_alerts_judged": len(v["purity"]),
                "grouped_purity_mean": statistics.fmean(v["purity"]) if v["purity"] else None,
                "grouped_mixed_alerts": sum(p < 1 for p in v["purity"]),
                "grouping_s_median": statistics.median(v["grouping_s"]),
                "grouping_share_of_window": statistics.median(v["grouping_s"])
                / statistics.median(window_s),
            }
            for s, v in stats.items()
        },
    }


def main() -> None:
    # (no options: --help prints this docstring instead of running the benchmark)
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    corpora = {
        "synthetic-tweets": _synthetic("tweet"),
        "synthetic-news": _synthetic("news"),
        "reuters": _reuters(),
    }
    out = {
        "command": "python benchmarks/novel_stories.py",
        "machine": platform.platform(),
        "window": WINDOW,
        "corpora": {name: corpus_report(docs) for name, docs in corpora.items()},
    }
    path = RESULTS / "novel_stories.json"
    path.write_text(json.dumps(out, indent=1))
    for name, report in out["corpora"].items():
        for s, row in report["by_similarity"].items():
            purity = row["grouped_purity_mean"]
            print(
                f"{name:17} sim {s:4}: {report['novel_documents']:4} novel -> {row['alerts']:4} "
                f"alerts, {row['grouped_alerts']} grouped ({row['grouped_alerts_unjudged']} "
                f"unjudged), purity of the judged "
                f"{'-' if purity is None else f'{purity:.3f}'} "
                f"({row['grouped_mixed_alerts']} mixed), "
                f"grouping {1000 * row['grouping_s_median']:.1f} ms "
                f"({100 * row['grouping_share_of_window']:.2f}% of a window)"
            )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
