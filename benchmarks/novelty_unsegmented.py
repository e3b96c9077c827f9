"""Novelty on a stream written without spaces: the tokenizer's ``unsegmented`` modes.

    python benchmarks/novelty_unsegmented.py

Renders the synthetic tweet stream (``generate_stream(8000, seed=0)``, the ``synthetic`` corpus
of ``novelty_quality.py``) into an unsegmented script: every generated word becomes a fixed
string of 2-4 kanji and kana (:func:`script_words`: one string per word, distinct, drawn by a
seeded generator over the sorted vocabulary), and a document's consecutive words are joined
without spaces; hashtags, mentions and URLs stay as they are, separated by spaces (the labels,
the timestamps and the order are the stream's). Then runs the product's default
:class:`~sparsewatch.models.window_detector.Detector` on it with ``unsegmented="words"`` (a run of
word characters is one token: the tokenizer before the option) and ``"bigrams"`` (the default),
and on the Latin original for reference, with the harness and protocol of
``novelty_quality.py`` (``sparsewatch.replay.evaluate``: 1,000-document warm-up, steps of 1,000, a
document is novel when none of its labels appeared in earlier steps; the pooled ROC AUC over the
7 steps with its Hanley-McNeil standard error). Also reports the terms per document, the share
of documents left without a term, and the tokenizer's throughput on each text (CPU time, median
of 5). Writes ``benchmarks/results/novelty_unsegmented.json``; ``benchmarks/unsegmented.md`` has
the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import time
from typing import Any

import numpy as np
from novelty_quality import RESULTS
from sparsewatch.models.text_features import TOKEN_BLOCK, StreamingTfidf, tokenize_flat
from sparsewatch.models.window_detector import DEFAULT_FEATURES, Detector
from sparsewatch.replay.eval_methods import DetectorMethod, SharedTfidf
from sparsewatch.replay.evaluate import evaluate_corpus, make_corpus
from sparsewatch.replay.synthetic import generate_stream

N_DOCS, WARMUP, STEP = 8000, 1000, 1000
# the characters of the rendered words: 1,000 ideographs, the hiragana and the katakana
ALPHABET = np.array(
    [chr(c) for c in range(0x4E00, 0x4E00 + 1000)]
    + [chr(c) for c in range(0x3041, 0x3097)]
    + [chr(c) for c in range(0x30A1, 0x30FB)]
)
_SPECIAL = re.compile(r"[#@]|https?://")


def script_words(vocabulary: set[str], seed: int = 0) -> dict[str, str]:
    """A distinct string of 2-4 characters of :data:`ALPHABET` for every word (deterministic:
    drawn in the words' sorted order by one generator seeded with ``seed``)."""
    rng = np.random.default_rng(seed)
    out: dict[str, str] = {}
    used: set[str] = set()
    for word in sorted(vocabulary):
        while (text := "".join(rng.choice(ALPHABET, size=rng.integers(2, 5)))) in used:
            pass
        out[word] = text
        used.add(text)
    return out


def render(text: str, words: dict[str, str]) -> str:
    """``text`` with its words in the script, consecutive ones joined without a space; a
    hashtag, mention or URL kept as it is, set apart by spaces."""
    parts: list[str] = []
    for token in text.split(" "):
        if _SPECIAL.match(token):
            parts += [" ", token, " "]
        else:
            parts.append(words[token])
    return "".join(parts).strip()


def rendered_stream(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream with every text rendered (:func:`render`)."""
    vocabulary = {t for d in docs for t in d["text"].split(" ") if not _SPECIAL.match(t)}
    words = script_words(vocabulary)
    return [{**d, "text": render(d["text"], words)} for d in docs]


def token_stats(texts: list[str], mode: str) -> dict[str, float]:
    """Mean terms per document, share of documents without a term, distinct terms, and the
    tokenizer's documents per second of CPU time (median of 5 runs over all texts, as
    :class:`StreamingTfidf` tokenizes them: :data:`TOKEN_BLOCK` at a time)."""
    flat, lens = tokenize_flat(texts, unsegmented=mode)
    times = []
    for _ in range(5):
        t0 = time.process_time()
        for lo in range(0, len(texts), TOKEN_BLOCK):
            tokenize_flat(texts[lo : lo + TOKEN_BLOCK], unsegmented=mode)
        times.append(time.process_time() - t0)
    return {
        "terms_per_doc": float(np.mean(lens)),
        "empty_docs": float(np.mean(np.asarray(lens) == 0)),
        "distinct_terms": len(set(flat)),
        "tokenize_docs_per_s": len(texts) / statistics.median(times),
    }


def run() -> dict[str, Any]:
    """Evaluate the three runs; return the JSON-ready result."""
    latin = generate_stream(N_DOCS, seed=0)
    script = rendered_stream(latin)
    runs = {
        "script, unsegmented=words": (script, "words"),
        "script, unsegmented=bigrams": (script, "bigrams"),
        "latin original (reference)": (latin, "bigrams"),
    }
    out: dict[str, Any] = {
        "example": {"latin": latin[1]["text"], "script": script[1]["text"]},
        "runs": {},
    }
    for name, (docs, mode) in runs.items():
        t0 = time.perf_counter()
        corpus = make_corpus(name, docs, WARMUP, STEP)
        features = StreamingTfidf(**{**DEFAULT_FEATURES, "unsegmented": mode})
        method = DetectorMethod(Detector(features))
        result = evaluate_corpus(corpus, {"detector": method}, SharedTfidf(unsegmented=mode))
        summary = result["methods"]["detector"]
        out["protocol"] = result["protocol"]
        out["runs"][name] = {
            "unsegmented": mode,
            "pooled_auc_none": summary["pooled_auc_none"],
            "pooled_auc_none_se": summary["pooled_auc_none_se"],
            "mean_auc_none": summary["mean_auc_none"],
            "pooled_auc_any": summary["pooled_auc_any"],
            "detector_time_s": summary["warmup_time_s"] + sum(summary["time_s"]),
            **token_stats([d["text"] for d in docs], mode),
            "wall_time_s": time.perf_counter() - t0,
        }
        print(name, json.dumps(out["runs"][name]), flush=True)
    out["machine"] = f"{platform.machine()}, python {platform.python_version()}"
    return out


def main() -> None:
    # (no options: --help prints this docstring instead of running the benchmark)
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    t0 = time.perf_counter()
    out = run()
    out["wall_time_s"] = time.perf_counter() - t0
    path = RESULTS / "novelty_unsegmented.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False))
    print(f"wrote {path} in {out['wall_time_s']:.0f} s")


if __name__ == "__main__":
    main()
